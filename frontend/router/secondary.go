package router

import (
	"context"
	"sync"
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
		var d *pb.RangeDescriptor
		var err error
		t, d, err = r.locateNow(ctx, t, pk)
		if err != nil {
			return nil, err
		}
		cur = d
		return r.followersFirst(d), nil
	}
	attempt := r.attempt(&cur, fn)
	behindOK := func(ctx context.Context, server string) error {
		err := attempt(ctx, server)
		if rpcerr.Is(err, rpcerr.ReasonStaleRange) {
			// A replica's state behind the map (a merge it has yet to
			// apply: its range ends short of the key) refuses the key
			// while the others may serve it: the round goes on to them,
			// as for a replica not hosting the range, and the map is
			// refreshed after it (all refusing: the map is stale).
			return rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "replica "+server+" does not hold the key (behind the map, or the map stale): "+err.Error(), nil)
		}
		return err
	}
	err := rangeclient.Call(ctx, candidates, behindOK, rangeclient.Options{
		OnFailure:      func(_ string, err error, _ rangeclient.Decision) { r.countRetry(err) },
		Refresh:        r.refreshShared,
		RefreshWait:    refreshWait,
		MinBackoff:     time.Millisecond,
		AttemptTimeout: attemptTimeout,
		Deadline:       time.Now().Add(r.cfg.RetryTimeout),
		Rounds:         2,
	})
	return noReplicaErr(err)
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
// the oldest sync time over the ranges, each that of the replica the
// secondary reads it from (syncindex.go); zero if one holds no confirmed
// time. Ranges are probed syncProbes at a time: a lost leader costs each
// probe up to syncWait (firstWait for a range without a confirmed time).
func (r *Router) SecondarySync(ctx context.Context) (time.Time, error) {
	r.mu.RLock()
	type probe struct {
		t *pb.Table
		d *pb.RangeDescriptor
	}
	var probes []probe
	ids := map[uint64]bool{}
	for _, t := range r.tables {
		for _, d := range r.ranges[t.GetTableId()] {
			probes = append(probes, probe{t, d})
			ids[d.GetRangeId()] = true
		}
	}
	r.mu.RUnlock()
	r.sync.keepOnly(ids)
	var (
		mu      sync.Mutex
		oldest  = time.Now()
		unknown bool
		first   error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, syncProbes)
	)
	for _, p := range probes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			t, err := r.rangeSyncTime(ctx, p.t, p.d)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if first == nil {
					first = err
				}
			case t.IsZero():
				unknown = true
			case t.Before(oldest):
				oldest = t
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return time.Time{}, first
	}
	if unknown {
		return time.Time{}, nil
	}
	return oldest.UTC(), nil
}

// syncProbes is how many ranges SecondarySync probes at once.
const syncProbes = 32
