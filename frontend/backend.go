package frontend

import (
	"context"
	"time"

	"tablestore/internal/edm"
	"tablestore/internal/filter"
	pb "tablestore/proto/tablestorepb"
)

// Backend is what the HTTP layer needs from the cluster. Its errors are gRPC
// status errors following package rpcerr (reason TABLE_NOT_FOUND,
// ENTITY_ALREADY_EXISTS, … with a batch "index" in the metadata); the HTTP
// layer maps them to Azure error codes in one table.
type Backend interface {
	// CreateTable creates a table; name is already validated.
	CreateTable(ctx context.Context, name string) (*pb.Table, error)
	// DeleteTable deletes a table and its entities.
	DeleteTable(ctx context.Context, name string) error
	// Tables lists every table, sorted by name (ordinal).
	Tables(ctx context.Context) ([]*pb.Table, error)
	// Table looks a table up case-insensitively.
	Table(ctx context.Context, name string) (*pb.Table, error)

	// Write applies ops (all on PartitionKey pk) atomically and returns the
	// Timestamp given to every written entity (its ETag). It does not
	// keep the ops' Entity bytes after it returns (callers pool them).
	Write(ctx context.Context, table, pk string, ops []*pb.EntityOp) (time.Time, error)
	// Get reads one entity.
	Get(ctx context.Context, table, pk, rk string) (*edm.Entity, error)
	// Query returns one page of a query in PartitionKey, RowKey order.
	Query(ctx context.Context, table string, q Query) (*Page, error)
}

// TableLister is the Backend's ordered walk of its tables, so that a Query
// Tables page costs its own length rather than a copy of every table.
type TableLister interface {
	// TablesFrom calls fn with the tables whose names are >= from
	// (ordinal), in name order, until fn returns false.
	TablesFrom(ctx context.Context, from string, fn func(*pb.Table) bool) error
}

// requestIDKey is the context key of the client's request id.
type requestIDKey struct{}

// WithClientRequestID returns ctx carrying the client's request id
// (x-ms-client-request-id), which the Backend may use to recognise a
// retry of the same request.
func WithClientRequestID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// ClientRequestID is the client's request id carried by ctx, "" if none.
func ClientRequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// AccountRegistry is the Backend's replicated list of storage accounts
// (kept by the master, so every front-end serves the same ones).
type AccountRegistry interface {
	// RegisteredAccounts returns the registry as last seen, without I/O;
	// empty when none was set. The slice is replaced, never modified.
	RegisteredAccounts() []*pb.StorageAccount
	// SetAccounts replaces the registry.
	SetAccounts(ctx context.Context, accts []*pb.StorageAccount) error
}

// SecondaryReader is the Backend's ability to serve the read-access
// secondary endpoint (/<account>-secondary/): reads from range followers
// that never wait on a leader, and how current they are.
type SecondaryReader interface {
	// SecondaryGet and SecondaryQuery are Get and Query served by any
	// replica from its applied state, possibly behind the leader.
	SecondaryGet(ctx context.Context, table, pk, rk string) (*edm.Entity, error)
	SecondaryQuery(ctx context.Context, table string, q Query) (*Page, error)
	// SecondarySync is the time up to which the followers hold every
	// write (Get Service Stats' LastSyncTime); zero when unknown.
	SecondarySync(ctx context.Context) (time.Time, error)
}

// Query is one page request of an entity query.
type Query struct {
	// Filter is the parsed $filter (nil matches everything) and FilterText
	// its text, which the partition servers parse again next to the data.
	Filter     *filter.Filter
	FilterText string
	// Select is the $select projection; nil returns every property.
	Select []string
	// Top is the most entities to return (1..1000).
	Top int
	// Continuation from NextPartitionKey/NextRowKey, when HasNext.
	HasNext bool
	NextPK  string
	NextRK  string
}

// Page is one page of results. HasNext with NextPK/NextRK is the
// continuation; a page may be short or even empty and still continue.
type Page struct {
	Entities []*edm.Entity
	HasNext  bool
	NextPK   string
	NextRK   string
}

// Settings is the Backend's ability to keep per-table stored access policies
// and each account's service properties, replicated by the master. Tables carry their
// policies (pb.Table.Acl); changes reach every front-end through the map.
type Settings interface {
	// SetTableACL replaces a table's stored access policies (at most 5).
	SetTableACL(ctx context.Context, table string, acl []*pb.SignedIdentifier) error
	// ServiceProperties returns the last document SetServiceProperties
	// stored for account; empty means none was set. The empty account is
	// the primary one (Config.AccountName), whose document is the one kept
	// before properties were per account.
	ServiceProperties(ctx context.Context, account string) ([]byte, error)
	// SetServiceProperties stores account's service properties document.
	SetServiceProperties(ctx context.Context, account string, doc []byte) error
}
