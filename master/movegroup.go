package master

import (
	"context"
	"fmt"
	"slices"
	"time"

	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// moveGroup moves range id's Raft group whole from server from to server
// to (docs/range-groups.md, stage 7 step 6): the scheduler's forced moves
// (re-replication off a dead server, a drain, zone repair, a full disk)
// of a group that serves several ranges ask for it (scheduler Op.Whole).
// The membership change is the group's, so the move is the one a lone
// range gets: add the new replica (a non-voter restoring every span from
// the group's snapshot, then a voter: addVoter), hand the group's
// leadership off from if it leads, remove from's member (its copy of the
// group is deleted whole: the removal names the group). No span leaves
// the group (move's isolate would make a group of n spans n groups). Every
// other range of the group is claimed meanwhile, and every one must be
// movable (moveRefusal: not frozen for a merge, to holds none). Each
// membership change records every span's new descriptor in one
// UPDATE_RANGES (recordChange). A group of one range moves as move does.
// With from == to, the group's replica on from is broken (groupBrokenOn)
// and is replaced in place whole (replaceMember): the scheduler's last
// resort when no other server could take it.
func (s *Server) moveGroup(ctx context.Context, id uint64, from, to, cause, reason string, figures map[string]float64) (*pb.RangeDescriptor, error) {
	start := time.Now()
	d, ok := s.rangeDesc(id)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	peers := s.groupPeers(id)
	if len(peers) == 0 {
		return s.move(ctx, id, from, to, cause, reason, figures)
	}
	if err := s.ops.claim(peers...); err != nil {
		return nil, err
	}
	defer s.ops.release(peers...)
	if err := s.groupMoveRefusal(d, peers, from, to); err != nil {
		return nil, err
	}
	from, err := s.moveSource(ctx, d, from)
	if err != nil {
		return nil, err
	}
	var cur *pb.RangeDescriptor
	if from == to {
		// The group's broken replica on from, replaced whole in place
		// (groupMoveRefusal let it through only so).
		cur, err = s.replaceMember(ctx, id, from)
	} else {
		cur, err = s.moveGroupMembers(ctx, d, from, to)
	}
	if err != nil {
		return nil, err
	}
	s.moveGroupEvent(d, append([]uint64{id}, peers...), from, to, cause, reason, figures, start)
	return cur, nil
}

// moveGroupMembers is moveGroup's membership change of d's group: add to,
// hand the leadership off from, remove from (recorded, and from's copy
// deleted whole).
func (s *Server) moveGroupMembers(ctx context.Context, d *pb.RangeDescriptor, from, to string) (*pb.RangeDescriptor, error) {
	addrs := s.raftAddrs()
	if err := s.addAndHandOff(ctx, d, from, to, addrs); err != nil {
		return nil, err
	}
	resp, err := s.changeMembers(ctx, &pb.ChangeReplicasRequest{RangeId: d.GetRangeId(), RemoveServerId: from, RaftAddrs: addrs})
	if err != nil {
		return nil, fmt.Errorf("remove %s: %w", from, err)
	}
	// As if the master died here: removed from the group's configuration,
	// not recorded, from's copy not deleted (the replica-set check records
	// the configuration; replica GC deletes the copy).
	if err := failpoint.Inject("master/move-group/after-remove"); err != nil {
		return nil, err
	}
	return s.recordRemoval(resp, from)
}

// addAndHandOff is a move's first half, a lone range's or a whole
// group's: to added as a voter of d's group (addVoter), then, if from
// leads, the leadership handed to another voter, so that from's removal
// never removes the leader.
func (s *Server) addAndHandOff(ctx context.Context, d *pb.RangeDescriptor, from, to string, addrs map[string]string) error {
	if _, err := s.addVoter(ctx, d, to, addrs); err != nil {
		return err
	}
	if err := failpoint.Inject("master/move/after-add"); err != nil {
		return err
	}
	return s.handOffLeadership(ctx, d.GetRangeId(), from, to)
}

// groupMoveRefusal is why a whole move of d's group (d and the ranges
// peers) from from to to cannot start (nil: it may): any of its ranges
// refuses it (spanMoveRefusal), or the map's ranges of the group do not
// list the same servers (a membership change whose record has not reached
// every span yet; the next pass asks again).
func (s *Server) groupMoveRefusal(d *pb.RangeDescriptor, peers []uint64, from, to string) error {
	inPlace := from == to && s.groupBrokenOn(from, d.GetRangeId(), peers)
	if err := s.spanMoveRefusal(d, from, to, inPlace); err != nil {
		return err
	}
	want := serversOf(d)
	slices.Sort(want)
	for _, id := range peers {
		pd, ok := s.rangeDesc(id)
		if !ok {
			return fmt.Errorf("%w: %d", ErrRangeNotFound, id)
		}
		if err := s.spanMoveRefusal(pd, from, to, inPlace); err != nil {
			return err
		}
		got := serversOf(pd)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("%w: range %d lists %v, range %d of its Raft group %v: the group moves once the map agrees",
				ErrBusy, id, got, d.GetRangeId(), want)
		}
	}
	return nil
}

// groupBrokenOn reports whether server's reports show its replica of the
// Raft group serving range id and peers broken. The partition server
// hosts a group as one replica (one member, one log, its spans opened
// together), so a damaged open breaks every span it knows, and one broken
// span's report speaks for the group; a span the broken copy does not
// know (added after its last good state) is reported missing, not broken.
func (s *Server) groupBrokenOn(server string, id uint64, peers []uint64) bool {
	if s.reports.brokenOn(server, id) {
		return true
	}
	return slices.ContainsFunc(peers, func(p uint64) bool { return s.reports.brokenOn(server, p) })
}

// spanMoveRefusal is moveRefusal for one range of a group moved whole. In
// place (the group's replica on from is broken: groupBrokenOn), a range
// whose own report on from is not broken is that same replica: only its
// freeze refuses.
func (s *Server) spanMoveRefusal(d *pb.RangeDescriptor, from, to string, inPlace bool) error {
	if !inPlace || s.reports.brokenOn(from, d.GetRangeId()) {
		return s.moveRefusal(d, from, to)
	}
	if f := s.reports.frozenAt(d.GetRangeId()); f != 0 {
		return fmt.Errorf("%w: range %d is frozen for a merge (freeze at %d); it moves once the merge ends", ErrBusy, d.GetRangeId(), f)
	}
	return nil
}

// moveGroupEvent records a whole move of a Raft group serving ranges.
func (s *Server) moveGroupEvent(d *pb.RangeDescriptor, ranges []uint64, from, to, cause, reason string, figures map[string]float64, start time.Time) {
	kind := pb.EventKind_EVENT_KIND_MOVE
	if cause == causeReReplicate {
		kind = pb.EventKind_EVENT_KIND_RE_REPLICATE
	}
	s.event(&pb.Event{
		Kind: kind, Table: d.GetTable(), RangeIds: ranges, Servers: []string{from, to},
		Figures: figures, Cause: cause, DurationSeconds: time.Since(start).Seconds(),
		Message: fmt.Sprintf("moved Raft group %d whole (ranges %v) from %s to %s (%s)", rangegroup.GroupOf(d), ranges, from, to, reason),
	})
	opSeconds.WithLabelValues("move_group").Observe(time.Since(start).Seconds())
}
