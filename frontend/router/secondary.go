package router

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/frontend"
	"tablestore/internal/edm"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// The read-access secondary endpoint reads from range followers: any
// replica answers from its applied state without a leadership check, so a
// read there never waits on the leader (nor fails when there is none, as
// long as one replica is up). Followers are tried first, the leader last.

var _ frontend.SecondaryReader = (*Router)(nil)

// followerCall runs fn on one replica of the range holding (table, pk),
// followers first, moving on when a replica is unreachable or no longer
// hosts the range.
func (r *Router) followerCall(ctx context.Context, t *pb.Table, pk string, fn rangeCall) error {
	d, ok := r.locate(t, pk)
	if !ok {
		if err := r.refresh(ctx); err != nil {
			return err
		}
		if d, ok = r.locate(t, pk); !ok {
			return rpcerr.New(codes.Unavailable, rpcerr.ReasonStaleRange, "no range holds the key in the map", nil)
		}
	}
	var last error = rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "the range has no replica", nil)
	for attempt := 0; attempt < 2; attempt++ {
		stale := false
		for _, addr := range r.followersFirst(d) {
			c, err := r.pool.Partition(addr)
			if err != nil {
				last = err
				continue
			}
			err = fn(ctx, c, d)
			if err == nil {
				return nil
			}
			last = err
			retry, staleMap := retryable(err)
			if !retry || ctx.Err() != nil {
				return err
			}
			stale = stale || staleMap
		}
		// Every replica refused; a split or merge the cached map has not
		// seen yet is worth one refresh (an outage is not).
		if !stale || r.refresh(ctx) != nil {
			break
		}
		if d, ok = r.locate(t, pk); !ok {
			break
		}
	}
	return last
}

// followersFirst lists the gRPC addresses of a range's replicas, the
// presumed leader last.
func (r *Router) followersFirst(d *pb.RangeDescriptor) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	leader := r.leaders[d.GetRangeId()]
	var out []string
	var leaderAddr string
	for _, rep := range d.GetReplicas() {
		s, ok := r.servers[rep.GetServerId()]
		if !ok {
			continue
		}
		if rep.GetServerId() == leader {
			leaderAddr = s.GetGrpcAddr()
			continue
		}
		out = append(out, s.GetGrpcAddr())
	}
	if leaderAddr != "" {
		out = append(out, leaderAddr)
	}
	return out
}

// SecondaryGet reads one entity from a follower of its range.
func (r *Router) SecondaryGet(ctx context.Context, table, pk, rk string) (*edm.Entity, error) {
	return r.get(ctx, table, pk, rk, true)
}

// SecondaryQuery is Query served by followers.
func (r *Router) SecondaryQuery(ctx context.Context, table string, q frontend.Query) (*frontend.Page, error) {
	return r.query(ctx, table, q, true)
}

// SecondarySync is the time up to which the secondary holds every write:
// the oldest sync time reported by one follower of each range (zero if one
// could not say, or none answered).
func (r *Router) SecondarySync(ctx context.Context) (time.Time, error) {
	r.mu.RLock()
	type probe struct {
		t *pb.Table
		d *pb.RangeDescriptor
	}
	var probes []probe
	for _, t := range r.tables {
		for _, d := range r.ranges[t.GetTableId()] {
			probes = append(probes, probe{t, d})
		}
	}
	r.mu.RUnlock()
	oldest := time.Now()
	for _, p := range probes {
		var synced int64
		err := r.followerCall(ctx, p.t, p.d.GetStart(), func(ctx context.Context, c pb.PartitionServiceClient, d *pb.RangeDescriptor) error {
			// One entity from the range's start: cheap, and an empty
			// range reports the sync time too.
			resp, err := c.Query(ctx, &pb.QueryRequest{RangeId: d.GetRangeId(), Generation: d.GetGeneration(), Limit: 1,
				HasStart: true, StartPartitionKey: d.GetStart(), FollowerRead: true})
			synced = resp.GetSyncedUnixNano()
			return err
		})
		if err != nil {
			return time.Time{}, err
		}
		if synced == 0 {
			return time.Time{}, nil
		}
		if t := time.Unix(0, synced); t.Before(oldest) {
			oldest = t
		}
	}
	return oldest.UTC(), nil
}
