package router

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rangeclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// rangeCall is one attempt of a request on a range, at the server whose
// address is addr.
type rangeCall func(ctx context.Context, addr string, c pb.PartitionServiceClient, d *pb.RangeDescriptor) error

// refreshWait bounds how long a retrying request waits for the map after
// a failed round before it asks the range's replicas again: the master
// answers in a millisecond when it has a leader, and while it elects one
// (a second or more) the replicas' refusals name the range's new leader
// (issue 10: writes to a range whose leader changed during a master
// election waited for both elections).
const refreshWait = 200 * time.Millisecond

// slowCallWarn is how long a call to a range retries before it logs, once,
// the failure it is retrying. The Azure SDK gives up on a try after its
// TryTimeout (8 s in the chaos harness), a request whose client went away
// is logged at debug only, and the retry budget (--retry-timeout, 10 s)
// and the request timeout (30 s) can outlive the try. A variable only so
// that tests can shorten it (slowcall_test.go) instead of waiting out 5 s.
var slowCallWarn = 5 * time.Second

// errNoRange is a key that no range of the cached map holds (a split or
// merge it has not seen): retried after a map refresh.
func errNoRange() error {
	return rpcerr.New(codes.Unavailable, rpcerr.ReasonStaleRange, "no range holds the key in the cached map", nil)
}

// call runs fn on the leader of the range holding (table, pk) through the
// shared range client (internal/rangeclient): it follows leader hints,
// leader changes, stale maps and dead or silent servers until it succeeds,
// fails for good, or the retry budget (--retry-timeout) is spent. An
// attempt with no answer within attemptTimeout is abandoned for the next
// replica; every caller's attempt is safe to repeat (reads, writes with a
// request id). ServerBusy goes back to the client with its Retry-After,
// as Azure answers (not a write's after an attempt of unknown outcome:
// Router.Write retries it).
func (r *Router) call(ctx context.Context, table *pb.Table, pk string, attemptTimeout time.Duration, fn rangeCall) error {
	return r.callIn(ctx, table, pk, 0, attemptTimeout, fn)
}

// errRangeChanged: the map no longer has the range a call was for at the
// key (a split, merge or table delete it learned of): a call about that
// range (callIn) ends, since another range's answer says nothing of it.
var errRangeChanged = errors.New("router: the range moved off the key")

// callIn is call for the range rangeID only (any range when 0): when the
// cached map, refreshed or not, puts the key in another range or in none,
// it ends with errRangeChanged instead of refreshing the map again and
// again until its budget is spent.
func (r *Router) callIn(ctx context.Context, table *pb.Table, pk string, rangeID uint64, attemptTimeout time.Duration, fn rangeCall) error {
	var cur *pb.RangeDescriptor
	candidates := func() ([]string, error) {
		if rangeID != 0 {
			d, ok := r.locate(table, pk)
			if !ok || d.GetRangeId() != rangeID {
				return nil, errRangeChanged
			}
			cur = d
			return r.candidates(d), nil
		}
		var d *pb.RangeDescriptor
		var err error
		table, d, err = r.locateNow(ctx, table, pk)
		if err != nil {
			return nil, err
		}
		cur = d
		return r.candidates(d), nil
	}
	start, warned := time.Now(), false
	err := rangeclient.Call(ctx, candidates, r.attempt(&cur, fn), rangeclient.Options{
		OnLeader: func(server string) { r.hint(cur.GetRangeId(), server) },
		OnFailure: func(server string, err error, d rangeclient.Decision) {
			r.countRetry(err)
			if d.Leader == "" {
				r.unhint(cur.GetRangeId(), server)
			}
			if !warned && time.Since(start) >= slowCallWarn {
				// Once per call: what a request that outlives its
				// client (whose cancel is logged at debug) was waiting
				// on (chaos seed 246: seven SDK tries of one page and
				// not a line in the front-end's log).
				warned = true
				r.logger.Warn("range call still failing", "table", table.GetName(), "key", pk,
					"range", cur.GetRangeId(), "server", server, "for", time.Since(start).Round(time.Millisecond), "err", err)
			}
		},
		Refresh:     r.refreshShared,
		RefreshWait: refreshWait,
		// Leader changes and splits settle in tens of milliseconds; keep
		// retries frequent so the client sees a short pause.
		MinBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		AttemptTimeout: attemptTimeout,
		Deadline:       time.Now().Add(r.cfg.RetryTimeout),
	})
	return noReplicaErr(err)
}

// noReplicaErr gives rangeclient.ErrNoCandidate (a range the map lists
// with no server to try), a plain error the front-end would answer 500
// InternalError, the status of a range that cannot be reached now: 503
// ServerBusy, retried by the client.
func noReplicaErr(err error) error {
	if errors.Is(err, rangeclient.ErrNoCandidate) {
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "the range has no replica", nil)
	}
	return err
}

// locateNow returns the range holding pk in the cached map, of table t or,
// when the map no longer has t (deleted since the request looked it up,
// perhaps created again: another id), of the table of that name now. A
// request whose table is gone ends with TABLE_NOT_FOUND (404
// TableNotFound, as Azure answers a request on a deleted table) instead of
// taking the missing range for a stale map for its whole retry budget and
// answering 503 ServerBusy; one whose table was created again goes to the
// new table (as a request arriving now would). A name the map lacks is
// asked of the master, within refreshWait, before the table counts as
// gone: a whole map fetched before a table was created may have replaced
// the table CreateTable or lookupTable added. If the master cannot tell,
// the key is a stale range as before (retried after a map refresh).
func (r *Router) locateNow(ctx context.Context, t *pb.Table, pk string) (*pb.Table, *pb.RangeDescriptor, error) {
	if d, ok := r.locate(t, pk); ok {
		return t, d, nil
	}
	key := strings.ToLower(t.GetName())
	r.mu.RLock()
	now, ok := r.tables[key]
	r.mu.RUnlock()
	if !ok {
		rctx, cancel := context.WithTimeout(ctx, refreshWait)
		err := r.refreshTable(rctx, t.GetName())
		cancel()
		if err != nil {
			return t, nil, errNoRange()
		}
		r.mu.RLock()
		now, ok = r.tables[key]
		r.mu.RUnlock()
		if !ok {
			return t, nil, tableErr(t.GetName())
		}
	}
	if d, ok := r.locate(now, pk); ok {
		return now, d, nil
	}
	return now, nil, errNoRange()
}

// attempt sends fn to one server, named by id, for the range *cur.
func (r *Router) attempt(cur **pb.RangeDescriptor, fn rangeCall) rangeclient.Attempt {
	return func(ctx context.Context, server string) error {
		addr, ok := r.addrOf(server)
		if !ok {
			return rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "server "+server+" is not in the cached map", nil)
		}
		c, err := r.pool.Partition(addr)
		if err != nil {
			return err
		}
		return fn(ctx, addr, c, *cur)
	}
}

func (r *Router) countRetry(err error) {
	info := rpcerr.Parse(err)
	reason := info.Reason
	if reason == "" {
		reason = info.Code.String()
	}
	retriesTotal.WithLabelValues(reason).Inc()
}

// writeAttemptTimeout bounds one attempt of a write of n operations: a
// batch takes longer to validate and apply.
func (r *Router) writeAttemptTimeout(n int) time.Duration {
	return r.cfg.AttemptTimeout + time.Duration(n)*r.cfg.AttemptTimeout/50
}
