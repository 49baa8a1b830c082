package router

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/frontend"
	"tablestore/internal/connpool"
	"tablestore/internal/edm"
	"tablestore/internal/filter"
	"tablestore/internal/rangeclient"
	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

var _ frontend.Backend = (*Router)(nil)

// maxRequestIDLen is the longest client request id kept as it is (a UUID
// is 36 bytes).
const maxRequestIDLen = 64

// requestID is the id of a table request for the master's deduplication:
// the client's x-ms-client-request-id when it sent one (the same on its
// retries), else one made up for this call and kept across the retries
// master.Call makes. client reports the first: a client may send one id
// for many requests, which the master must tell from retries.
func requestID(ctx context.Context) (id []byte, client bool, err error) {
	if id := frontend.ClientRequestID(ctx); id != "" {
		if len(id) > maxRequestIDLen {
			// The master keeps thousands of them: a long one by its hash.
			sum := sha256.Sum256([]byte(id))
			return sum[:], true, nil
		}
		return []byte(id), true, nil
	}
	var made [16]byte
	if _, err := rand.Read(made[:]); err != nil {
		return nil, false, err
	}
	return made[:], false, nil
}

// tableCommandTries bounds the tries of a table command that a master
// answers with a failure of its own (tableCommandRetry).
const tableCommandTries = 5

// tableCommandRetry decides whether a CreateTable or DeleteTable (or an
// idempotent replacement: SetTableACL, SetServiceProperties, SetAccounts)
// whose tries-th call to the masters ended with err is called again, under the
// same request id, and after what pause. A master's failure of its own
// (Internal: an error it did not classify; Unknown: no status at all) says
// nothing of the command, which may have committed (a range start that
// failed after the commit; a leader refusing it while handing off, on a
// master older than its NotLeader answer): answered 500, it is retried by
// the SDK under a new id (the Go SDK sends no x-ms-client-request-id), and
// a committed create or delete then answers 409 or 404 (reliability.md
// 56). Only this front-end holds the id, and the master's request record
// answers a retry under it with the first outcome, so the front-end
// retries, a few times over about the election timeout (a hand-off ends
// within it), before it answers the failure. Every other answer is the command's outcome or, for
// Unavailable and DeadlineExceeded, one masterclient already retried until
// the request's deadline.
func tableCommandRetry(err error, tries int) (time.Duration, bool) {
	switch rpcerr.Parse(err).Code {
	case codes.Internal, codes.Unknown:
	default:
		return 0, false
	}
	if tries >= tableCommandTries {
		return 0, false
	}
	return 50 * time.Millisecond << tries, true
}

