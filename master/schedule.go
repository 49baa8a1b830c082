package master

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"tablestore/internal/rangegroup"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// policyLoop runs the scheduler on the leader and hands what it plans to
// the runner.
func (s *Server) policyLoop() {
	t := time.NewTicker(s.cfg.Policy.Interval)
	defer t.Stop()
	differing := map[uint64]time.Time{}
	var checked checkInputs
	var term uint64
	var pruned time.Time
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if s.ready() != nil {
			clear(differing)
			continue
		}
		// The lead lost and regained between two ticks: what differed
		// in the earlier term is no proof of a difference that lasted
		// (newTerm).
		term = newTerm(differing, &checked, term, s.raft.CurrentTerm())
		if now := time.Now(); now.Sub(pruned) >= reportPruneEvery {
			pruned = now
			s.reports.pruneDropped(func(table uint64) (live bool) {
				s.fsm.read(func(st *state) { live = st.tableLive(table) })
				return live
			})
		}
		// Finishing a half-done merge is recovery, not policy: it runs
		// even with the policies off.
		s.resumeMerges()
		s.resumeDeletions()
		s.resumeAddSpans()
		s.ensureAnchor()
		s.reconcileReplicas(differing, &checked)
		if !s.cfg.Policy.Enabled || s.ops.slots() <= 0 {
			continue
		}
		for _, o := range scheduler.Schedule(s.schedConfig(), s.snapshot(time.Now())) {
			s.ops.start(o)
		}
	}
}

// snapshot gathers the scheduler's input from the catalog, the heartbeat
// reports and the runner.
func (s *Server) snapshot(now time.Time) *scheduler.Snapshot {
	snap := &scheduler.Snapshot{Now: now, Slots: s.ops.slots()}
	snap.InFlight, snap.Recent = s.ops.state(now)
	var descs []*pb.RangeDescriptor
	s.fsm.read(func(st *state) {
		for _, r := range st.ranges {
			descs = append(descs, r)
		}
		for id, sv := range st.servers {
			snap.Servers = append(snap.Servers, scheduler.Server{ID: id, Draining: sv.GetDraining(), Zone: sv.GetZone()})
		}
	})
	sort.Slice(snap.Servers, func(i, j int) bool { return snap.Servers[i].ID < snap.Servers[j].ID })
	sort.Slice(descs, func(i, j int) bool {
		if descs[i].GetTableId() != descs[j].GetTableId() {
			return descs[i].GetTableId() < descs[j].GetTableId()
		}
		return descs[i].GetStart() < descs[j].GetStart()
	})
	s.reports.mu.Lock()
	defer s.reports.mu.Unlock()
	clocks := s.reports.clockVerdictsLocked(s.cfg.Policy.MaxClockOffset, now)
	for i := range snap.Servers {
		sv := &snap.Servers[i]
		t := s.reports.lastSeen[sv.ID]
		sv.LastSeen = t
		sv.Back = s.reports.back[sv.ID]
		sv.Live = s.upAt(s.reports.lastSeen, sv.ID, now)
		// After Live: computed first (until session 9), Silent read the
		// zero Live and was never set, so leadership went to servers
		// that had just failed (chaos seeds 217 and 233: a transfer to a
		// server killed 2.3 s before, a split-born range led by one cut
		// off 2.2 s before, each ~3 s without writes).
		sv.Silent = sv.Live && now.Sub(t) >= awayAfter
		sv.AttachSpans = s.reports.attachSpans[sv.ID]
		d := s.reports.disk[sv.ID].at(now)
		sv.Slow, sv.SlowMedian, sv.SlowCleared = d.slow, d.median, d.cleared
		if d.slow {
			sv.SlowMedian = d.onset
		}
		sv.Disk = diskOf(s.reports.spaceOf(sv.ID))
		sv.ClockSkewed, sv.ClockOffset = clocks[sv.ID].skewed, clocks[sv.ID].offset
	}
	for _, d := range descs {
		snap.Ranges = append(snap.Ranges, s.schedRange(d, snap.Servers, now))
	}
	return snap
}

// schedRange converts a descriptor and what the reports say of it. Called
// with reports.mu held.
func (s *Server) schedRange(d *pb.RangeDescriptor, servers []scheduler.Server, now time.Time) *scheduler.Range {
	rp := s.reports
	id := d.GetRangeId()
	r := &scheduler.Range{ID: id, Group: rangegroup.GroupOf(d), TableID: d.GetTableId(), Table: d.GetTable(), Start: d.GetStart(), End: d.GetEnd(),
		Leader: rp.leaders[id], Frozen: rp.frozen[id] != 0, Anchor: isAnchor(d), Pending: pendingAdd(d)}
	if l, ok := rp.loads[id]; ok {
		r.Load = &scheduler.Load{EntitiesPerSec: l.GetEntitiesPerSec(), Bytes: l.GetBytes(),
			HotKeys: keyLoads(l.GetHotKeys()), Sample: keyLoads(l.GetLoadSample())}
	}
	if t := rp.trends[id]; t != nil {
		r.Trend = t.Trend
		if r.Load != nil && !t.epsAt.IsZero() {
			// Split and merge windows follow the raw reports (Trend); the
			// load figure the policies weigh is the smoothed one.
			r.Load.EntitiesPerSec = t.at(now)
		}
	}
	for _, rep := range d.GetReplicas() {
		sid := rep.GetServerId()
		applied, reported := rp.hosted[sid][id]
		i := sort.Search(len(servers), func(i int) bool { return servers[i].ID >= sid })
		live := i < len(servers) && servers[i].ID == sid && servers[i].Live
		r.Replicas = append(r.Replicas, scheduler.Replica{Server: sid, Applied: applied, Missing: live && !reported, Broken: rp.isBroken(sid, id)})
	}
	return r
}

