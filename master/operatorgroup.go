package master

import (
	"context"
	"fmt"

	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// An operator's move or leadership transfer of a range whose Raft group
// serves several ranges (docs/range-groups.md, stage 7). The membership
// and the leadership are the group's, so by default the named range first
// leaves its group (isolate), as before: an operator who moves one table's
// range means that range. But isolating a group's namesake takes every
// other span out instead, and an anchor (the namesake of a shared group of
// tables, whose own range is empty) is only ever moved to move its group:
// isolating it would make a group of 64 tables 64 groups. So an anchor's
// group always moves whole, and any range's may on request (MoveRequest
// and MasterTransferLeaderRequest's whole, ctl --whole).

// operatorWhole reports whether an operator's operation on range d, whose
// Raft group serves peers other ranges, acts on the group whole: the group
// serves others, and the operator asked for it or d is an anchor.
func operatorWhole(d *pb.RangeDescriptor, peers int, asked bool) bool {
	return peers > 0 && (asked || isAnchor(d))
}

// groupMoverOf is the range a whole move of range d's Raft group is asked
// through, as the scheduler plans it (scheduler groupMover): the group's
// namesake, or, when the map no longer holds it (merged away), the
// group's range of lowest id.
func (s *Server) groupMoverOf(d *pb.RangeDescriptor) uint64 {
	g := rangegroup.GroupOf(d)
	if nd, ok := s.rangeDesc(g); ok && rangegroup.GroupOf(nd) == g {
		return g
	}
	var ranges []uint64
	s.fsm.read(func(st *state) { ranges = st.groupRanges(g) })
	if len(ranges) == 0 {
		return d.GetRangeId()
	}
	return ranges[0]
}

// operatorMove carries out an operator's MoveRequest: the range's Raft
// group whole (moveGroup, through its mover, which it claims; moveGroup
// claims the others) when operatorWhole says so, else the range alone
// (move, which takes it out of its group first), the range claimed.
// Returns the named range's descriptor after.
func (s *Server) operatorMove(ctx context.Context, req *pb.MoveRequest) (*pb.RangeDescriptor, error) {
	id := req.GetRangeId()
	d, ok := s.rangeDesc(id)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	move, target := s.move, id
	if operatorWhole(d, len(s.groupPeers(id)), req.GetWhole()) {
		move, target = s.moveGroup, s.groupMoverOf(d)
	}
	if err := s.ops.claim(target); err != nil {
		return nil, err
	}
	defer s.ops.release(target)
	got, err := move(ctx, target, req.GetFromServerId(), req.GetToServerId(), causeOperator, "operator request", nil)
	if err != nil || target == id {
		return got, err
	}
	if d, ok := s.rangeDesc(id); ok {
		return d, nil
	}
	return got, nil
}

// operatorTransfer carries out an operator's leadership transfer of range
// id to server to: of its Raft group whole when operatorWhole says so (no
// range leaves the group; every other range is claimed meanwhile, as
// isolate claims them), else after the range left its group (isolate).
func (s *Server) operatorTransfer(ctx context.Context, id uint64, to string, whole bool) error {
	if err := s.ops.claim(id); err != nil {
		return err
	}
	defer s.ops.release(id)
	d, ok := s.rangeDesc(id)
	if !ok {
		return fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	if !hasReplica(d, to) {
		// Refused before the range leaves its group for nothing.
		return fmt.Errorf("%w: %s holds no replica of range %d", ErrBadTarget, to, id)
	}
	if peers := s.groupPeers(id); operatorWhole(d, len(peers), whole) {
		if err := s.ops.claim(peers...); err != nil {
			return err
		}
		defer s.ops.release(peers...)
	} else if _, err := s.isolate(ctx, id, causeOperator); err != nil {
		return err
	}
	return s.transferWithEvent(ctx, id, s.leaderOf(id), to, causeOperator, "", nil)
}