// tableCommand runs fn, a table command under one request id or a
// replacing one (what names it in the log), on the master leader
// (masterCall), again while tableCommandRetry says so and ctx allows.
func (r *Router) tableCommand(ctx context.Context, what string, fn func(ctx context.Context, mc pb.MasterServiceClient) error) error {
	for tries := 1; ; tries++ {
		err := r.masterCall(ctx, fn)
		wait, again := tableCommandRetry(err, tries)
		if !again {
			return err
		}
		r.logger.Warn("command failed at the master; retrying", "command", what, "try", tries, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// CreateTable creates a table through the master and adds it, its ranges
// and their leader to the held map (applyTableAnswer), so the new range is
// routable at once without fetching the whole map.
func (r *Router) CreateTable(ctx context.Context, name string) (*pb.Table, error) {
	id, client, err := requestID(ctx)
	if err != nil {
		return nil, err
	}
	var resp *pb.CreateTableResponse
	err = r.tableCommand(ctx, "CreateTable "+name, func(ctx context.Context, mc pb.MasterServiceClient) error {
		var err error
		resp, err = mc.CreateTable(ctx, &pb.CreateTableRequest{Name: name, RequestId: id, ClientRequestId: client})
		return err
	})
	if err != nil {
		return nil, err
	}
	if m := resp.GetMap(); m != nil {
		r.applyTableAnswer(m)
		return resp.GetTable(), nil
	}
	if len(resp.GetRanges()) == 0 {
		// A master that does not send the ranges.
		_ = r.refreshTable(ctx, name)
		return resp.GetTable(), nil
	}
	local := &pb.PartitionMap{Delta: true, Tables: []*pb.Table{resp.GetTable()}, Ranges: resp.GetRanges()}
	if resp.GetLeader() != "" {
		local.Leaders = map[uint64]string{resp.GetRanges()[0].GetRangeId(): resp.GetLeader()}
	}
	r.mu.Lock()
	r.applyLocked(local)
	r.mu.Unlock()
	return resp.GetTable(), nil
}

// DeleteTable deletes a table through the master and drops it from the
// held map (applyTableAnswer: unless the map already holds a newer table
// of that name).
func (r *Router) DeleteTable(ctx context.Context, name string) error {
	id, client, err := requestID(ctx)
	if err != nil {
		return err
	}
	var resp *pb.DeleteTableResponse
	err = r.tableCommand(ctx, "DeleteTable "+name, func(ctx context.Context, mc pb.MasterServiceClient) error {
		var err error
		resp, err = mc.DeleteTable(ctx, &pb.DeleteTableRequest{Name: name, RequestId: id, ClientRequestId: client})
		return err
	})
	if err != nil {
		return err
	}
	if m := resp.GetMap(); m != nil {
		r.applyTableAnswer(m)
		return nil
	}
	// A master that does not send the table's state.
	r.mu.Lock()
	r.applyLocked(&pb.PartitionMap{Delta: true, RemovedTables: []string{name}})
	r.mu.Unlock()
	return nil
}

// Tables lists the cached tables sorted by name.
func (r *Router) Tables(ctx context.Context) ([]*pb.Table, error) {
	r.mu.RLock()
	out := slices.Clone(r.sorted)
	r.mu.RUnlock()
	return out, nil
}

// TablesFrom calls fn with the cached tables named from on, in name order,
// until fn returns false: a page of Query Tables costs its own length, not
// the number of tables.
func (r *Router) TablesFrom(ctx context.Context, from string, fn func(*pb.Table) bool) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	i, _ := r.sortedIndex(from)
	for _, t := range r.sorted[i:] {
		if !fn(t) {
			break
		}
	}
	return nil
}

// Table looks a table up.
func (r *Router) Table(ctx context.Context, name string) (*pb.Table, error) {
	return r.lookupTable(ctx, name)
}

// Write sends ops to the leader of the range holding pk.
func (r *Router) Write(ctx context.Context, table, pk string, ops []*pb.EntityOp) (time.Time, error) {
	t, err := r.lookupTable(ctx, table)
	if err != nil {
		return time.Time{}, err
	}
	// One id for every attempt: a retry after an ambiguous failure (the
	// leader changed after appending the entry) gets the first attempt's
	// result instead of applying the write twice.
	// Time first, then random: the partition servers' request records
	// (keyed by id) then grow at the end of their bbolt bucket instead of
	// dirtying a random page per write (BenchmarkCommitRequestIDs in
	// partitionserver/fsm: 40 % less state-file CPU per write).
	var id [16]byte
	binary.BigEndian.PutUint64(id[:8], uint64(time.Now().UnixNano()))
	if _, err := rand.Read(id[8:]); err != nil {
		return time.Time{}, err
	}
	var ts int64
	unsure := false // an attempt may have applied
	err = r.call(ctx, t, pk, r.writeAttemptTimeout(len(ops)), func(ctx context.Context, addr string, c pb.PartitionServiceClient, d *pb.RangeDescriptor) error {
		resp, err := r.writes.doIn(ctx, addr, c, rangegroup.GroupOf(d), &pb.WriteRequest{RangeId: d.GetRangeId(), Generation: d.GetGeneration(), Ops: ops, RequestId: id[:]})
		if err == nil {
			ts = resp.GetTimestampUnixNano()
			return nil
		}
		if unsure && throttled(err) {
			// A throttle's refusal goes back to the client as 503
			// ServerBusy, which says the request was not processed; after
			// an attempt of unknown outcome it may have been, and the
			// client's retry (a new request, a new id) would apply it
			// again. Only the range's request record can tell: retried
			// like an unknown outcome, and answered as one (500
			// OperationTimedOut, "may or may not have succeeded") if the
			// budget runs out first.
			return rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonUnavailable,
				"throttled after an attempt of unknown outcome: "+err.Error(), nil)
		}
		if ctx.Err() != nil || outcomeUnknown(err) {
			unsure = true
		}
		return err
	})
	if err != nil && unsure && rangeclient.Classify(err).Retry {
		// The budget ran out on a refusal or a silent server after an
		// attempt that may have applied: the last refusal (503
		// ServerBusy at the front-end, "not processed") would not be
		// the truth, and the client's retry carries a new id. Answered
		// as an unknown outcome (500 OperationTimedOut). A definite
		// answer (the range's own, or a table gone) stands.
		err = rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonUnavailable,
			"retry budget spent after an attempt of unknown outcome: "+err.Error(), nil)
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, ts).UTC(), nil
}

