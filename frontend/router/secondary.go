package router

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/frontend"
	"tablestore/internal/edm"
	"tablestore/internal/rangeclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// The read-access secondary endpoint reads from range followers: any
// replica answers from its applied state without a leadership check, so a
// read there never waits on the leader (nor fails when there is none, as
// long as one replica is up). Followers are tried first, the leader last.

var _ frontend.SecondaryReader = (*Router)(nil)

// followerCall runs fn on one replica of the range holding (table, pk),
// followers first, moving on when a replica is unreachable, silent or no
// longer hosts the range; a stale map is refreshed once (an outage is not
// worth waiting for: two rounds).
func (r *Router) followerCall(ctx context.Context, t *pb.Table, pk string, attemptTimeout time.Duration, fn rangeCall) error {
	var cur *pb.RangeDescriptor
	candidates := func() ([]string, error) {
		d, ok := r.locate(t, pk)
		if !ok {
			return nil, errNoRange()
		}
		cur = d
		return r.followersFirst(d), nil
	}
	err := rangeclient.Call(ctx, candidates, r.attempt(&cur, fn), rangeclient.Options{
		OnFailure:      func(_ string, err error, _ rangeclient.Decision) { r.countRetry(err) },
		Refresh:        r.refreshShared,
		RefreshWait:    refreshWait,
		MinBackoff:     time.Millisecond,
		AttemptTimeout: attemptTimeout,
		Deadline:       time.Now().Add(r.cfg.RetryTimeout),
		Rounds:         2,
	})
	if errors.Is(err, rangeclient.ErrNoCandidate) {
		err = rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "the range has no replica", nil)
	}
	return err
}

// followersFirst lists the ids of a range's replicas, the presumed leader
// last.
func (r *Router) followersFirst(d *pb.RangeDescriptor) []string {
	r.mu.RLock()
	leader := r.leaders[d.GetRangeId()]
	r.mu.RUnlock()
	var out []string
	hasLeader := false
	for _, rep := range d.GetReplicas() {
		if rep.GetServerId() == leader {
			hasLeader = true
			continue
		}
		out = append(out, rep.GetServerId())
	}
	if hasLeader {
		out = append(out, leader)
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
		err := r.followerCall(ctx, p.t, p.d.GetStart(), r.cfg.AttemptTimeout, func(ctx context.Context, addr string, c pb.PartitionServiceClient, d *pb.RangeDescriptor) error {
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
