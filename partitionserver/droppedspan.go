package partitionserver

import (
	"context"
	"fmt"

	"tablestore/internal/rangegroup"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/lifecycle"
	pb "tablestore/proto/tablestorepb"
)

// A dropped table's span in a Raft group that also serves live tables
// (docs/range-groups.md, stage 7, step 5): the replicas of a dropped
// table's ranges are deleted on every heartbeat (reconcile), and a group
// is deleted whole, so a group serving another table's span must first
// lose the dropped span. The master's delete detaches it before the
// freeze; when that gave up, or a late add put a dropped table's range in
// a group, the group's leader detaches it here, and the next pass deletes
// the dropped span's own group whole.

// liveTables is what the master's last heartbeat answer said of the
// catalog: the live tables, and the next table id (a table at or above
// it may have been created since; it is not dropped).
type liveTables struct {
	live map[uint64]bool
	next uint64
}

// dropped reports whether table id is a dropped table.
func (t liveTables) dropped(id uint64) bool { return id < t.next && !t.live[id] }

// allDropped reports whether every span is of a dropped table: only then
// may a delete of one of them take the whole group.
func (t liveTables) allDropped(spans []*fsm.Range) bool {
	for _, sp := range spans {
		if !t.dropped(sp.Descriptor().GetTableId()) {
			return false
		}
	}
	return true
}

// spanOf is what leavingGroup reads of a span.
type spanOf struct {
	id, table uint64
	frozen    bool
}

func spansOf(spans []*fsm.Range) []spanOf {
	out := make([]spanOf, 0, len(spans))
	for _, sp := range spans {
		st := sp.State()
		out = append(out, spanOf{id: sp.ID(), table: st.GetRange().GetTableId(), frozen: st.GetFrozen()})
	}
	return out
}

// leavingGroup names the spans of group that leave it so that its dropped
// tables' spans end in groups of their own: none when every span is of a
// dropped table (the group goes whole) or of a live one; the dropped
// spans; but when the group's namesake is dropped (it never leaves its
// group, fsm.ErrSpanStays), the live spans instead, as the master's
// isolate does for a namesake. A frozen span cannot leave
// (fsm.ErrRangeFrozen) and is not named.
func leavingGroup(group uint64, spans []spanOf, dropped func(table uint64) bool) []uint64 {
	var live, doomed []uint64
	anyLive, namesakeDropped := false, false
	for _, sp := range spans {
		switch {
		case !dropped(sp.table):
			anyLive = true
			if !sp.frozen {
				live = append(live, sp.id)
			}
		case sp.id == group:
			namesakeDropped = true
		case !sp.frozen:
			doomed = append(doomed, sp.id)
		}
	}
	switch {
	case !anyLive:
		return nil
	case namesakeDropped:
		return live
	}
	return doomed
}

// detachDropped runs on every replica of the group serving range id, a
// range of a dropped table that a live table's span shares the group
// with. Only the group's leader acts: it detaches the spans leavingGroup
// names, one at a time through DetachRange (DETACH_SPAN in the group's
// log), in the background and one detaching per group at a time. A
// follower proposes nothing; a quiet group is woken by the replica that
// led it when it closed, whose next pass then detaches.
func (s *Server) detachDropped(id uint64, tables liveTables) {
	sl := s.slotOf(id)
	if sl == nil {
		return
	}
	rep := sl.open()
	if rep == nil {
		if sl.State() == lifecycle.Quiet && sl.wasLeader.Load() {
			s.inDetaching(sl.id, func() {
				if _, err := s.wake(sl, lifecycle.Request, "a dropped table's span to detach", s.wakeWait()); err != nil {
					s.logger.Warn("waking a group to detach a dropped table's span failed", "group", sl.id, "range", id, "err", err)
				}
			})
		}
		return
	}
	if !rep.isLeader() {
		return
	}
	leaving := leavingGroup(sl.id, spansOf(sl.spans()), tables.dropped)
	if len(leaving) == 0 {
		// Every pass: at Debug, as logRefusedDelete logs the refusal.
		s.logger.Debug("a dropped table's span cannot leave its group (frozen)", "group", sl.id, "range", id)
		return
	}
	s.inDetaching(sl.id, func() {
		v := &service{s: s}
		for _, r := range leaving {
			ctx, cancel := context.WithTimeout(s.ctx, 2*s.cfg.ApplyTimeout)
			_, err := v.DetachRange(ctx, &pb.DetachRangeRequest{RangeId: r})
			cancel()
			if err != nil {
				s.logger.Info("detaching a span from a group serving a dropped table failed; the next pass tries again", "group", sl.id, "range", r, "err", err)
				return
			}
			s.logger.Info("span left a group serving a dropped table", "group", sl.id, "range", r, "dropped_range", id)
		}
	})
}

// inDetaching runs fn in a goroutine unless one runs for group already.
func (s *Server) inDetaching(group uint64, fn func()) {
	if _, busy := s.detaching.LoadOrStore(group, true); busy {
		return
	}
	go func() {
		defer s.detaching.Delete(group)
		fn()
	}()
}

// errNotAllDropped wraps errSpanOfGroup for deleteDropped's refusal.
func errNotAllDropped(id uint64, spans []*fsm.Range) error {
	return fmt.Errorf("%w: range %d of a dropped table is one of %d spans of group %d, which serves a live table",
		errSpanOfGroup, id, len(spans), rangegroup.GroupOf(spans[0].Descriptor()))
}
