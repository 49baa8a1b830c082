package router

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// The secondary's sync time (Get Service Stats' LastSyncTime) is a read
// index per range (docs/reliability.md section 18): take t0, ask the range
// leader for a commit index it confirms as leader after t0 (ReadIndex),
// then ask the replica the secondary reads from whether its state holds
// that index (AppliedIndex). Every write acknowledged before t0 had
// committed at or below the index, so a replica holding it holds them all:
// t0 is its sync time by construction, whatever heartbeats or clocks of
// the partition servers say. Confirmed pairs are kept a while: stats calls
// within syncReuse share one ReadIndex (and calls in flight share one),
// and a replica that lags, or a leader that cannot be reached, is
// answered with the newest kept pair the replica holds: an older, honest
// time, or none.

// syncReuse is how long a confirmed (t0, index) pair stands in for a new
// ReadIndex: its t0 is older than a new one would be, so still correct.
const syncReuse = 100 * time.Millisecond

// syncWait bounds each step of a probe (the leader's confirmation, the
// replica's apply): the stats answer with an older time rather than wait
// on a lost leader or a replica catching up. firstWait replaces it while
// the range has no older confirmed time to answer with (the front-end's
// first probe of it, or one after a long outage): waiting is then the
// only way to a time, and a quiet range's first confirmation wakes it
// (an election) on a possibly loaded machine.
const (
	syncWait  = 300 * time.Millisecond
	firstWait = 2 * time.Second
)

// syncKeep pairs are kept per range, at least syncSpacing apart, so a
// replica up to a few seconds behind still reports the time it holds.
const (
	syncKeep    = 16
	syncSpacing = 250 * time.Millisecond
)

// syncPair is a commit index the range's leader confirmed after at.
type syncPair struct {
	at    time.Time
	index uint64
}

// addPair returns pairs with p appended, oldest first: p replaces the
// newest pair when that one is within syncSpacing of the one before it (or
// has the same index: p is then as good and later), and the oldest go
// beyond syncKeep.
func addPair(pairs []syncPair, p syncPair) []syncPair {
	if n := len(pairs); n > 0 && (pairs[n-1].index == p.index || n >= 2 && pairs[n-1].at.Sub(pairs[n-2].at) < syncSpacing) {
		pairs[n-1] = p
		return pairs
	}
	pairs = append(pairs, p)
	if len(pairs) > syncKeep {
		pairs = append(pairs[:0], pairs[len(pairs)-syncKeep:]...)
	}
	return pairs
}

// heldTime is the sync time of a replica whose state holds every entry up
// to applied: the t0 of the newest pair at or below it (zero: none).
func heldTime(pairs []syncPair, applied uint64) time.Time {
	for i := len(pairs) - 1; i >= 0; i-- {
		if pairs[i].index <= applied {
			return pairs[i].at
		}
	}
	return time.Time{}
}

// stepWait is how long one step of a probe may take: syncWait (firstWait
// with first), or half of what is left of the caller's deadline.
func stepWait(ctx context.Context, first bool) time.Duration {
	w := syncWait
	if first {
		w = firstWait
	}
	if dl, ok := ctx.Deadline(); ok {
		return min(w, time.Until(dl)/2)
	}
	return w
}

// rangeSync is one range's confirmed pairs and ReadIndex in flight.
type rangeSync struct {
	mu     sync.Mutex
	pairs  []syncPair
	flight chan struct{} // closed when the ReadIndex in flight ends; nil if none
}

type syncCache struct {
	mu     sync.Mutex
	ranges map[uint64]*rangeSync
}

func (c *syncCache) get(id uint64) *rangeSync {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ranges == nil {
		c.ranges = map[uint64]*rangeSync{}
	}
	rs := c.ranges[id]
	if rs == nil {
		rs = &rangeSync{}
		c.ranges[id] = rs
	}
	return rs
}

// keepOnly forgets ranges no longer in the map (split, merged, dropped).
func (c *syncCache) keepOnly(ids map[uint64]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.ranges {
		if !ids[id] {
			delete(c.ranges, id)
		}
	}
}