// throttled reports a refusal for load that a client should see (503
// ServerBusy with its Retry-After): made before the write's log entry.
func throttled(err error) bool {
	d := rangeclient.Classify(err)
	return d.Retry && d.Busy
}

// outcomeUnknown reports whether a failed write attempt may still have
// been applied: its answer was lost (a leader change after the entry was
// appended, a broken connection, a server going away). Refusals (not the
// leader, a stale range, busy) and the range's own answers are definite.
func outcomeUnknown(err error) bool {
	switch rpcerr.Parse(err).Reason {
	case rpcerr.ReasonUnavailable, "":
		return true
	}
	return false
}

// Get reads one entity from the leader of its range.
func (r *Router) Get(ctx context.Context, table, pk, rk string) (*edm.Entity, error) {
	return r.get(ctx, table, pk, rk, false)
}

// caller picks how a read reaches its range: through the leader
// (linearizable) or any replica, followers first (the secondary endpoint).
func (r *Router) caller(follower bool) func(context.Context, *pb.Table, string, time.Duration, rangeCall) error {
	if follower {
		return r.followerCall
	}
	return r.call
}

func (r *Router) get(ctx context.Context, table, pk, rk string, follower bool) (*edm.Entity, error) {
	t, err := r.lookupTable(ctx, table)
	if err != nil {
		return nil, err
	}
	var b []byte
	err = r.caller(follower)(ctx, t, pk, r.cfg.AttemptTimeout, func(ctx context.Context, addr string, c pb.PartitionServiceClient, d *pb.RangeDescriptor) error {
		req := &pb.GetRequest{RangeId: d.GetRangeId(), Generation: d.GetGeneration(), PartitionKey: pk, RowKey: rk, FollowerRead: follower}
		var resp *pb.GetResponse
		var err error
		if connpool.IsLocal(c) {
			// No call to save in one process (tablestore dev).
			resp, err = c.Get(ctx, req)
		} else {
			resp, err = r.reads.do(ctx, addr, c, req)
		}
		if err == nil {
			b = resp.GetEntity()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	// b is the answer's own copy (a decoded message's field, or a local
	// server's fresh copy out of its store) and nothing changes it: the
	// entity may point into it rather than copy it once more.
	return edm.UnmarshalBinaryOwned(b)
}

// queryBudget is Azure's limit on one query page's work.
const queryBudget = 5 * time.Second

// Query walks the ranges of the table in key order from the continuation (or
// the filter's lower PartitionKey bound), asking each range only for what
// the page still needs. A page ends early at the work budget with a
// continuation, which may fall on a range boundary.
func (r *Router) Query(ctx context.Context, table string, q frontend.Query) (*frontend.Page, error) {
	return r.query(ctx, table, q, false)
}

func (r *Router) query(ctx context.Context, table string, q frontend.Query, follower bool) (*frontend.Page, error) {
	t, err := r.lookupTable(ctx, table)
	if err != nil {
		return nil, err
	}
	var bounds filter.Bounds
	if q.Filter != nil {
		bounds = q.Filter.Bounds()
	}
	page := &frontend.Page{}
	if bounds.PK.Empty() {
		return page, nil
	}
	top := q.Top
	if top <= 0 || top > 1000 {
		top = 1000
	}
	startPK, startRK := "", ""
	if bounds.PK.HasLower {
		startPK = bounds.PK.Lower
	}
	if q.HasNext && (q.NextPK > startPK || (q.NextPK == startPK && q.NextRK > startRK)) {
		startPK, startRK = q.NextPK, q.NextRK
	}
	budgetEnd := time.Now().Add(queryBudget)
	for {
		remaining := top - len(page.Entities)
		var resp *pb.QueryResponse
		// A page may work up to its budget before it answers.
		attemptTimeout := r.cfg.AttemptTimeout + time.Until(budgetEnd)
		err := r.caller(follower)(ctx, t, startPK, attemptTimeout, func(ctx context.Context, addr string, c pb.PartitionServiceClient, d *pb.RangeDescriptor) error {
			req := &pb.QueryRequest{
				RangeId: d.GetRangeId(), Generation: d.GetGeneration(),
				Filter: q.FilterText, Select: q.Select, Limit: uint32(remaining),
				HasStart: true, StartPartitionKey: startPK, StartRowKey: startRK,
				HasLower: bounds.PK.HasLower, LowerPartitionKey: bounds.PK.Lower,
				HasUpper: bounds.PK.HasUpper, UpperPartitionKey: bounds.PK.Upper,
				BudgetMs:     uint32(max(1, time.Until(budgetEnd).Milliseconds())),
				FollowerRead: follower,
			}
			var err error
			resp, err = c.Query(ctx, req)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, b := range resp.GetEntities() {
			e, err := edm.UnmarshalBinary(b)
			if err != nil {
				return nil, err
			}
			page.Entities = append(page.Entities, e)
		}
		if resp.GetHasNext() {
			page.HasNext, page.NextPK, page.NextRK = true, resp.GetNextPartitionKey(), resp.GetNextRowKey()
			return page, nil
		}
		end := resp.GetRange().GetEnd()
		if end == "" || (bounds.PK.HasUpper && (end > bounds.PK.Upper || (end == bounds.PK.Upper && !bounds.PK.UpperInclusive))) {
			return page, nil
		}
		if len(page.Entities) >= top || time.Now().After(budgetEnd) {
			page.HasNext, page.NextPK, page.NextRK = true, end, ""
			return page, nil
		}
		startPK, startRK = end, ""
	}
}

// SetTableACL replaces a table's stored access policies through the master.
func (r *Router) SetTableACL(ctx context.Context, table string, acl []*pb.SignedIdentifier) error {
	t, err := r.lookupTable(ctx, table)
	if err != nil {
		return err
	}
	// Replacing the policies is idempotent: retried on the master's own
	// failure like a table command (tableCommandRetry), without an id.
	err = r.tableCommand(ctx, "SetTableACL "+table, func(ctx context.Context, mc pb.MasterServiceClient) error {
		_, err := mc.SetTableACL(ctx, &pb.SetTableACLRequest{Name: t.GetName(), Acl: acl})
		return err
	})
	if err != nil {
		return err
	}
	return r.refresh(ctx)
}

// ServiceProperties returns an account's service properties document from
// the cached map (empty: defaults); the empty account is the primary one.
// While the master keeps one document for all accounts (an older build),
// every account reads that one, as before.
func (r *Router) ServiceProperties(ctx context.Context, account string) ([]byte, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if account == "" || !r.perAccountProps {
		return r.serviceProperties, nil
	}
	return r.accountProperties[account], nil
}

// RegisteredAccounts returns the master's account registry from the cached
// map.
func (r *Router) RegisteredAccounts() []*pb.StorageAccount {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.accounts
}

// SetAccounts replaces the master's account registry.
func (r *Router) SetAccounts(ctx context.Context, accts []*pb.StorageAccount) error {
	// Idempotent (the registry replaced whole): retried as SetTableACL is.
	err := r.tableCommand(ctx, "SetAccounts", func(ctx context.Context, mc pb.MasterServiceClient) error {
		_, err := mc.SetAccounts(ctx, &pb.SetAccountsRequest{Accounts: accts})
		return err
	})
	if err != nil {
		return err
	}
	return r.refresh(ctx)
}

// SetServiceProperties stores an account's service properties document
// (the empty account: the primary one). An older master ignores the
// account and stores the one document all accounts read, as before.
func (r *Router) SetServiceProperties(ctx context.Context, account string, doc []byte) error {
	// Idempotent (the document replaced whole): retried as SetTableACL is.
	err := r.tableCommand(ctx, "SetServiceProperties "+account, func(ctx context.Context, mc pb.MasterServiceClient) error {
		_, err := mc.SetServiceProperties(ctx, &pb.SetServicePropertiesRequest{Properties: doc, Account: account})
		return err
	})
	if err != nil {
		return err
	}
	return r.refresh(ctx)
}
