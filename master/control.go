package master

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// opStatus translates operation errors for ctl.
func opStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrMergeAborted):
		return rpcerr.New(codes.Aborted, rpcerr.ReasonMergeAborted, err.Error(), nil)
	case errors.Is(err, ErrRangeNotFound), errors.Is(err, ErrNoNeighbour):
		return rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, err.Error(), nil)
	case errors.Is(err, ErrBusy), errors.Is(err, ErrNotReady), errors.Is(err, ErrReplicaDown):
		return rpcerr.New(codes.Aborted, rpcerr.ReasonUnavailable, err.Error(), nil)
	case errors.Is(err, ErrTargetUnfit), errors.Is(err, ErrTableGroupsOn), errors.Is(err, ErrTableGroupsOff), errors.Is(err, ErrAttachUnfit):
		return rpcerr.New(codes.FailedPrecondition, "", err.Error(), nil)
	case errors.Is(err, ErrBadTarget), errors.Is(err, ErrBadSource), errors.Is(err, ErrBadCommand):
		return rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, err.Error(), nil)
	case errors.Is(err, ErrUnknownServer):
		return toStatus(err)
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrTableNotFound):
		return toStatus(err)
	}
	if info := rpcerr.Parse(err); info.Reason != "" {
		return err
	}
	return rpcerr.New(codes.Internal, "", err.Error(), nil)
}

// Events streams the event log.
func (v *service) Events(req *pb.EventsRequest, stream pb.MasterService_EventsServer) error {
	s := v.s
	if err := s.ready(); err != nil {
		return toStatus(err)
	}
	next := req.GetSinceSeq()
	for {
		_, ch := s.partitionMap()
		var batch []*pb.Event
		s.fsm.read(func(st *state) {
			for _, e := range st.events {
				if e.GetSeq() >= next {
					batch = append(batch, e)
				}
			}
		})
		for _, e := range batch {
			if err := stream.Send(e); err != nil {
				return err
			}
			next = e.GetSeq() + 1
		}
		if !req.GetFollow() {
			return nil
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-s.ctx.Done():
			return toStatus(ErrNotLeader)
		case <-ch:
		case <-time.After(time.Second):
		}
		if !s.IsLeader() {
			return toStatus(ErrNotLeader)
		}
	}
}

// Split splits the range holding (table, partition_key) at that key.
func (v *service) Split(ctx context.Context, req *pb.SplitRequest) (*pb.SplitResponse, error) {
	s := v.s
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	var d, below *pb.RangeDescriptor
	var tableOK bool
	s.fsm.read(func(st *state) {
		t, ok := st.tables[strings.ToLower(req.GetTable())]
		if !ok {
			return
		}
		tableOK = true
		for _, r := range st.ranges {
			if r.GetTableId() != t.GetTableId() {
				continue
			}
			if req.GetPartitionKey() >= r.GetStart() && (r.GetEnd() == "" || req.GetPartitionKey() < r.GetEnd()) {
				d = r
			}
			if r.GetEnd() == req.GetPartitionKey() {
				below = r
			}
		}
	})
	if !tableOK {
		return nil, toStatus(ErrTableNotFound)
	}
	if d == nil {
		return nil, opStatus(fmt.Errorf("%w: no range holds %q", ErrRangeNotFound, req.GetPartitionKey()))
	}
	if req.GetPartitionKey() == d.GetStart() {
		if below == nil {
			return nil, opStatus(fmt.Errorf("%w: %q starts the table", ErrBadCommand, req.GetPartitionKey()))
		}
		// Split there already: the answer a split would give, as
		// CockroachDB's AdminSplit answers a split at a range boundary.
		// A retry of a split that happened (its answer lost to a master
		// failover or a caller's attempt timeout) then succeeds rather
		// than failing a split that was made.
		return &pb.SplitResponse{Left: below, Right: d}, nil
	}
	if err := s.ops.claim(d.GetRangeId()); err != nil {
		return nil, opStatus(err)
	}
	defer s.ops.release(d.GetRangeId())
	start := time.Now()
	resp, err := s.split(ctx, d.GetRangeId(), req.GetPartitionKey(), "", causeOperator, "", nil, req.GetInGroup())
	s.ops.record(scheduler.Op{Kind: scheduler.Split, Range: d.GetRangeId(), Key: req.GetPartitionKey(), Rule: causeOperator, At: start}, time.Now(), err)
	return resp, opStatus(err)
}

