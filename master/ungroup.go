package master

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// The downgrade path from --table-groups (docs/range-groups.md, stage 7,
// step 8; docs/operations.md, "Leaving tables in shared groups"):
// UngroupTables takes every user table's range out of the anchor groups,
// each into a Raft group of its own on the same servers (isolate, as a
// move of one span does), and deletes each anchor whose group serves
// nothing else, through the delete path of any table (DELETE_TABLE, then
// the freeze and the servers' delete), so that the map holds no anchor
// and every group serves one table's ranges, as before step 4.

// ErrTableGroupsOn refuses UngroupTables on a master running with
// --table-groups: new tables would go straight back into anchor groups,
// and ensureAnchor would found new anchors.
var ErrTableGroupsOn = errors.New("master: this master runs with --table-groups; restart every master with --table-groups=false first, else new tables go straight back into shared groups")

// causeUngroup is the cause of the events UngroupTables records.
const causeUngroup = "ungroup-tables"

// ungroupBudget is how long one UngroupTables call starts new work for
// when the request names no budget.
const ungroupBudget = 10 * time.Second

// ungroupDetachTimeout bounds one range's detach (its DetachRange, the
// record and the new group's leader), whatever the caller's deadline: a
// detach is finished rather than left for the heartbeats to report.
const ungroupDetachTimeout = 30 * time.Second

// ungroupPlan reads, from the map's ranges, the user tables' ranges served
// by an anchor's group (spans, by id) and the anchors whose groups serve
// nothing else (empty, by range id). A range recorded in an anchor's
// group and not added yet (pendingAdd) counts as served by it: its add
// (resumeAddSpans) comes first, and the anchor stays meanwhile. Pure.
func ungroupPlan(ranges []*pb.RangeDescriptor) (spans []*pb.RangeDescriptor, empty []*pb.RangeDescriptor) {
	anchors := map[uint64]*pb.RangeDescriptor{}
	for _, d := range ranges {
		if isAnchor(d) {
			anchors[d.GetRangeId()] = d
		}
	}
	served := map[uint64]bool{}
	for _, d := range ranges {
		g := rangegroup.GroupOf(d)
		if anchors[g] != nil && !isAnchor(d) {
			spans = append(spans, d)
			served[g] = true
		}
	}
	for id, a := range anchors {
		if !served[id] {
			empty = append(empty, a)
		}
	}
	byID := func(a, b *pb.RangeDescriptor) int { return cmp.Compare(a.GetRangeId(), b.GetRangeId()) }
	slices.SortFunc(spans, byID)
	slices.SortFunc(empty, byID)
	return spans, empty
}

// UngroupTables serves ctl ungroup-tables: see ungroupTables.
func (v *service) UngroupTables(ctx context.Context, req *pb.UngroupTablesRequest) (*pb.UngroupTablesResponse, error) {
	s := v.s
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	if s.cfg.TableGroups {
		return nil, opStatus(ErrTableGroupsOn)
	}
	budget := ungroupBudget
	if req.GetBudgetMs() > 0 {
		budget = time.Duration(req.GetBudgetMs()) * time.Millisecond
	}
	resp, err := s.ungroupTables(ctx, time.Now().Add(budget))
	if err != nil {
		s.logger.Info("ungroup tables: this master no longer leads; the call goes on at the leader", "detached", len(resp.GetDetachedRangeIds()))
		return nil, toStatus(err)
	}
	s.logger.Info("ungroup tables", "detached", len(resp.GetDetachedRangeIds()), "remaining", len(resp.GetRemainingRangeIds()),
		"anchors_deleted", resp.GetAnchorsDeleted(), "anchors_remaining", resp.GetAnchorsRemaining())
	return resp, nil
}

// ungroupTables detaches the user ranges of anchor groups one at a time
// until none is left or deadline passes, passing again over the ranges it
// skipped (busy, failed, pending their add) while time is left, and then
// deletes the anchors whose groups it emptied. What is left is answered,
// for the caller's next call.
//
// It starts each detach and each anchor delete only while this master
// leads, and ends with ErrNotLeader once it does not (ungroupLeading):
// a deposed master's detach still applies in the group (DetachRange is
// the partition server's) but is never recorded, so a loop that went on
// for the rest of the budget detached every remaining span unrecorded
// (the new leader adopting each from heartbeats) beside whatever the new
// leader ran, and then answered ranges or anchors "remaining" that it
// could not finish. Answered NotLeader, the caller's retry goes on at the
// new leader, which rereads the map: a span detached but not recorded is
// detached again, which the server answers with the range as it is
// (idempotent), and an anchor whose DELETE_TABLE committed is gone from
// the map, its freeze resumeDeletions'.
func (s *Server) ungroupTables(ctx context.Context, deadline time.Time) (*pb.UngroupTablesResponse, error) {
	resp := &pb.UngroupTablesResponse{}
	for {
		spans, _ := ungroupPlan(s.mapRanges())
		resp.RemainingRangeIds = nil
		progress := false
		for _, d := range spans {
			if err := s.ungroupLeading(); err != nil {
				return resp, err
			}
			if ctx.Err() != nil || time.Now().After(deadline) || !s.ungroupOne(ctx, d) {
				resp.RemainingRangeIds = append(resp.RemainingRangeIds, d.GetRangeId())
				continue
			}
			resp.DetachedRangeIds = append(resp.DetachedRangeIds, d.GetRangeId())
			progress = true
		}
		if len(resp.RemainingRangeIds) == 0 || ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		if !progress {
			// Only busy or failing ranges left: their operations end in
			// time, so wait a little rather than spin.
			select {
			case <-ctx.Done():
			case <-time.After(min(200*time.Millisecond, time.Until(deadline))):
			}
		}
	}
	return resp, s.deleteEmptyAnchors(ctx, deadline, resp)
}

