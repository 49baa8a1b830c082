package partitionserver

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sort"
	"time"

	"tablestore/internal/metricsbridge"
	"tablestore/internal/rangegroup"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/lifecycle"
	pb "tablestore/proto/tablestorepb"
)

func (s *Server) heartbeatLoop() {
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		s.heartbeat()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reportState is what the heartbeat loop keeps between heartbeats: the
// report the master last acknowledged (a delta is taken against it) and
// the assignments of the last answer that carried them. Only the loop's
// goroutine touches it.
type reportState struct {
	incarnation uint64
	seq         uint64
	// acked is, per range, the status the master holds and when it was
	// sent; nil when it holds no complete view (the next report is full).
	acked    map[uint64]ackedReport
	lastFull time.Time
	// The assignments held, from the answer at version.
	version     uint64
	assigned    []*pb.RangeDescriptor
	raftAddrs   map[string]string
	live        map[uint64]bool
	nextTableID uint64
	// startsKnown: the master records range starts, and unstarted holds
	// the assigned generation-1 ranges it says never started (the only
	// ones this server may bootstrap).
	startsKnown bool
	unstarted   map[uint64]bool
	// pending: the last reconcile left work (a create that failed or
	// waits for a split, a delete): the next answer reconciles again.
	pending bool
	// unopened is, per assigned range the state file holds and no replica
	// here serves (lifecycle.Assignment.Stranded), when a reconcile first
	// saw it so.
	unopened map[uint64]time.Time
}

// reportRefreshBeats is how many heartbeat intervals a replica's report
// may be left out while it only drifts (reportDelta): 2 s by default, the
// master's load smoothing time constant (reports.loadSmoothing).
const reportRefreshBeats = 4

// strandedAfter is how long a stored, assigned range may stay without a
// replica here before reconcile opens it: far longer than a split's
// RangeCreated takes to start it, so the two never race in practice (and
// if they do, the registry's slot is created once: addSlot).
const strandedAfter = 5 * time.Second

// stranded reports whether range id, unopened now (stored, not hosted, no
// replica here covering its start), has been so for strandedAfter, and
// remembers it in next.
func (rp *reportState) stranded(id uint64, unopened bool, now time.Time, next map[uint64]time.Time) bool {
	if !unopened {
		return false
	}
	since, ok := rp.unopened[id]
	if !ok {
		since = now
	}
	next[id] = since
	return now.Sub(since) >= strandedAfter
}

// take holds the assignments of an answer that carries them.
func (rp *reportState) take(resp *pb.HeartbeatResponse) {
	rp.version = resp.GetAssignmentsVersion()
	rp.assigned = resp.GetAssigned()
	rp.raftAddrs = resp.GetRaftAddrs()
	rp.live = make(map[uint64]bool, len(resp.GetLiveTableIds()))
	for _, id := range resp.GetLiveTableIds() {
		rp.live[id] = true
	}
	rp.nextTableID = resp.GetNextTableId()
	rp.startsKnown = resp.GetRangeStartsKnown()
	rp.unstarted = make(map[uint64]bool, len(resp.GetUnstartedRangeIds()))
	for _, id := range resp.GetUnstartedRangeIds() {
		rp.unstarted[id] = true
	}
}

// started reports whether the master says assigned range id, at
// generation 1, has started (lifecycle.Assignment.Started).
func (rp *reportState) started(id uint64) bool {
	return rp.startsKnown && !rp.unstarted[id]
}

func (s *Server) statuses() []*pb.RangeStatus {
	slots := s.slotList()
	out := make([]*pb.RangeStatus, 0, len(slots))
	var led []rangeRate
	broken := 0
	defer func() { s.publishGauges(len(out), broken, led) }()
	for _, sl := range slots {
		for _, sp := range sl.spans() {
			rs := s.status(sl, sp, true)
			if rs == nil {
				continue
			}
			if sl.State() == lifecycle.Broken {
				broken++
			}
			// Counted as the master counts leaders (reports.heartbeat): a
			// quiet replica that led when it closed leads its range. Counting
			// only active ones (as from the quiet ranges' change until session
			// 19) made tablestore_partitionserver_leaders fall to 0 on an idle
			// cluster and left read-hot quiet ranges out of the busiest.
			if rs.GetLeader() {
				led = append(led, rangeRate{rangeID: sp.ID(), table: rs.GetRange().GetTable(), entitiesPerSec: rs.GetLoad().GetEntitiesPerSec()})
			}
			out = append(out, rs)
		}
	}
	return out
}

// status is a replica's report; nil for one not (or no longer) hosted. A
// quiet replica reports itself leader if it led when it closed: the range
// has that leader once woken, and the master must not count it
// leaderless.
func (s *Server) status(sl *slot, sp *fsm.Range, withLoad bool) *pb.RangeStatus {
	if sp == nil {
		return nil
	}
	st := sp.Summary()
	lc := lifecycleOf(sl)
	r := sl.open()
	m := sl.meters.get(sp.ID())
	if r == nil && withLoad && sl.wasLeader.Load() && m.load.active() {
		// A quiet leader that served reads (quiet reads, quietread.go)
		// reports their load like an open leader: a read-hot range may
		// stay quiet, and the master's load view and policies must see
		// it. Not kept as closedReport: the next idle report (reused)
		// zeroes the rates at the master.
		return &pb.RangeStatus{
			RangeId: sp.ID(), Generation: st.Range.GetGeneration(), AppliedIndex: st.AppliedIndex, Range: st.Range,
			Frozen: st.Frozen, FrozenIndex: st.FrozenIndex, Lifecycle: lc, Leader: true, Load: s.rollLoad(m, st, lc),
		}
	}
	if r == nil {
		// A closed replica's report changes only with its state: the
		// last one is reused (reports are read, never changed), which
		// also lets the heartbeat's delta see it unchanged at a glance.
		leader := sl.wasLeader.Load()
		if c := sl.closedReport(sp.ID()); c != nil && c.GetRange() == st.Range && c.GetAppliedIndex() == st.AppliedIndex &&
			c.GetFrozen() == st.Frozen && c.GetFrozenIndex() == st.FrozenIndex && c.GetLifecycle() == lc && c.GetLeader() == leader &&
			c.GetLoad().GetEntityCount() == st.EntityCount && c.GetLoad().GetBytes() == st.Bytes {
			return c
		}
		rs := &pb.RangeStatus{
			RangeId: sp.ID(), Generation: st.Range.GetGeneration(), AppliedIndex: st.AppliedIndex, Range: st.Range,
			Frozen: st.Frozen, FrozenIndex: st.FrozenIndex, Lifecycle: lc, Leader: leader,
			Load: &pb.RangeLoad{EntityCount: st.EntityCount, Bytes: st.Bytes, Lifecycle: lc},
		}
		sl.keepClosedReport(rs)
		return rs
	}
	rs := &pb.RangeStatus{
		RangeId:      sp.ID(),
		Generation:   st.Range.GetGeneration(),
		AppliedIndex: st.AppliedIndex,
		Range:        st.Range,
		Frozen:       st.Frozen,
		FrozenIndex:  st.FrozenIndex,
		Lifecycle:    lc,
	}
	rs.Leader = r.isLeader()
	rs.Voters, rs.Nonvoters = r.members(rs.Leader)
	if !withLoad {
		// The meters report rates since their last roll: only the
		// heartbeat rolls them.
		return rs
	}
	rs.Load = s.rollLoad(m, st, lc)
	return rs
}

// rollLoad reads a range's load since the last report and starts the next
// window.
func (s *Server) rollLoad(m rangeMeters, st fsm.Summary, lc string) *pb.RangeLoad {
	rates, ws, es := m.load.rates()
	hot, sample, distinct, throttled := m.keys.roll(s.cfg.HotKeys)
	latency, busy := m.keys.rollService(time.Now())
	return &pb.RangeLoad{
		ReadsPerSec: rates, WritesPerSec: ws, EntitiesPerSec: es,
		EntityCount: st.EntityCount, Bytes: st.Bytes,
		HotKeys: hot, LoadSample: sample, DistinctKeys: uint32(distinct), ThrottledPerSec: throttled,
		MeanLatencyMs: latency, ServerBusyPerSec: busy, Lifecycle: lc,
	}
}

// heartbeat reports to the master and carries out its answer. A master
// that holds no complete view of this server asks for a full report: it
// is sent at once (once; a master that keeps asking gets it next tick).
func (s *Server) heartbeat() {
	if again, cur := s.heartbeatOnce(nil); again {
		// The same statuses: building them anew would roll the load
		// meters again, and a report covering a few milliseconds would
		// turn one request into hundreds per second.
		s.heartbeatOnce(cur)
	}
}

// heartbeatOnce sends one report (of cur, or of the replicas' statuses now
// when cur is nil) and reports whether the master asked for a full one.
func (s *Server) heartbeatOnce(cur []*pb.RangeStatus) (wantFull bool, sent []*pb.RangeStatus) {
	rp := &s.report
	if rp.incarnation == 0 {
		rp.incarnation = rand.Uint64() | 1
	}
	rp.seq++
	if cur == nil {
		cur = s.statuses()
	}
	// now and sentWall are the readings the clock guard measures a step
	// from, if the master's answer finds the clock in bounds
	// (clockguard.go).
	now, sentWall := time.Now(), s.clockNow()
	full := rp.acked == nil || now.Sub(rp.lastFull) >= s.cfg.FullReportInterval
	req := &pb.HeartbeatRequest{
		Server: &pb.ServerInfo{ServerId: s.id, GrpcAddr: s.GRPCAddr(), RaftAddr: s.RaftAddr(), Zone: s.cfg.Zone,
			MetricsAddr: metricsbridge.Advertised(s.cfg.MetricsAddr, s.GRPCAddr()),
			PprofAddr:   metricsbridge.Advertised(s.cfg.PprofAddr, s.GRPCAddr())},
		Full:               full,
		Incarnation:        rp.incarnation,
		Seq:                rp.seq,
		AssignmentsVersion: rp.version,
		MergeAbort:         true,
		TableGroups:        true,
		AttachSpans:        true,
		DiskLatency:        s.diskReport(now),
		DiskSpace:          s.diskSpaceReport(),
		SentUnixNano:       sentWall.UnixNano(),
	}
	if full {
		req.Ranges = cur
	} else {
		req.Ranges, req.RemovedRangeIds = reportDelta(rp.acked, cur, now, reportRefreshBeats*s.cfg.HeartbeatInterval)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
	defer cancel()
	var resp *pb.HeartbeatResponse
	err := s.master.Call(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
		var err error
		resp, err = mc.Heartbeat(ctx, req)
		return err
	})
	if err != nil {
		// The master may or may not have taken it: what it carried is
		// sent again (a report is absolute, so sending a change twice is
		// harmless). Left as acknowledged, a range whose report went back
		// to the acknowledged one (busy, then idle again) would never
		// correct the master's view of it before the next full report.
		for _, rs := range req.Ranges {
			delete(rp.acked, rs.GetRangeId())
		}
		if s.ctx.Err() == nil {
			s.heartbeatFailed(err)
		}
		return false, nil
	}
	s.heartbeatAccepted()
	s.clock.set(resp, time.Now(), sentWall, now)
	heartbeatReportsTotal.WithLabelValues(map[bool]string{true: "full", false: "delta"}[full]).Inc()
	heartbeatReportedRanges.Add(float64(len(req.Ranges)))
	if resp.GetWantFullReport() {
		rp.acked = nil
		return true, cur
	}
	if full {
		rp.acked = make(map[uint64]ackedReport, len(cur))
		rp.lastFull = now
	}
	for _, rs := range req.Ranges {
		rp.acked[rs.GetRangeId()] = ackedReport{rs: rs, at: now}
	}
	for _, id := range req.RemovedRangeIds {
		delete(rp.acked, id)
	}
	due := full || rp.pending || len(req.RemovedRangeIds) > 0 || len(resp.GetRetiredRangeIds()) > 0
	if !resp.GetAssignmentsUnchanged() {
		rp.take(resp)
		for id, a := range rp.raftAddrs {
			s.addrs.set(id, a)
		}
		due = true
	}
	if due {
		// Nothing else changes what reconcile would do: the catalog did
		// not change, nor did the replicas hosted here since the last
		// pass found nothing to do (a full report reconciles anyway).
		rp.pending = s.reconcile(rp, retiredAt(req.Ranges, resp.GetRetiredRangeIds()))
	}
	return false, nil
}

// reconcile creates assigned replicas this server misses and removes
// replicas of deleted tables and retired ranges, against the assignments
// held (an unchanged catalog is not sent again). It reports whether it
// left work for the next pass: a create that failed or waits for a
// split, a delete.
// retired is, per range the master classed retired, the generation this
// heartbeat reported it at (retiredAt).
func (s *Server) reconcile(rp *reportState, retired map[uint64]uint64) (pending bool) {
	// Whether a replica here is stale is never decided here from what the
	// answer leaves out: a range the answer does not assign here may be
	// one the master's map lost for a while (it drops an older range a
	// newer adopted descriptor overlaps, e.g. a split's right half
	// adopted before its left), and this replica a voter holding
	// acknowledged entries. The master deletes stale replicas, on the
	// positive proof of a later generation of their range that does not
	// list this server (master/replicagc.go), at once when one holds up an
	// assigned range (chaos seed 299).
	now, unopened := time.Now(), map[uint64]time.Time{}
	defer func() { rp.unopened = unopened }()
	for _, d := range rp.assigned {
		a, parent := s.assignment(d)
		a.Started = a.Generation == 1 && rp.started(d.GetRangeId())
		a.Stranded = rp.stranded(d.GetRangeId(), a.Stored && !a.Parent && s.slotOf(d.GetRangeId()) == nil, now, unopened)
		p := lifecycle.Assigned(a)
		if p == lifecycle.Keep {
			continue
		}
		pending = true
		switch p {
		case lifecycle.Bootstrap:
			if err := s.createReplica(d, true, false, rp.raftAddrs, joinFloor{}); err != nil {
				s.logger.Warn("create assigned replica failed", "range", d.GetRangeId(), "placement", p.String(), "err", err)
			} else if !rp.startsKnown {
				// As before the master recorded starts: unprotected if
				// the range had started and this server lost its replica.
				bootstrapUncheckedTotal.Inc()
				s.logger.Warn("master records no range starts (older version): assigned generation-1 replica bootstrapped unchecked", "range", d.GetRangeId())
			}
		case lifecycle.Join:
			// Empty: not before the master gave it a join floor.
			s.joinAssigned(d, rp.raftAddrs)
		case lifecycle.OpenStored:
			if err := s.openStored(d.GetRangeId()); err != nil {
				s.logger.Warn("opening a stored range no replica here serves failed", "range", d.GetRangeId(), "err", err)
			}
		case lifecycle.WakeParent:
			go func() {
				if _, err := s.wake(parent, lifecycle.Request, "assigned range still in its parent", s.wakeWait()); err != nil {
					s.logger.Warn("waking the parent of an assigned range failed", "range", parent.id, "assigned", d.GetRangeId(), "err", err)
				}
			}()
		case lifecycle.WakeGroup:
			go func() {
				if _, err := s.wake(parent, lifecycle.Request, "assigned span of its quiet group", s.wakeWait()); err != nil {
					s.logger.Warn("waking the group of an assigned span failed", "group", parent.id, "assigned", d.GetRangeId(), "err", err)
				}
			}()
		}
	}
	for id, gen := range retired {
		pending = true
		// Only the replica the master judged: one that applied a split
		// or merge since (a later generation) is a member of a range the
		// master's answer predates.
		if err := s.deleteReplica(id, gen+1, 0); err != nil {
			logRefusedDelete(s.logger, "delete retired replica failed", id, err)
		}
	}
	var doomed []*pb.RangeDescriptor
	for _, sl := range s.slotList() {
		for _, sp := range sl.spans() {
			d := sp.Descriptor()
			if tid := d.GetTableId(); tid < rp.nextTableID && !rp.live[tid] {
				doomed = append(doomed, d)
			}
		}
	}
	// Left to right: the master freezes a deleted table's ranges, and a
	// frozen range is kept while its left neighbour here may yet merge it
	// (fsm.ErrMergePending); in another order one range of a split table
	// went per heartbeat.
	sort.Slice(doomed, func(i, j int) bool {
		if doomed[i].GetTableId() != doomed[j].GetTableId() {
			return doomed[i].GetTableId() < doomed[j].GetTableId()
		}
		return doomed[i].GetStart() < doomed[j].GetStart()
	})
	tables := liveTables{live: rp.live, next: rp.nextTableID}
	for _, d := range doomed {
		pending = true
		err := s.deleteDropped(d.GetRangeId(), tables)
		if errors.Is(err, errSpanOfGroup) {
			// Its group serves a live table's span too: the group's
			// leader takes the dropped span out of it (or, for its
			// namesake, the live spans), and a later pass deletes the
			// dropped span's group whole.
			s.detachDropped(d.GetRangeId(), tables)
		}
		if err != nil {
			logRefusedDelete(s.logger, "delete replica of dropped table failed", d.GetRangeId(), err)
		}
	}
	return pending
}

// retiredAt pairs the ranges a heartbeat's answer retires with the
// generation the heartbeat reported each at: the master classes a replica
// retired from its report in that very request. An id the request did not
// report (not expected) is left alone.
func retiredAt(reported []*pb.RangeStatus, retired []uint64) map[uint64]uint64 {
	if len(retired) == 0 {
		return nil
	}
	gens := make(map[uint64]uint64, len(reported))
	for _, rs := range reported {
		gens[rs.GetRangeId()] = rs.GetGeneration()
	}
	out := make(map[uint64]uint64, len(retired))
	for _, id := range retired {
		if g, ok := gens[id]; ok {
			out[id] = g
		}
	}
	return out
}

// logRefusedDelete logs a failed delete the reconcile retries every
// heartbeat: a refusal by design (a merge pending on the replica, a
// replica past the generation the delete was for, a range that shares its
// Raft group, whose record only that group's log may take away) at Debug,
// so that a replica kept for a while does not log a warning twice a
// second.
func logRefusedDelete(logger *slog.Logger, msg string, id uint64, err error) {
	if errors.Is(err, fsm.ErrMergePending) || errors.Is(err, ErrLateDelete) || errors.Is(err, errSpanOfGroup) {
		logger.Debug(msg, "range", id, "err", err)
		return
	}
	logger.Warn(msg, "range", id, "err", err)
}

// assignment gathers what lifecycle.Assigned decides range d's placement
// from, and the quiet replica here that still covers d's start key (its
// parent, nil when none; only a quiet parent is woken), or for a span of
// another range's group, that group's replica here when it is quiet.
func (s *Server) assignment(d *pb.RangeDescriptor) (lifecycle.Assignment, *slot) {
	// A replica whose removal a failed action left part-way does not count
	// as hosted: once its state is gone it joins again (createReplicaLocked
	// finishes the removal first); while the state is still stored it waits
	// (Stored). A generation-1 range's counts as hosted: an older master
	// (no range starts) with an assignment from before the removal would
	// have it bootstrapped again, a member outside the configuration.
	sl := s.slotOf(d.GetRangeId())
	removing := sl != nil && sl.State() == lifecycle.Removing
	a := lifecycle.Assignment{Hosted: sl != nil && (!removing || d.GetGeneration() == 1), Generation: d.GetGeneration()}
	if g := rangegroup.GroupOf(d); g != d.GetRangeId() && !a.Hosted {
		// A span of another range's group: its log or snapshot brings it
		// (docs/range-groups.md, stage 7); only a quiet replica of it
		// here is woken.
		a.OfGroup = true
		if gs := s.groupSlot(g); gs != nil && gs.State() != lifecycle.Removing {
			a.GroupHosted = true
			if gs.State() == lifecycle.Quiet {
				a.GroupQuiet = true
				return a, gs
			}
		}
		return a, nil
	}
	if a.Hosted || a.Generation == 1 {
		return a, nil
	}
	var parent *slot
	for _, sl := range s.slotList() {
		if sl.State() == lifecycle.Removing || !sl.covers(d.GetTableId(), d.GetStart()) {
			continue
		}
		a.Parent = true
		if sl.State() == lifecycle.Quiet {
			a.ParentQuiet, parent = true, sl
			break
		}
	}
	if a.Parent {
		return a, parent
	}
	// The replicas' spans are read before the state file: a split narrows
	// its parent's in-memory span as it applies, but its new range is in
	// the file only once the group commit after it is (an fsync, long on a
	// loaded disk). Read the other way round, a heartbeat in between found
	// neither and created the new range here as an empty joiner: it waited
	// for a snapshot although the split gave it its rows, and, being the
	// split's preferred leader, a leadership transfer to it timed out
	// (TestManualSplitMergeMove/split, "both halves led by ps1"). A span
	// read first that misses the key means the split was applied;
	// committing the pending transaction makes its range visible.
	if err := s.store.Flush(); err != nil {
		a.Stored = true // not decided: wait for the next pass
		return a, nil
	}
	if ok, err := s.store.HasRange(d.GetRangeId()); ok || err != nil {
		a.Stored = true // an unreadable file decides nothing either
	}
	return a, nil
}
