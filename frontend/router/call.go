package router

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// rangeCall is one attempt of a request on a range.
type rangeCall func(ctx context.Context, c pb.PartitionServiceClient, d *pb.RangeDescriptor) error

// retryable classifies a failed attempt: whether to retry, and whether the
// map (not just the leader guess) is stale.
func retryable(info rpcerr.Info) (retry, stale bool) {
	switch info.Reason {
	case rpcerr.ReasonNotLeader, rpcerr.ReasonUnavailable:
		return info.Code != codes.DeadlineExceeded, false
	case rpcerr.ReasonStaleRange, rpcerr.ReasonRangeNotFound:
		return true, true
	}
	// A transport failure before the server answered (refused, reset).
	return info.Reason == "" && info.Code == codes.Unavailable, false
}

// call runs fn on the range holding (table, pk), following leader changes,
// stale maps and dead servers until it succeeds, fails for good, or the
// retry budget is spent.
func (r *Router) call(ctx context.Context, table *pb.Table, pk string, fn rangeCall) error {
	deadline := time.Now().Add(r.cfg.RetryTimeout)
	skip := map[string]bool{}
	backoff := 2 * time.Millisecond
	var last error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if time.Now().After(deadline) {
				return last
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			if backoff < 100*time.Millisecond {
				backoff *= 2
			}
		}
		d, ok := r.locate(table, pk)
		if !ok {
			last = rpcerr.New(codes.Unavailable, rpcerr.ReasonStaleRange, "no range holds the key in the cached map", nil)
			r.refresh(ctx)
			continue
		}
		id, addr, ok := r.target(d, skip)
		if !ok {
			last = rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "no reachable replica for the range", nil)
			skip = map[string]bool{}
			r.refresh(ctx)
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
		retry, stale := retryable(info)
		if !retry || ctx.Err() != nil {
			return err
		}
		if leader := info.Metadata[rpcerr.MetaLeader]; info.Reason == rpcerr.ReasonNotLeader && leader != "" && leader != id {
			r.hint(d.GetRangeId(), leader)
			continue
		}
		skip[id] = true
		r.hint(d.GetRangeId(), "")
		if stale {
			r.refresh(ctx)
		}
	}
}
