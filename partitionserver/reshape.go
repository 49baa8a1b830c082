package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/failpoint"
	"tablestore/internal/peertls"
	"tablestore/internal/rangeclient"
	"tablestore/internal/rpcerr"
	"tablestore/partitionserver/fsm"
	pb "tablestore/proto/tablestorepb"
)

// ErrNotFrozen refuses an export of a range that still takes writes.
var ErrNotFrozen = errors.New("partitionserver: range is not frozen")

func (v *service) leaderReplica(id uint64) (*replica, error) {
	r, err := v.replica(id)
	if err != nil {
		return nil, err
	}
	if !r.isLeader() {
		return nil, toStatus(r, ErrNotLeader)
	}
	return r, nil
}

// SplitRange splits through the range's log and waits (bounded) until the
// right-hand range has a leader, so routing to it works when this returns.
func (v *service) SplitRange(ctx context.Context, req *pb.SplitRangeRequest) (*pb.SplitRangeResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("split").Observe(time.Since(start).Seconds()) }()
	r, err := v.leaderReplica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if err := failpoint.Inject("partitionserver/split/before-propose"); err != nil {
		return nil, toStatus(r, err)
	}
	res, err := v.run(ctx, r, pb.CommandKind_COMMAND_KIND_SPLIT, &pb.SplitCommand{
		SplitKey: req.GetSplitKey(), NewRangeId: req.GetNewRangeId(), PreferredLeader: req.GetPreferredLeader(),
	})
	if err != nil {
		return nil, err
	}
	if err := failpoint.Inject("partitionserver/split/after-apply"); err != nil {
		return nil, toStatus(r, err)
	}
	// No wait for the right range's election: the master publishes the new
	// map at once and front-ends find the leader as it emerges.
	v.s.logger.Info("range split", "range", req.GetRangeId(), "key", req.GetSplitKey(), "new_range", req.GetNewRangeId(), "took", time.Since(start))
	return &pb.SplitRangeResponse{Left: res.Range, Right: res.Right}, nil
}

// FreezeRange stops writes to a range that is about to be merged.
func (v *service) FreezeRange(ctx context.Context, req *pb.FreezeRangeRequest) (*pb.FreezeRangeResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("freeze").Observe(time.Since(start).Seconds()) }()
	r, err := v.leaderReplica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if r.fsm.State().GetFrozen() {
		return &pb.FreezeRangeResponse{Range: r.fsm.Descriptor()}, nil
	}
	res, err := v.run(ctx, r, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{Generation: r.fsm.Descriptor().GetGeneration()})
	if err != nil {
		return nil, err
	}
	return &pb.FreezeRangeResponse{Range: res.Range}, nil
}

// ExportRange returns the entities of a frozen range, read linearizably.
func (v *service) ExportRange(ctx context.Context, req *pb.ExportRangeRequest) (*pb.ExportRangeResponse, error) {
	r, err := v.leaderReplica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if err := r.linearizable(ctx); err != nil {
		return nil, toStatus(r, err)
	}
	if !r.fsm.State().GetFrozen() {
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonInvalidInput, ErrNotFrozen.Error(), nil)
	}
	desc, rows, requests, last, err := r.fsm.Export()
	if err != nil {
		return nil, toStatus(r, err)
	}
	return &pb.ExportRangeResponse{Range: desc, Rows: rows, Requests: requests, LastTimestampUnixNano: last}, nil
}

// AbsorbRange extends the range over its frozen right neighbour. It is
// idempotent: a range that already covers the neighbour answers at once.
func (v *service) AbsorbRange(ctx context.Context, req *pb.AbsorbRangeRequest) (*pb.AbsorbRangeResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("absorb").Observe(time.Since(start).Seconds()) }()
	r, err := v.leaderReplica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if err := r.linearizable(ctx); err != nil {
		return nil, toStatus(r, err)
	}
	desc := r.fsm.Descriptor()
	right := req.GetRight()
	if desc.GetEnd() == right.GetEnd() && desc.GetStart() < right.GetStart() {
		return &pb.AbsorbRangeResponse{Range: desc}, nil
	}
	var export *pb.ExportRangeResponse
	ectx, cancel := context.WithTimeout(ctx, exportTimeout)
	err = rangeclient.Call(ectx, func() ([]string, error) { return req.GetRightAddrs(), nil },
		func(ctx context.Context, addr string) error {
			var err error
			export, err = exportFrom(ctx, v.s.creds, addr, right.GetRangeId())
			return err
		}, rangeclient.Options{RetryBusy: true})
	cancel()
	if err != nil {
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, fmt.Sprintf("export of range %d: %v", right.GetRangeId(), err), nil)
	}
	if err := failpoint.Inject("partitionserver/absorb/after-export"); err != nil {
		return nil, toStatus(r, err)
	}
	res, err := v.run(ctx, r, pb.CommandKind_COMMAND_KIND_ABSORB, &pb.AbsorbCommand{
		Right: export.GetRange(), Rows: export.GetRows(), RightLastTimestampUnixNano: export.GetLastTimestampUnixNano(),
		Requests: export.GetRequests(),
	})
	if err != nil {
		return nil, err
	}
	v.s.logger.Info("range absorbed its right neighbour", "range", r.id, "right", right.GetRangeId(), "rows", len(export.GetRows()), "took", time.Since(start))
	return &pb.AbsorbRangeResponse{Range: res.Range}, nil
}

