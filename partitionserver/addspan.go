package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	"tablestore/partitionserver/fsm"
	pb "tablestore/proto/tablestorepb"
)

// ErrSpanOfAnotherGroup refuses to bootstrap a range whose descriptor names
// another range's Raft group: only that group's log creates the span on a
// replica (ADD_SPAN, SPLIT_SPAN), or a snapshot of the group brings it.
var ErrSpanOfAnotherGroup = errors.New("partitionserver: the range is a span of another range's Raft group; only that group's log creates it")

// AddSpan stores a new table's first range as a span of an existing Raft
// group (docs/range-groups.md, stage 7): one ADD_SPAN entry in the group's
// log, addressed to the group's namesake, whose replicas the span takes.
// Served like SplitRange with in_group: on the group's leader, with the
// membership settled (the replicas the entry copies must be the group's
// configuration), answered once the entry applied here, the span served
// here from the answer on. A retry after it applied answers the span
// again; the apply's fence refuses an add of a range that was added and
// left the group since (fsm.ErrRangeRetired), and an add to a group that
// holds the request's max_spans spans already (fsm.ErrGroupFull, reason
// GROUP_FULL).
func (v *service) AddSpan(ctx context.Context, req *pb.AddSpanRequest) (*pb.AddSpanResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("add-span").Observe(time.Since(start).Seconds()) }()
	d := req.GetRange()
	id := d.GetRangeId()
	if id == 0 {
		return nil, rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, "range descriptor required", nil)
	}
	r, err := v.leaderReplica(req.GetGroupRangeId())
	if err != nil {
		return nil, err
	}
	if g := rangegroup.GroupOf(d); d.GetGroupId() != 0 && g != r.member.id {
		err := fmt.Errorf("%w: range %d names group %d, not group %d", fsm.ErrBadCommand, id, g, r.member.id)
		return nil, toStatus(r, err)
	}
	if resp := v.addedSpan(r, d); resp != nil {
		return resp, nil
	}
	// The entry addresses the group's namesake, which keeps the adds.
	names, err := r.member.replica(r.member.id)
	if err != nil {
		return nil, toStatus(r, fmt.Errorf("%w: group %d's namesake: %v", fsm.ErrRangeNotFound, r.member.id, err))
	}
	if err := failpoint.Inject("partitionserver/add-span/before-propose"); err != nil {
		return nil, toStatus(r, err)
	}
	if err := r.lockMembers(ctx); err != nil {
		return nil, toStatus(r, err)
	}
	defer r.unlockMembers()
	if err := r.settleMembers(v.s.cfg.ApplyTimeout, v.s.cfg.RaftHeartbeatTimeout); err != nil {
		return nil, toStatus(r, raftErr(err))
	}
	if resp := v.addedSpan(r, d); resp != nil {
		// A retry whose first attempt's entry applied while this one
		// waited for the lock.
		return resp, nil
	}
	res, err := v.run(ctx, names, pb.CommandKind_COMMAND_KIND_ADD_SPAN, &pb.AddSpanCommand{Range: d, Floor: req.GetFloor(), MaxSpans: req.GetMaxSpans()})
	if err != nil {
		return nil, err
	}
	// Served here from the answer on, not from the hook that follows the
	// group commit: the master routes to it at once.
	if err := r.waitApplied(ctx, r.raft.AppliedIndex()); err != nil {
		return nil, toStatus(r, err)
	}
	v.s.indexSpan(id, r.member.id)
	if err := failpoint.Inject("partitionserver/add-span/after-apply"); err != nil {
		return nil, toStatus(r, err)
	}
	v.s.logger.Info("range added to a group", "range", id, "table", d.GetTable(), "group", r.member.id, "generation", res.Range.GetGeneration(), "took", time.Since(start))
	return &pb.AddSpanResponse{Range: res.Range}, nil
}

// addedSpan answers AddSpan of d when the group of r serves it here
// already, a range of d's table (its entry applied: a retry), nil
// otherwise: the apply decides the rest (a range of the group that is not
// the table's is refused there, ErrRangeExists).
func (v *service) addedSpan(r *replica, d *pb.RangeDescriptor) *pb.AddSpanResponse {
	id := d.GetRangeId()
	if sl := v.s.slotOf(id); sl == nil || sl.id != r.member.id {
		return nil
	}
	sp, ok := r.group.Span(id)
	if !ok || sp.Descriptor().GetTableId() != d.GetTableId() {
		return nil
	}
	return &pb.AddSpanResponse{Range: sp.Descriptor()}
}
