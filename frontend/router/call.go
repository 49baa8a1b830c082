package router

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rangeclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// rangeCall is one attempt of a request on a range.
type rangeCall func(ctx context.Context, c pb.PartitionServiceClient, d *pb.RangeDescriptor) error

// retryable classifies a failed attempt with the shared rule
// (internal/rangeclient): whether to retry, and whether the map (not just
// the leader guess) is stale. ServerBusy goes back to the client with its
// Retry-After, as Azure answers.
func retryable(err error) (retry, stale bool) {
	d := rangeclient.Classify(err)
	return d.Retry && !d.Busy, d.Stale
}

// call runs fn on the range holding (table, pk), following leader changes,
// stale maps and dead servers until it succeeds, fails for good, or the
// retry budget is spent.
func (r *Router) call(ctx context.Context, table *pb.Table, pk string, fn rangeCall) error {
	deadline := time.Now().Add(r.cfg.RetryTimeout)
	skip := map[string]bool{}
	backoff := time.Millisecond
	var last error
	pause := func() error {
		if time.Now().After(deadline) {
			return last
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		// Leader changes and splits settle in tens of milliseconds; keep
		// retries frequent so the client sees a short pause.
		if backoff < 50*time.Millisecond {
			backoff *= 2
		}
		return nil
	}
	for {
		d, ok := r.locate(table, pk)
		if !ok {
			last = rpcerr.New(codes.Unavailable, rpcerr.ReasonStaleRange, "no range holds the key in the cached map", nil)
			r.refresh(ctx)
			if err := pause(); err != nil {
				return err
			}
			continue
		}
		id, addr, ok := r.target(d, skip)
		if !ok {
			// Every replica refused: wait a moment for an election, then
			// start over with a fresh map.
			last = rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "no reachable replica for the range", nil)
			skip = map[string]bool{}
			r.refresh(ctx)
			if err := pause(); err != nil {
				return err
			}
			continue
		}
		c, err := r.pool.Partition(addr)
		if err != nil {
			return err
		}
		err = fn(ctx, c, d)
		if err == nil {
			return nil
		}
		last = err
		info := rpcerr.Parse(err)
		retry, stale := retryable(err)
		if !retry || ctx.Err() != nil {
			return err
		}
		reason := info.Reason
		if reason == "" {
			reason = info.Code.String()
		}
		retriesTotal.WithLabelValues(reason).Inc()
		if time.Now().After(deadline) {
			return err
		}
		if leader := info.Metadata[rpcerr.MetaLeader]; info.Reason == rpcerr.ReasonNotLeader && leader != "" && leader != id && !skip[leader] {
			// Follow the hint at once.
			r.hint(d.GetRangeId(), leader)
			skip[id] = true
			continue
		}
		skip[id] = true
		r.hint(d.GetRangeId(), "")
		if stale {
			r.refresh(ctx)
			skip = map[string]bool{}
			if err := pause(); err != nil {
				return err
			}
		}
	}
}
