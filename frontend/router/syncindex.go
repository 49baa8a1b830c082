package router

import (
	"context"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// The secondary's sync time (Get Service Stats' LastSyncTime) is a read
// index per range (docs/reliability.md section 18): take t0, ask the range
// leader for a commit index it confirms as leader after t0 (ReadIndex),
// then ask every replica the secondary may read from whether its state
// holds that index (AppliedIndex). Every write acknowledged before t0 had
// committed at or below the index, so a replica holding it holds them all:
// t0 is its sync time by construction, whatever heartbeats or clocks of
// the partition servers say. Confirmed pairs are kept a while: stats calls
// within syncReuse share one ReadIndex (and calls in flight share one),
// and a replica that lags, or a leader that cannot be reached, is
// answered with the newest kept pair the replica holds: an older, honest
// time, or none. A replica that does not answer counts with the index it
// last reported (its state file only grows); one that reported nothing,
// cannot report (an older version), or shows the map stale (a newer
// descriptor generation) leaves the range without a time
// (combineAnswers).

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
// with first), or half of what is left of the caller's deadline (never
// below zero).
func stepWait(ctx context.Context, first bool) time.Duration {
	w := syncWait
	if first {
		w = firstWait
	}
	if dl, ok := ctx.Deadline(); ok {
		return max(0, min(w, time.Until(dl)/2))
	}
	return w
}

// waitMs is d in AppliedIndexRequest's wait_ms: whole milliseconds,
// negative as 0 (a uint32 conversion would wrap it to 49 days, which the
// server's cap would turn into its longest wait).
func waitMs(d time.Duration) uint32 {
	ms := d / time.Millisecond
	if ms <= 0 {
		return 0
	}
	return uint32(min(ms, math.MaxUint32))
}

// rangeSync is one range's confirmed pairs, ReadIndex in flight and the
// indexes its replicas reported holding.
type rangeSync struct {
	mu     sync.Mutex
	pairs  []syncPair
	flight *syncFlight // the ReadIndex in flight; nil if none
	// held is, per replica (server id) and descriptor generation, the
	// highest index the replica reported its state file holds. The state
	// file only grows (also across a restart: AppliedIndex reports what is
	// committed to it), so a replica that does not answer a probe still
	// holds at least that much when it serves a read later.
	held map[heldKey]uint64
}

type heldKey struct {
	server     string
	generation uint64
}

// syncFlight is a ReadIndex that concurrent stats calls share.
type syncFlight struct {
	done chan struct{} // closed when it ends
	ok   bool          // it confirmed a pair (read after done)
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

// remember records what the replicas that answered reported for the
// descriptor generation gen, whose Raft group is group (older
// generations are dropped: their membership is past; an answer of another
// group's log is not kept), and returns, per server, what is remembered for
// gen after that.
func (rs *rangeSync) remember(gen, group uint64, answers []replicaAnswer) map[string]uint64 {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.held == nil {
		rs.held = map[heldKey]uint64{}
	}
	for k := range rs.held {
		if k.generation < gen {
			delete(rs.held, k)
		}
	}
	for _, a := range answers {
		// An answer from a state past generation gen (the map is stale:
		// the probe's verdict) is not one gen's replicas held: kept under
		// gen, a later probe of the same map with no answers would
		// confirm an index past the record that changed the replicas,
		// over the replicas before it.
		if a.err == nil && a.generation <= gen && !a.otherLog(group) {
			k := heldKey{a.server, gen}
			rs.held[k] = max(rs.held[k], a.applied)
		}
	}
	out := map[string]uint64{}
	for k, v := range rs.held {
		if k.generation == gen {
			out[k.server] = v
		}
	}
	return out
}

// confirmedPairs returns the range's kept pairs after making sure the
// newest is at most syncReuse old if the leader confirms one within
// stepWait: the ReadIndex in flight, or a new one. The ReadIndex runs
// apart from the caller (its own bound, not the caller's cancellation):
// every caller waiting on it, and the next stats call, want its answer
// even if the call that started it gave up.
func (r *Router) confirmedPairs(ctx context.Context, t *pb.Table, d *pb.RangeDescriptor) []syncPair {
	rs := r.sync.get(d.GetRangeId())
	rs.mu.Lock()
	if n := len(rs.pairs); n > 0 && time.Since(rs.pairs[n-1].at) < syncReuse {
		out := append([]syncPair(nil), rs.pairs...)
		rs.mu.Unlock()
		syncIndexTotal.WithLabelValues("reused").Inc()
		return out
	}
	first := len(rs.pairs) == 0
	f, own := rs.flight, false
	if f == nil {
		f, own = &syncFlight{done: make(chan struct{})}, true
		rs.flight = f
		go r.runReadIndex(context.WithoutCancel(ctx), t, d, rs, f, first)
	}
	rs.mu.Unlock()
	timer := time.NewTimer(stepWait(ctx, first))
	defer timer.Stop()
	select {
	case <-f.done:
		switch {
		case !f.ok:
			syncIndexTotal.WithLabelValues("failed").Inc()
		case own:
			syncIndexTotal.WithLabelValues("confirmed").Inc()
		default:
			syncIndexTotal.WithLabelValues("reused").Inc()
		}
	case <-timer.C:
		syncIndexTotal.WithLabelValues("failed").Inc()
	case <-ctx.Done():
		syncIndexTotal.WithLabelValues("failed").Inc()
	}
	return r.snapshotPairs(rs)
}

// runReadIndex runs the shared ReadIndex f for range d, within syncWait
// (firstWait with first), and keeps the pair it confirms.
func (r *Router) runReadIndex(ctx context.Context, t *pb.Table, d *pb.RangeDescriptor, rs *rangeSync, f *syncFlight, first bool) {
	wait := syncWait
	if first {
		wait = firstWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t0 := time.Now()
	idx, err := r.readIndex(ctx, t, d, wait)
	rs.mu.Lock()
	if err == nil {
		rs.pairs = addPair(rs.pairs, syncPair{at: t0, index: idx})
		f.ok = true
	} else {
		r.logger.Debug("secondary sync: no read index", "range", d.GetRangeId(), "err", err)
	}
	rs.flight = nil
	rs.mu.Unlock()
	close(f.done)
}

func (r *Router) snapshotPairs(rs *rangeSync) []syncPair {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]syncPair(nil), rs.pairs...)
}

// readIndex asks the range's leader for a commit index it confirms as
// leader after the call. A key that moved to another range (a split or
// merge the probe list predates) ends it: that range's index says nothing
// of this one.
func (r *Router) readIndex(ctx context.Context, t *pb.Table, d *pb.RangeDescriptor, wait time.Duration) (uint64, error) {
	var idx uint64
	err := r.callIn(ctx, t, d.GetStart(), d.GetRangeId(), wait, func(ctx context.Context, _ string, c pb.PartitionServiceClient, cur *pb.RangeDescriptor) error {
		resp, err := c.ReadIndex(ctx, &pb.ReadIndexRequest{RangeId: cur.GetRangeId()})
		idx = resp.GetIndex()
		return err
	})
	return idx, err
}

// replicaAnswer is one replica's answer to AppliedIndex.
type replicaAnswer struct {
	server     string
	applied    uint64
	generation uint64 // of the descriptor the replica's state holds
	// group is the Raft group whose log applied counts (0: an older
	// server that does not say).
	group uint64
	err   error
}

// otherLog reports whether a's index counts entries of another log than
// group's, the range's group in the descriptor probed: a replica that has
// not applied a detach or an attach of the range yet still applies it in
// its old group, and an index there says nothing of what it holds of
// group's log (it was taken for one, and LastSyncTime covered writes the
// replica's reads missed: chaos seed 2460).
func (a replicaAnswer) otherLog(group uint64) bool {
	return a.err == nil && a.group != 0 && a.group != group
}

// syncVerdict is what a range's replica answers make of its sync time.
type syncVerdict int

const (
	// syncHeld: every replica's index is known (answered or remembered):
	// the least is held on each.
	syncHeld syncVerdict = iota
	// syncUnknown: some replica may serve reads from an index nothing
	// tells (a server too old to answer AppliedIndex, a replica that
	// did not answer and reported nothing before).
	syncUnknown
	// syncStale: unknown, and the map is stale (a replica's descriptor is
	// newer than the one probed, or no replica hosts the range): refresh.
	syncStale
	// syncFailed: no replica answered and none reported before: the
	// range cannot serve a read either.
	syncFailed
)

// combineAnswers decides range sync from its replicas' answers to
// AppliedIndex for the descriptor of generation gen and Raft group group
// (a replica answering of another group's log makes it unknown: see
// replicaAnswer.otherLog), with remembered the
// index each replica last reported for gen (remember). A replica counts
// with what it answered, or, if it did not answer (down, slow, not yet
// open), with what it reported before: it holds at least that whenever it
// serves a read. The least index over all is held on every replica.
func combineAnswers(gen, group uint64, answers []replicaAnswer, remembered map[string]uint64) (uint64, syncVerdict, error) {
	if len(answers) == 0 {
		return 0, syncFailed, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "the range has no replica", nil)
	}
	var (
		least                             uint64
		answered, notFound, missing, seen int
		unimplemented, newer, otherLog    bool
		lastErr                           error
	)
	for _, a := range answers {
		idx := a.applied
		if a.err != nil {
			lastErr = a.err
			info := rpcerr.Parse(a.err)
			switch {
			case info.Code == codes.Unimplemented:
				// A server of an older version (a rolling upgrade): it
				// serves follower reads but cannot say what it holds.
				unimplemented = true
			case info.Reason == rpcerr.ReasonRangeNotFound:
				notFound++
			}
			v, ok := remembered[a.server]
			if !ok {
				missing++
				continue
			}
			idx = v
		} else {
			answered++
			// A newer descriptor: a split, merge or move the map has not
			// caught up with (the left half of a split keeps its range
			// id). An older one is a replica that has yet to apply the
			// change: its index still counts if it is of the same log
			// (otherLog: not after a detach or an attach).
			newer = newer || a.generation > gen
			otherLog = otherLog || a.otherLog(group)
		}
		if seen == 0 || idx < least {
			least = idx
		}
		seen++
	}
	switch {
	case newer || notFound == len(answers):
		return 0, syncStale, nil
	case unimplemented || otherLog:
		return 0, syncUnknown, nil
	case missing > 0 && seen == 0:
		return 0, syncFailed, lastErr
	case missing > 0:
		return 0, syncUnknown, nil
	}
	return least, syncHeld, nil
}