func keyLoads(ks []*pb.KeyLoad) []scheduler.KeyLoad {
	out := make([]scheduler.KeyLoad, 0, len(ks))
	for _, k := range ks {
		out = append(out, scheduler.KeyLoad{Key: k.GetPartitionKey(), EntitiesPerSec: k.GetEntitiesPerSec()})
	}
	return out
}

// execute runs one scheduled operation (the runner's executor).
func (s *Server) execute(ctx context.Context, o scheduler.Op) error {
	var err error
	cause := causePolicy
	switch o.Kind {
	case scheduler.Split:
		_, err = s.split(ctx, o.Range, o.Key, o.To, cause, o.Reason+" ["+o.Rule+"]", o.Figures, o.InGroup)
	case scheduler.Merge:
		_, err = s.merge(ctx, o.Range, o.Right, cause, o.Reason+" ["+o.Rule+"]", o.Figures)
	case scheduler.Isolate:
		err = s.isolateSpan(ctx, o) // isolateop.go
	case scheduler.Attach:
		_, err = s.attach(ctx, o.Range, o.Group, cause, o.Reason+" ["+o.Rule+"]", o.Figures) // attach.go
	case scheduler.Move:
		switch o.Rule {
		case scheduler.RuleReReplicate:
			cause = causeReReplicate
		case scheduler.RuleDiskFullReplica:
			cause = causeDiskFull
		}
		move := s.move
		if o.Whole {
			move = s.moveGroup // the range's whole Raft group
		}
		_, err = move(ctx, o.Range, o.From, o.To, cause, o.Reason+" ["+o.Rule+"]", o.Figures)
	case scheduler.TransferLeader:
		switch o.Rule {
		case scheduler.RuleSlowDiskLeader:
			cause = causeSlowDisk
		case scheduler.RuleClockSkewLeader:
			cause = causeClockSkew
		case scheduler.RuleDiskFullLeader:
			cause = causeDiskFull
		}
		err = s.transferWithEvent(ctx, o.Range, o.From, o.To, cause, o.Reason+" ["+o.Rule+"]", o.Figures)
	}
	if err != nil {
		s.logger.Warn("operation failed", "op", o.String(), "err", err)
	}
	return err
}

// transferWithEvent moves a range's leadership and records the event.
func (s *Server) transferWithEvent(ctx context.Context, id uint64, from, to, cause, reason string, figures map[string]float64) error {
	start := time.Now()
	peers, err := s.transfer(ctx, id, to)
	if err != nil {
		return err
	}
	d, _ := s.rangeDesc(id)
	msg := fmt.Sprintf("moved leadership of range %d from %s to %s", id, from, to)
	if len(peers) > 0 {
		// The leadership is the Raft group's: its other ranges moved too.
		msg += fmt.Sprintf(", with its Raft group's %d other range(s) %v", len(peers), peers)
	}
	if reason != "" {
		msg += " (" + strings.TrimSpace(reason) + ")"
	}
	s.event(&pb.Event{
		Kind: pb.EventKind_EVENT_KIND_LEADER_TRANSFER, Table: d.GetTable(), RangeIds: append([]uint64{id}, peers...),
		Servers: []string{from, to}, Figures: figures, Cause: cause,
		DurationSeconds: time.Since(start).Seconds(), Message: msg,
	})
	return nil
}

// resumeMerges finishes merges a previous master left half done: for a
// frozen range it carries out the decision recorded for the freeze
// (merge into the left neighbour, or unfreeze), or decides (see merge).
// A frozen range whose decision names an attach group, or that is its
// table's only range (no left neighbour: an attach's freeze), is an
// attach's (resumeAlone). A deleted table's frozen ranges are gone from
// the map and only forgotten here.
func (s *Server) resumeMerges() {
	for _, id := range s.reports.frozenRanges() {
		d, ok := s.rangeDesc(id)
		if !ok {
			s.reports.forget(id) // merged away, or its table dropped
			continue
		}
		if s.resumeAlone(d) {
			continue // an attach's freeze (attach.go)
		}
		left := s.leftNeighbour(d)
		if left == nil || s.ops.claim(left.GetRangeId(), id) != nil {
			continue
		}
		go func(l, r uint64) {
			defer s.ops.release(l, r)
			ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
			defer cancel()
			_, err := s.merge(ctx, l, r, causeRecovery, "finishing a merge a previous master left half done", nil)
			switch {
			case errors.Is(err, errNotFrozen):
				// Its leader is not frozen: freezeEverywhere forgot the
				// freeze if the answer proves it undone, else the next
				// pass asks again.
			case errors.Is(err, ErrMergeAborted):
				// The recorded ABORT carried out (or its unfreeze to be
				// retried next pass): what resuming is for.
				s.logger.Info("resumed merge aborted", "left", l, "right", r, "err", err)
			case err != nil:
				s.logger.Warn("resuming merge failed", "left", l, "right", r, "err", err)
			}
		}(left.GetRangeId(), id)
	}
}

// rightLeader is the follower of range id the scheduler would give its
// leadership to: the coolest live, caught-up one ("" if none). It leads the
// right half of an operator's split, and takes over from a leader whose
// replica moves away.
func (s *Server) rightLeader(id uint64) string {
	snap := s.snapshot(time.Now())
	for _, r := range snap.Ranges {
		if r.ID == id {
			return scheduler.NewPlan(s.schedConfig(), snap).RightLeader(r)
		}
	}
	return ""
}
