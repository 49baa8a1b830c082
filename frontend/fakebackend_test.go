package frontend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/edm"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// fakeBackend is an in-memory Backend for unit tests: the semantics of the
// partition servers (conditional writes, ordered scans with filters and
// continuations) with errors in the rpcerr contract, and a deterministic
// clock so that ETags in golden files are stable.
type fakeBackend struct {
	mu     sync.Mutex
	tables map[string]*fakeTable // lower-case name
	nextID uint64
	now    time.Time
	// failNext, when set, is returned by the next call (then cleared).
	failNext error
	// serviceProps are the stored service properties documents, by
	// account ("" the primary account's).
	serviceProps map[string][]byte
}

type fakeTable struct {
	t        *pb.Table
	entities map[[2]string]*edm.Entity
}

var fakeEpoch = time.Date(2024, 1, 2, 3, 4, 5, 123456700, time.UTC)

func newFakeBackend() *fakeBackend {
	return &fakeBackend{tables: map[string]*fakeTable{}, now: fakeEpoch}
}

func (f *fakeBackend) tick() time.Time {
	f.now = f.now.Add(time.Second)
	return f.now
}

func (f *fakeBackend) takeFailure() error {
	err := f.failNext
	f.failNext = nil
	return err
}

func tableNotFound(name string) error {
	return rpcerr.New(codes.NotFound, rpcerr.ReasonTableNotFound, fmt.Sprintf("table %q not found", name), nil)
}

func (f *fakeBackend) CreateTable(ctx context.Context, name string) (*pb.Table, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.takeFailure(); err != nil {
		return nil, err
	}
	key := strings.ToLower(name)
	if _, ok := f.tables[key]; ok {
		return nil, rpcerr.New(codes.AlreadyExists, rpcerr.ReasonTableAlreadyExists, "table exists", nil)
	}
	f.nextID++
	t := &pb.Table{Name: name, TableId: f.nextID, CreatedUnixNano: f.tick().UnixNano()}
	f.tables[key] = &fakeTable{t: t, entities: map[[2]string]*edm.Entity{}}
	return t, nil
}

func (f *fakeBackend) DeleteTable(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.takeFailure(); err != nil {
		return err
	}
	key := strings.ToLower(name)
	if _, ok := f.tables[key]; !ok {
		return tableNotFound(name)
	}
	delete(f.tables, key)
	return nil
}