// confirmedPairs returns the range's kept pairs after making sure the
// newest is at most syncReuse old if the leader confirms one within
// stepWait: a ReadIndex of its own, or the one in flight.
func (r *Router) confirmedPairs(ctx context.Context, t *pb.Table, d *pb.RangeDescriptor) []syncPair {
	rs := r.sync.get(d.GetRangeId())
	for {
		rs.mu.Lock()
		if n := len(rs.pairs); n > 0 && time.Since(rs.pairs[n-1].at) < syncReuse {
			out := append([]syncPair(nil), rs.pairs...)
			rs.mu.Unlock()
			syncIndexTotal.WithLabelValues("reused").Inc()
			return out
		}
		if rs.flight == nil {
			break
		}
		flight := rs.flight
		rs.mu.Unlock()
		select {
		case <-flight:
			// Confirmed: reused at the top of the loop. Failed: the
			// leader could not confirm one just now, and a try of this
			// call's own would most likely wait as long for nothing; the
			// kept pairs answer.
			rs.mu.Lock()
			n := len(rs.pairs)
			failed := n == 0 || time.Since(rs.pairs[n-1].at) >= syncReuse
			rs.mu.Unlock()
			if failed {
				syncIndexTotal.WithLabelValues("failed").Inc()
				return r.snapshotPairs(rs)
			}
		case <-ctx.Done():
			syncIndexTotal.WithLabelValues("failed").Inc()
			return r.snapshotPairs(rs)
		}
	}
	flight := make(chan struct{})
	rs.flight = flight
	first := len(rs.pairs) == 0
	rs.mu.Unlock()

	t0 := time.Now()
	idx, err := r.readIndex(ctx, t, d, first)
	rs.mu.Lock()
	if err == nil {
		rs.pairs = addPair(rs.pairs, syncPair{at: t0, index: idx})
		syncIndexTotal.WithLabelValues("confirmed").Inc()
	} else {
		syncIndexTotal.WithLabelValues("failed").Inc()
		r.logger.Debug("secondary sync: no read index", "range", d.GetRangeId(), "err", err)
	}
	rs.flight = nil
	close(flight)
	out := append([]syncPair(nil), rs.pairs...)
	rs.mu.Unlock()
	return out
}

func (r *Router) snapshotPairs(rs *rangeSync) []syncPair {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]syncPair(nil), rs.pairs...)
}

// readIndex asks the range's leader for a commit index it confirms as
// leader after the call, within stepWait.
func (r *Router) readIndex(ctx context.Context, t *pb.Table, d *pb.RangeDescriptor, first bool) (uint64, error) {
	wait := stepWait(ctx, first)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var idx uint64
	err := r.call(ctx, t, d.GetStart(), wait, func(ctx context.Context, _ string, c pb.PartitionServiceClient, cur *pb.RangeDescriptor) error {
		if cur.GetRangeId() != d.GetRangeId() {
			// The key moved to another range (a split or merge the probe
			// list predates): that range's index says nothing of this one.
			return errNoRange()
		}
		resp, err := c.ReadIndex(ctx, &pb.ReadIndexRequest{RangeId: cur.GetRangeId()})
		idx = resp.GetIndex()
		return err
	})
	return idx, err
}

// rangeSyncTime is the sync time of range d on the secondary: that of
// its replica furthest behind among those that answer. A secondary read
// may go to any of them (followers first, but a leader change reorders
// them), so the time must hold on each; a replica that does not answer
// cannot serve one either. Zero when one of them holds no confirmed pair.
func (r *Router) rangeSyncTime(ctx context.Context, t *pb.Table, d *pb.RangeDescriptor) (time.Time, error) {
	pairs := r.confirmedPairs(ctx, t, d)
	if len(pairs) == 0 {
		return time.Time{}, nil
	}
	target := pairs[len(pairs)-1].index
	// With one pair there is no older time to fall back on.
	first := len(pairs) == 1
	cur, ok := r.locate(t, d.GetStart())
	if !ok || cur.GetRangeId() != d.GetRangeId() {
		// The range split or merged since the probe list was taken: the
		// next stats call probes the new ranges.
		return time.Time{}, nil
	}
	var (
		mu       sync.Mutex
		answered int
		least    uint64
		lastErr  error
		wg       sync.WaitGroup
	)
	for _, rep := range cur.GetReplicas() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, r.cfg.AttemptTimeout+stepWait(ctx, first))
			defer cancel()
			var applied uint64
			err := r.attempt(&cur, func(ctx context.Context, _ string, c pb.PartitionServiceClient, d *pb.RangeDescriptor) error {
				resp, err := c.AppliedIndex(ctx, &pb.AppliedIndexRequest{RangeId: d.GetRangeId(), Index: target,
					WaitMs: uint32(stepWait(ctx, first) / time.Millisecond)})
				applied = resp.GetAppliedIndex()
				return err
			})(actx, rep.GetServerId())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				lastErr = err
				return
			}
			if answered == 0 || applied < least {
				least = applied
			}
			answered++
		}()
	}
	wg.Wait()
	if answered == 0 {
		if lastErr == nil {
			lastErr = rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "the range has no replica", nil)
		}
		return time.Time{}, lastErr
	}
	return heldTime(pairs, least), nil
}