// mergeReplicasRefusal decides whether an operator's merge of left and
// right may start (nil: it may), by servers (serverViews): with a replica
// of either on a server that is down, the co-location or the freeze
// (which waits for every replica) cannot finish, and the merge failed
// only after holding both ranges busy up to the operation timeout. The
// scheduler's merge-cold has it too (Plan.allStaying, which also waits
// for draining servers). Pure.
func mergeReplicasRefusal(left, right *pb.RangeDescriptor, servers map[string]serverView) error {
	for _, d := range []*pb.RangeDescriptor{left, right} {
		for _, r := range d.GetReplicas() {
			if !servers[r.GetServerId()].up {
				return fmt.Errorf("%w: range %d on %s, which is down; merge once it is back or re-replicated", ErrReplicaDown, d.GetRangeId(), r.GetServerId())
			}
		}
	}
	return nil
}

// Merge merges a range with its right neighbour.
func (v *service) Merge(ctx context.Context, req *pb.MergeRequest) (*pb.MergeResponse, error) {
	s := v.s
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	d, ok := s.rangeDesc(req.GetRangeId())
	if !ok {
		return nil, opStatus(fmt.Errorf("%w: %d", ErrRangeNotFound, req.GetRangeId()))
	}
	right := s.rightNeighbour(d)
	if right == nil {
		return nil, opStatus(fmt.Errorf("%w: %d", ErrNoNeighbour, req.GetRangeId()))
	}
	if err := mergeReplicasRefusal(d, right, s.serverViews(time.Now())); err != nil {
		return nil, opStatus(err)
	}
	if err := s.ops.claim(d.GetRangeId(), right.GetRangeId()); err != nil {
		return nil, opStatus(err)
	}
	defer s.ops.release(d.GetRangeId(), right.GetRangeId())
	start := time.Now()
	merged, err := s.merge(ctx, d.GetRangeId(), right.GetRangeId(), causeOperator, "", nil)
	s.ops.record(scheduler.Op{Kind: scheduler.Merge, Range: d.GetRangeId(), Right: right.GetRangeId(), Rule: causeOperator, At: start}, time.Now(), err)
	if err != nil {
		return nil, opStatus(err)
	}
	return &pb.MergeResponse{Range: merged}, nil
}

// moveTargetRefusal decides whether an operator's move may add a replica
// on server to (nil: it may), by servers (serverViews). A server that is
// down cannot take the new replica, so the move would fail only after
// its CreateReplica timed out; a draining server would have the replica
// moved off again by the drain, and one whose disk is full (under its
// reserve) by the full-disk rule, after the snapshot had used up what
// space is left (a low one is the operator's call: the master itself puts
// nothing there). The master's own moves pick their targets
// by the same rules (the scheduler's live, non-draining servers), except
// a merge's co-location, which must put replicas where the left range's
// are. Pure.
func moveTargetRefusal(to string, servers map[string]serverView) error {
	sv, ok := servers[to]
	switch {
	case to == "":
		return fmt.Errorf("%w: no target server given", ErrBadTarget)
	case !ok:
		return fmt.Errorf("%w: %q", ErrUnknownServer, to)
	case !sv.up:
		return fmt.Errorf("%w: %s is down (not heard from within --server-timeout)", ErrTargetUnfit, to)
	case sv.draining:
		return fmt.Errorf("%w: %s is draining (ctl drain %s --undo first)", ErrTargetUnfit, to, to)
	case diskOf(sv.disk).State() == scheduler.DiskFull:
		return fmt.Errorf("%w: %s's disk is full (%d bytes free, under its --disk-reserve of %d)", ErrTargetUnfit, to,
			sv.disk.GetAvailableBytes(), sv.disk.GetReserveBytes())
	}
	return nil
}

// Move moves one replica of a range.
func (v *service) Move(ctx context.Context, req *pb.MoveRequest) (*pb.MoveResponse, error) {
	s := v.s
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	if err := moveTargetRefusal(req.GetToServerId(), s.serverViews(time.Now())); err != nil {
		return nil, opStatus(err)
	}
	// The range alone, or its Raft group whole (operatorgroup.go).
	d, err := s.operatorMove(ctx, req)
	if err != nil {
		return nil, opStatus(err)
	}
	return &pb.MoveResponse{Range: d}, nil
}

// TransferLeader moves a range's leadership.
func (v *service) TransferLeader(ctx context.Context, req *pb.MasterTransferLeaderRequest) (*pb.MasterTransferLeaderResponse, error) {
	s := v.s
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	// The transfer is the whole Raft group's: the operator names one
	// range, which leaves its group first unless the group moves whole
	// (an anchor's always; operatorgroup.go).
	if err := s.operatorTransfer(ctx, req.GetRangeId(), req.GetToServerId(), req.GetWhole()); err != nil {
		return nil, opStatus(err)
	}
	return &pb.MasterTransferLeaderResponse{}, nil
}