// rangeSyncTime is the sync time of range d on the secondary: that of
// its replica furthest behind. A secondary read may go to any replica
// (followers first, but a leader change reorders them), so the time must
// hold on each: every replica of the range's current descriptor is asked,
// and one that does not answer counts with the index it reported before
// (combineAnswers). Zero when one of them holds no confirmed pair or
// cannot tell what it holds.
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
	reps := cur.GetReplicas()
	answers := make([]replicaAnswer, len(reps))
	var wg sync.WaitGroup
	for i, rep := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, r.cfg.AttemptTimeout+stepWait(ctx, first))
			defer cancel()
			a := replicaAnswer{server: rep.GetServerId()}
			a.err = r.attempt(&cur, func(ctx context.Context, _ string, c pb.PartitionServiceClient, d *pb.RangeDescriptor) error {
				resp, err := c.AppliedIndex(ctx, &pb.AppliedIndexRequest{RangeId: d.GetRangeId(), Index: target,
					WaitMs: waitMs(stepWait(ctx, first))})
				a.applied, a.generation, a.group = resp.GetAppliedIndex(), resp.GetGeneration(), resp.GetGroupId()
				return err
			})(actx, rep.GetServerId())
			answers[i] = a
		}()
	}
	wg.Wait()
	group := rangegroup.GroupOf(cur)
	remembered := r.sync.get(cur.GetRangeId()).remember(cur.GetGeneration(), group, answers)
	least, verdict, err := combineAnswers(cur.GetGeneration(), group, answers, remembered)
	switch verdict {
	case syncStale:
		r.logger.Debug("secondary sync: stale map", "range", cur.GetRangeId(), "generation", cur.GetGeneration())
		r.startRefresh()
		return time.Time{}, nil
	case syncUnknown:
		return time.Time{}, nil
	case syncFailed:
		return time.Time{}, err
	}
	return heldTime(pairs, least), nil
}

// startRefresh starts a shared map refresh (refreshShared) without
// waiting for it: the stats answer "unknown" now, the next call probes
// the new map.
func (r *Router) startRefresh() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.refreshShared(ctx)
}