// ungroupLeading is ErrNotLeader when this master no longer leads:
// ungroupTables starts nothing more then.
func (s *Server) ungroupLeading() error {
	if !s.IsLeader() {
		return ErrNotLeader
	}
	return nil
}

// ungroupOne takes range d out of its anchor's group (isolate: the range
// claimed, and its group's other spans, so a busy range or group is
// skipped), and reports whether it did. A range not added to the group
// yet is skipped: resumeAddSpans adds it first.
func (s *Server) ungroupOne(ctx context.Context, d *pb.RangeDescriptor) bool {
	id := d.GetRangeId()
	if pendingAdd(d) {
		s.logger.Info("ungroup tables: range pending its add to its group; skipped", "range", id, "table", d.GetTable())
		return false
	}
	if err := s.ops.claim(id); err != nil {
		s.logger.Info("ungroup tables: range busy; skipped", "range", id, "table", d.GetTable(), "err", err)
		return false
	}
	defer s.ops.release(id)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ungroupDetachTimeout)
	defer cancel()
	got, err := s.isolate(ctx, id, causeUngroup)
	if err != nil {
		s.logger.Info("ungroup tables: range not detached; retried", "range", id, "table", d.GetTable(), "err", err)
		return false
	}
	s.logger.Info("ungroup tables: range in a group of its own", "range", id, "table", d.GetTable(), "generation", got.GetGeneration())
	return true
}

// deleteEmptyAnchors deletes, while time is left and this master leads,
// every anchor whose group serves nothing else now, and lists the anchors
// left in resp.
func (s *Server) deleteEmptyAnchors(ctx context.Context, deadline time.Time, resp *pb.UngroupTablesResponse) error {
	_, empty := ungroupPlan(s.mapRanges())
	done := map[string]bool{}
	for _, a := range empty {
		if err := s.ungroupLeading(); err != nil {
			return err
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		if err := s.deleteAnchor(ctx, a); err != nil {
			s.logger.Info("ungroup tables: anchor not deleted; retried", "table", a.GetTable(), "err", err)
			continue
		}
		resp.AnchorsDeleted = append(resp.AnchorsDeleted, a.GetTable())
		done[a.GetTable()] = true
	}
	for _, d := range s.mapRanges() {
		if isAnchor(d) && !done[d.GetTable()] {
			resp.AnchorsRemaining = append(resp.AnchorsRemaining, d.GetTable())
		}
	}
	slices.Sort(resp.AnchorsRemaining)
	return nil
}

// deleteAnchor deletes anchor a's table as DeleteTable deletes a user's
// (the command, then the freeze of its range and the servers' delete of
// its group), with a claimed meanwhile so that no add or move of its
// group runs, after checking under the claim that its group still serves
// nothing else.
func (s *Server) deleteAnchor(ctx context.Context, a *pb.RangeDescriptor) error {
	id := a.GetRangeId()
	if err := s.ops.claim(id); err != nil {
		return err
	}
	defer s.ops.release(id)
	if _, empty := ungroupPlan(s.mapRanges()); !slices.ContainsFunc(empty, func(d *pb.RangeDescriptor) bool { return d.GetRangeId() == id }) {
		return fmt.Errorf("%w: anchor %s's group serves a range again", ErrBusy, a.GetTable())
	}
	res, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, &pb.DeleteTableCommand{Name: a.GetTable()})
	if err != nil {
		return err
	}
	s.event(&pb.Event{Kind: pb.EventKind_EVENT_KIND_TABLE_DELETED, Table: a.GetTable(), RangeIds: []uint64{id}, Cause: causeUngroup,
		Message: fmt.Sprintf("anchor %s deleted: its group serves no table any more", a.GetTable())})
	// Deleted from the map now; a freeze that does not finish here is
	// finished by resumeDeletions, as a user table's.
	if err := s.freezeDeleted(ctx, a.GetTable(), res.table.GetTableId(), res.ranges); err != nil {
		s.logger.Info("ungroup tables: anchor deleted, its range not frozen yet", "table", a.GetTable(), "err", err)
	}
	return nil
}

// mapRanges is a copy of the map's range descriptors.
func (s *Server) mapRanges() []*pb.RangeDescriptor {
	var out []*pb.RangeDescriptor
	s.fsm.read(func(st *state) {
		for _, d := range st.ranges {
			out = append(out, d)
		}
	})
	return out
}