func (f *fakeBackend) Tables(ctx context.Context) ([]*pb.Table, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.takeFailure(); err != nil {
		return nil, err
	}
	var out []*pb.Table
	for _, t := range f.tables {
		out = append(out, t.t)
	}
	slices.SortFunc(out, func(a, b *pb.Table) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (f *fakeBackend) Table(ctx context.Context, name string) (*pb.Table, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.takeFailure(); err != nil {
		return nil, err
	}
	t, ok := f.tables[strings.ToLower(name)]
	if !ok {
		return nil, tableNotFound(name)
	}
	return t.t, nil
}

func (f *fakeBackend) Write(ctx context.Context, table, pk string, ops []*pb.EntityOp) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.takeFailure(); err != nil {
		return time.Time{}, err
	}
	t, ok := f.tables[strings.ToLower(table)]
	if !ok {
		return time.Time{}, tableNotFound(table)
	}
	// Validate every op first so that nothing is applied on failure.
	staged := map[[2]string]*edm.Entity{}
	ts := f.now.Add(time.Second)
	for i, op := range ops {
		if op.PartitionKey != pk {
			return time.Time{}, rpcerr.WithIndex(codes.InvalidArgument, rpcerr.ReasonInvalidInput, "partition key mismatch", i)
		}
		k := [2]string{op.PartitionKey, op.RowKey}
		cur, exists := staged[k]
		if !exists {
			cur, exists = t.entities[k]
		} else if cur == nil {
			exists = false
		}
		var in *edm.Entity
		if op.Kind != pb.OpKind_OP_KIND_DELETE {
			e, err := edm.UnmarshalBinary(op.Entity)
			if err != nil {
				return time.Time{}, rpcerr.WithIndex(codes.InvalidArgument, rpcerr.ReasonInvalidInput, err.Error(), i)
			}
			in = e
			in.PartitionKey, in.RowKey, in.Timestamp = op.PartitionKey, op.RowKey, ts
		}
		condOK := func() bool {
			return op.IfMatchAny || (exists && cur.Timestamp.UnixNano() == op.IfMatchUnixNano)
		}
		switch op.Kind {
		case pb.OpKind_OP_KIND_INSERT:
			if exists {
				return time.Time{}, rpcerr.WithIndex(codes.AlreadyExists, rpcerr.ReasonEntityAlreadyExists, "exists", i)
			}
			staged[k] = in
		case pb.OpKind_OP_KIND_REPLACE, pb.OpKind_OP_KIND_MERGE, pb.OpKind_OP_KIND_DELETE:
			if !exists {
				return time.Time{}, rpcerr.WithIndex(codes.NotFound, rpcerr.ReasonEntityNotFound, "not found", i)
			}
			if !condOK() {
				return time.Time{}, rpcerr.WithIndex(codes.FailedPrecondition, rpcerr.ReasonConditionNotSatisfied, "etag mismatch", i)
			}
			switch op.Kind {
			case pb.OpKind_OP_KIND_REPLACE:
				staged[k] = in
			case pb.OpKind_OP_KIND_MERGE:
				m := cur.Clone()
				m.MergeFrom(in)
				m.Timestamp = ts
				staged[k] = m
			default:
				staged[k] = nil
			}
		case pb.OpKind_OP_KIND_INSERT_OR_REPLACE:
			staged[k] = in
		case pb.OpKind_OP_KIND_INSERT_OR_MERGE:
			if exists {
				m := cur.Clone()
				m.MergeFrom(in)
				m.Timestamp = ts
				staged[k] = m
			} else {
				staged[k] = in
			}
		default:
			return time.Time{}, rpcerr.WithIndex(codes.InvalidArgument, rpcerr.ReasonInvalidInput, "bad op kind", i)
		}
	}
	f.now = ts
	for k, e := range staged {
		if e == nil {
			delete(t.entities, k)
		} else {
			t.entities[k] = e
		}
	}
	return ts, nil
}

func (f *fakeBackend) Get(ctx context.Context, table, pk, rk string) (*edm.Entity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.takeFailure(); err != nil {
		return nil, err
	}
	t, ok := f.tables[strings.ToLower(table)]
	if !ok {
		return nil, tableNotFound(table)
	}
	e, ok := t.entities[[2]string{pk, rk}]
	if !ok {
		return nil, rpcerr.New(codes.NotFound, rpcerr.ReasonEntityNotFound, "not found", nil)
	}
	return e.Clone(), nil
}

func (f *fakeBackend) Query(ctx context.Context, table string, q Query) (*Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.takeFailure(); err != nil {
		return nil, err
	}
	t, ok := f.tables[strings.ToLower(table)]
	if !ok {
		return nil, tableNotFound(table)
	}
	keys := make([][2]string, 0, len(t.entities))
	for k := range t.entities {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	top := q.Top
	if top <= 0 || top > 1000 {
		top = 1000
	}
	page := &Page{}
	for _, k := range keys {
		if q.HasNext && (k[0] < q.NextPK || (k[0] == q.NextPK && k[1] < q.NextRK)) {
			continue
		}
		e := t.entities[k]
		if !q.Filter.Match(e) {
			continue
		}
		if len(page.Entities) == top {
			page.HasNext, page.NextPK, page.NextRK = true, k[0], k[1]
			break
		}
		page.Entities = append(page.Entities, e.Project(q.Select))
	}
	return page, nil
}

// The fake keeps table ACLs and service properties too (Settings).
var _ Settings = (*fakeBackend)(nil)

func (f *fakeBackend) SetTableACL(ctx context.Context, table string, acl []*pb.SignedIdentifier) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.takeFailure(); err != nil {
		return err
	}
	t, ok := f.tables[strings.ToLower(table)]
	if !ok {
		return tableNotFound(table)
	}
	nt := proto.Clone(t.t).(*pb.Table)
	nt.Acl = acl
	t.t = nt
	return nil
}

func (f *fakeBackend) ServiceProperties(ctx context.Context, account string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.serviceProps[account], nil
}

func (f *fakeBackend) SetServiceProperties(ctx context.Context, account string, doc []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.takeFailure(); err != nil {
		return err
	}
	if f.serviceProps == nil {
		f.serviceProps = map[string][]byte{}
	}
	f.serviceProps[account] = doc
	return nil
}