// run proposes a reshaping command on r's log and returns its result, with
// errors already translated for the caller.
func (v *service) run(ctx context.Context, r *replica, kind pb.CommandKind, m proto.Message) (*fsm.Result, error) {
	data, err := fsm.Encode(kind, m)
	if err != nil {
		return nil, err
	}
	res, err := r.propose(ctx, data, v.s.cfg.ApplyTimeout)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, toStatus(r, err)
	}
	return res, nil
}

// exportTimeout bounds the search for the frozen range's leader.
const exportTimeout = 10 * time.Second

func exportFrom(ctx context.Context, creds *peertls.Creds, addr string, rangeID uint64) (*pb.ExportRangeResponse, error) {
	conn, err := grpc.NewClient(addr, creds.DialOption(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		return nil, rpcerr.New(codes.Unavailable, "", err.Error(), nil)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pb.NewPartitionServiceClient(conn).ExportRange(cctx, &pb.ExportRangeRequest{RangeId: rangeID})
}

// ChangeReplicas adds and/or removes one voter, then records the new
// membership in the descriptor through the log.
func (v *service) ChangeReplicas(ctx context.Context, req *pb.ChangeReplicasRequest) (*pb.ChangeReplicasResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("change_replicas").Observe(time.Since(start).Seconds()) }()
	r, err := v.leaderReplica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	for id, a := range req.GetRaftAddrs() {
		v.s.addrs.set(id, a)
	}
	timeout := v.s.cfg.ApplyTimeout
	if add := req.GetAddServerId(); add != "" {
		if err := r.compact(); err != nil {
			return nil, toStatus(r, fmt.Errorf("compact before adding a voter: %w", err))
		}
		addr, _ := v.s.addrs.get(add)
		if err := r.raft.AddVoter(raft.ServerID(add), raft.ServerAddress(addr), 0, timeout).Error(); err != nil {
			return nil, toStatus(r, raftErr(err))
		}
	}
	if rm := req.GetRemoveServerId(); rm != "" {
		if rm == v.s.id {
			return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonInvalidInput, "transfer leadership before removing the leader", nil)
		}
		if err := r.raft.RemoveServer(raft.ServerID(rm), 0, timeout).Error(); err != nil {
			return nil, toStatus(r, raftErr(err))
		}
	}
	cf := r.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, toStatus(r, raftErr(err))
	}
	var reps []*pb.Replica
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			reps = append(reps, &pb.Replica{ServerId: string(s.ID)})
		}
	}
	sort.Slice(reps, func(i, j int) bool { return reps[i].GetServerId() < reps[j].GetServerId() })
	res, err := v.run(ctx, r, pb.CommandKind_COMMAND_KIND_SET_REPLICAS, &pb.SetReplicasCommand{Replicas: reps})
	if err != nil {
		return nil, err
	}
	return &pb.ChangeReplicasResponse{Range: res.Range}, nil
}

// TransferLeader hands leadership to another voter and waits for it.
func (v *service) TransferLeader(ctx context.Context, req *pb.TransferLeaderRequest) (*pb.TransferLeaderResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("transfer_leader").Observe(time.Since(start).Seconds()) }()
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if r.leaderID() == req.GetToServerId() {
		return &pb.TransferLeaderResponse{}, nil
	}
	if !r.isLeader() {
		return nil, toStatus(r, ErrNotLeader)
	}
	if !r.isVoter(req.GetToServerId()) {
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonInvalidInput,
			fmt.Sprintf("%s is not a voter of range %d", req.GetToServerId(), r.id), nil)
	}
	addr := req.GetToRaftAddr()
	if a, ok := v.s.addrs.get(req.GetToServerId()); ok {
		addr = a
	}
	if err := r.raft.LeadershipTransferToServer(raft.ServerID(req.GetToServerId()), raft.ServerAddress(addr)).Error(); err != nil {
		// raft may keep refusing writes after a failed transfer.
		go v.s.watchTransfer(r, start)
		return nil, toStatus(r, raftErr(err))
	}
	return &pb.TransferLeaderResponse{}, nil
}

// SplitKey proposes the PartitionKey halving the range by size.
func (v *service) SplitKey(ctx context.Context, req *pb.SplitKeyRequest) (*pb.SplitKeyResponse, error) {
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	key, ok, err := r.fsm.MedianKey()
	if err != nil {
		return nil, toStatus(r, err)
	}
	return &pb.SplitKeyResponse{SplitKey: key, Ok: ok}, nil
}

// raftErr maps raft's membership errors onto the replica layer's.
func raftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return ErrNotLeader
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShuttingDown
	}
	return err
}
