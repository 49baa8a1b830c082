package partitionserver

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/lifecycle"
	pb "tablestore/proto/tablestorepb"
)

// AttachSpan takes range right, the frozen only range of a Raft group of
// its own, into the group of group_range_id as a span, its rows where
// they are (docs/range-groups.md, stage 8): one ATTACH_SPAN entry in the
// group's log, addressed to the group's namesake. Served like MergeRange:
// on the group's leader, with the membership settled (every member of the
// group applies the entry with its own server's replica of right, which
// must hold the freeze: colocated, checkMergeFreeze, checked before
// anything is proposed), answered once the entry applied here, the span
// served here through the group from the answer on. A retry after it
// applied answers the span again.
func (v *service) AttachSpan(ctx context.Context, req *pb.AttachSpanRequest) (*pb.AttachSpanResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("attach-span").Observe(time.Since(start).Seconds()) }()
	right := req.GetRight()
	id, freeze := right.GetRangeId(), req.GetRightFreezeIndex()
	if id == 0 || right.GetTableId() == 0 || freeze == 0 {
		return nil, rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, "the right range's descriptor and freeze index required", nil)
	}
	r, err := v.leaderReplica(req.GetGroupRangeId())
	if err != nil {
		return nil, err
	}
	if id == r.member.id {
		return nil, toStatus(r, fmt.Errorf("%w: range %d names the group", fsm.ErrBadCommand, id))
	}
	if resp := attachedSpan(r, right); resp != nil {
		return resp, nil
	}
	if err := failpoint.Inject("partitionserver/attach-span/before-propose"); err != nil {
		return nil, toStatus(r, err)
	}
	if err := r.lockMembers(ctx); err != nil {
		return nil, toStatus(r, err)
	}
	defer r.unlockMembers()
	// The entry copies the group's replicas into the span's record, and
	// each member applies it with its own replica of right: the members
	// must be the group's configuration, not a change still settling.
	if err := r.settleMembers(v.s.cfg.ApplyTimeout, v.s.cfg.RaftHeartbeatTimeout); err != nil {
		return nil, toStatus(r, raftErr(err))
	}
	if resp := attachedSpan(r, right); resp != nil {
		// A retry whose first attempt's entry applied while this one
		// waited for the lock (or the settling's barrier applied it).
		return resp, nil
	}
	if err := colocated(r.member.id, r.memberIDs(), right); err != nil {
		return nil, toStatus(r, err)
	}
	if err := v.checkAttachRight(ctx, right, freeze); err != nil {
		return nil, toStatus(r, err)
	}
	// Group-wide in the apply; addressed to the namesake as the proto
	// says, or to this span when the namesake is gone.
	names, err := r.member.replica(r.member.id)
	if err != nil {
		names = r
	}
	res, err := v.run(ctx, names, pb.CommandKind_COMMAND_KIND_ATTACH_SPAN, &pb.AttachSpanCommand{Right: right, RightFreezeIndex: freeze})
	if err != nil {
		return nil, err
	}
	// Served here from the answer on: the master routes to the group at
	// once.
	if err := r.waitApplied(ctx, r.raft.AppliedIndex()); err != nil {
		return nil, toStatus(r, err)
	}
	v.s.indexSpan(id, r.member.id)
	if err := failpoint.Inject("partitionserver/attach-span/after-apply"); err != nil {
		return nil, toStatus(r, err)
	}
	v.s.logger.Info("range attached to a group", "range", id, "table", right.GetTable(), "group", r.member.id,
		"freeze_index", freeze, "generation", res.Range.GetGeneration(), "took", time.Since(start))
	return &pb.AttachSpanResponse{Range: res.Range}, nil
}

// attachedSpan answers AttachSpan of right when r's group serves it here
// already, a range of right's table (its entry applied: a retry), nil
// otherwise.
func attachedSpan(r *replica, right *pb.RangeDescriptor) *pb.AttachSpanResponse {
	sp, ok := r.group.Span(right.GetRangeId())
	if !ok || sp.Descriptor().GetTableId() != right.GetTableId() {
		return nil
	}
	return &pb.AttachSpanResponse{Range: sp.Descriptor()}
}

// checkAttachRight is checkMergeFreeze for an attach, which also needs
// right alone in a group of its own here: the attach ends that group on
// every server (RangeAttached), which must then serve nothing else. The
// master isolates the range first; a range that shares its group is
// refused NOT_READY, nothing proposed.
func (v *service) checkAttachRight(ctx context.Context, right *pb.RangeDescriptor, freeze uint64) error {
	if err := v.checkMergeFreeze(ctx, right, freeze); err != nil {
		return err
	}
	rr, err := v.replica(right.GetRangeId())
	if err != nil {
		return fmt.Errorf("%w: range %d: %v", ErrFreezeMismatch, right.GetRangeId(), err)
	}
	d := rr.fsm.Descriptor()
	if g := rangegroup.GroupOf(d); g != d.GetRangeId() || rr.member.id != d.GetRangeId() || len(rr.group.Spans()) != 1 {
		return fmt.Errorf("%w: range %d is one of %d ranges of Raft group %d (%v)", ErrFreezeMismatch, d.GetRangeId(), len(rr.group.Spans()), rr.member.id, fsm.ErrNotOwnGroup)
	}
	return nil
}

var _ fsm.AttachHooks = (*Server)(nil)

// RangeAttached implements fsm.AttachHooks: range right, the only range
// of a Raft group of its own, is a span of group here now (its record
// names group; SpansChanged has indexed it there). Right's own group
// stops and its Raft state goes as a merged range's does (lifecycle
// Merged: its member closed, its group of the shared log, its transport
// state and its directory dropped), but not its record and rows, which
// are group's span's. A quiet group is only dropped. A crash before this
// runs leaves right's group in the shared log with no record naming it:
// the start drops it (dropOrphanLogs), and opens no group for right.
//
// It runs inside the state store's commit, so the work happens in a
// goroutine.
func (s *Server) RangeAttached(group, right uint64) {
	go func() {
		if failpoint.Inject("partitionserver/attach-span/keep-own-group") != nil {
			return // tests: the crash before the group stops
		}
		defer s.lockRange(right)()
		sl := s.groupSlot(right)
		if sl == nil || sl.id == group {
			return
		}
		if s.servesOthers(sl, right) {
			// Not a group of one range (the proposer checks, so only a
			// snapshot of another build could bring this): it goes on
			// serving its other spans.
			s.dropSpans(sl, []uint64{right})
			return
		}
		sl.lock()
		defer sl.unlock()
		if s.groupSlot(right) != sl {
			return // removed meanwhile
		}
		if _, err := s.step(sl, lifecycle.Input{Event: lifecycle.Merged}, "attach", nil); err != nil {
			s.logger.Warn("stopping an attached range's own group failed; the next start drops its log", "range", right, "group", group, "err", err)
			return
		}
		s.logger.Info("range's own group ended here: the range is a span of another group", "range", right, "group", group)
	}()
}
