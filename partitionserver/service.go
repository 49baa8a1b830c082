package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/edm"
	"tablestore/internal/filter"
	"tablestore/internal/keys"
	"tablestore/internal/rpcerr"
	"tablestore/partitionserver/fsm"
	pb "tablestore/proto/tablestorepb"
)

// service implements the PartitionService gRPC API; it translates errors
// into gRPC statuses once, in toStatus.
type service struct {
	pb.UnimplementedPartitionServiceServer
	s *Server
}

func (v *service) replica(id uint64) (*replica, error) {
	r, err := v.s.acquire(id)
	switch {
	case errors.Is(err, ErrRangeNotHosted):
		return nil, rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, fmt.Sprintf("range %d is not hosted on %s", id, v.s.id), nil)
	case err != nil:
		return nil, toStatus(nil, err)
	}
	return r, nil
}

func (v *service) Write(ctx context.Context, req *pb.WriteRequest) (*pb.WriteResponse, error) {
	start := time.Now()
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if len(req.GetOps()) == 0 {
		return nil, rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, "write without operations", nil)
	}
	if r.fsm.Frozen() {
		// Refused before the log: the range is being merged away.
		return nil, toStatus(r, fsm.ErrRangeFrozen)
	}
	if err := fsm.ValidateOps(req.GetOps()); err != nil {
		observe("write", start, err)
		return nil, toStatus(r, err)
	}
	pk := req.GetOps()[0].GetPartitionKey()
	if err := v.admit(r, pk, len(req.GetOps())); err != nil {
		observe("write", start, err)
		return nil, err
	}
	res, err := r.write(ctx, req.GetOps(), req.GetRequestId(), v.s.cfg.ApplyTimeout)
	if err == nil {
		err = res.Err
	}
	observe("write", start, err)
	if err != nil {
		return nil, toStatus(r, err)
	}
	r.load.writes.Add(1)
	r.load.entities.Add(uint64(len(req.GetOps())))
	r.keys.add(pk, len(req.GetOps()))
	r.keys.served(time.Since(start))
	return &pb.WriteResponse{TimestampUnixNano: res.TimestampUnixNano}, nil
}

func (v *service) Get(ctx context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	start := time.Now()
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if err := v.admit(r, req.GetPartitionKey(), 1); err != nil {
		observe("get", start, err)
		return nil, err
	}
	var b []byte
	synced, err := r.readCheck(ctx, req.GetFollowerRead(), func() error { return r.linearizable(ctx) })
	if err == nil {
		b, err = r.fsm.Get(req.GetPartitionKey(), req.GetRowKey())
	}
	observe("get", start, err)
	if err != nil {
		return nil, toStatus(r, err)
	}
	r.load.reads.Add(1)
	r.load.entities.Add(1)
	r.keys.add(req.GetPartitionKey(), 1)
	r.keys.served(time.Since(start))
	return &pb.GetResponse{Entity: b, SyncedUnixNano: synced}, nil
}

func (v *service) Query(ctx context.Context, req *pb.QueryRequest) (*pb.QueryResponse, error) {
	start := time.Now()
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	f, err := filter.Parse(req.GetFilter())
	if err != nil {
		return nil, rpcerr.New(codes.InvalidArgument, rpcerr.ReasonFilterInvalid, err.Error(), nil)
	}
	limit := int(req.GetLimit())
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	budget := v.s.cfg.QueryBudget
	if b := time.Duration(req.GetBudgetMs()) * time.Millisecond; b > 0 && b < budget {
		budget = b
	}
	opts := fsm.ScanOptions{
		HasLower: req.GetHasLower(), Lower: req.GetLowerPartitionKey(),
		HasUpper: req.GetHasUpper(), Upper: req.GetUpperPartitionKey(),
		Limit: limit, Deadline: start.Add(budget),
	}
	if req.GetHasStart() {
		opts.Start = keys.Encode(req.GetStartPartitionKey(), req.GetStartRowKey())
		opts.StartPK = req.GetStartPartitionKey()
	}
	if req.GetFilter() != "" {
		opts.Match = func(e *edm.Entity) bool { return f.Match(e) }
	}
	if sel := req.GetSelect(); len(sel) > 0 {
		opts.Project = func(e *edm.Entity) *edm.Entity { return e.Project(sel) }
	}
	if pk, ok := f.Bounds().PK.Point(); ok {
		if err := v.admit(r, pk, 1); err != nil {
			observe("query", start, err)
			return nil, err
		}
	}
	synced, err := r.readCheck(ctx, req.GetFollowerRead(), func() error { return r.linearizable(ctx) })
	if err != nil {
		observe("query", start, err)
		return nil, toStatus(r, err)
	}
	res, err := r.fsm.Scan(opts)
	observe("query", start, err)
	if err != nil {
		return nil, toStatus(r, err)
	}
	r.load.reads.Add(1)
	r.load.entities.Add(uint64(len(res.Entities)))
	r.keys.add(req.GetStartPartitionKey(), max(1, len(res.Entities)))
	r.keys.served(time.Since(start))
	out := &pb.QueryResponse{Entities: res.Entities, Range: res.Descriptor, SyncedUnixNano: synced}
	if res.Next != nil {
		pk, rk, err := keys.Decode(res.Next)
		if err != nil {
			return nil, toStatus(r, err)
		}
		out.HasNext, out.NextPartitionKey, out.NextRowKey = true, pk, rk
	}
	return out, nil
}

func (v *service) CreateReplica(ctx context.Context, req *pb.CreateReplicaRequest) (*pb.CreateReplicaResponse, error) {
	if req.GetRange() == nil || req.GetRange().GetRangeId() == 0 {
		return nil, rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, "descriptor required", nil)
	}
	if err := v.s.createReplica(req.GetRange(), req.GetBootstrap(), req.GetCampaign(), req.GetRaftAddrs()); err != nil {
		return nil, toStatus(nil, err)
	}
	return &pb.CreateReplicaResponse{LeaderServerId: v.s.settledLeader(ctx, req.GetRange().GetRangeId(), req.GetCampaign())}, nil
}

func (v *service) DeleteReplica(ctx context.Context, req *pb.DeleteReplicaRequest) (*pb.DeleteReplicaResponse, error) {
	if err := v.s.deleteReplica(req.GetRangeId(), req.GetBeforeGeneration()); err != nil {
		return nil, toStatus(nil, err)
	}
	return &pb.DeleteReplicaResponse{}, nil
}

func (v *service) RangeInfo(ctx context.Context, req *pb.RangeInfoRequest) (*pb.RangeInfoResponse, error) {
	// An observation: it does not wake a quiet range, which reports the
	// leader it knew when it closed.
	sl := v.s.slot(req.GetRangeId())
	if sl == nil || sl.fsm == nil {
		return nil, rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, fmt.Sprintf("range %d is not hosted on %s", req.GetRangeId(), v.s.id), nil)
	}
	resp := &pb.RangeInfoResponse{Status: v.s.status(sl, false)}
	if r := sl.open(); r != nil {
		resp.LeaderServerId = r.leaderID()
	} else if l := sl.lastLeader.Load(); l != nil {
		resp.LeaderServerId = *l
	}
	return resp, nil
}

// busyRetryAfter is the retry delay suggested with ErrBusy: about one
// election timeout, the time a leadership transfer takes.
const busyRetryAfter = 500 * time.Millisecond

// admit applies the per-partition throttle: Azure serves one PartitionKey
// up to a fixed rate and answers 503 ServerBusy beyond it.
func (v *service) admit(r *replica, pk string, n int) error {
	ok, wait := r.throttle.allow(pk, n, time.Now())
	if ok {
		return v.admitCapacity(r, n)
	}
	r.keys.throttle()
	throttledTotal.Inc()
	return rpcerr.New(codes.ResourceExhausted, rpcerr.ReasonServerBusy,
		fmt.Sprintf("partition %q is over its target of %.0f entities/s", pk, v.s.cfg.PartitionThrottle),
		map[string]string{rpcerr.MetaRetryAfterMs: strconv.FormatInt(max(1, wait.Milliseconds()), 10)})
}

// toStatus translates an internal error into the gRPC status contract of
// package rpcerr.
func toStatus(r *replica, err error) error {
	var md map[string]string
	index := -1
	var opErr *fsm.OpError
	if errors.As(err, &opErr) {
		index = opErr.Index
	}
	withIndex := func(code codes.Code, reason string) error {
		if index >= 0 {
			return rpcerr.WithIndex(code, reason, err.Error(), index)
		}
		return rpcerr.New(code, reason, err.Error(), md)
	}
	switch {
	case errors.Is(err, ErrNotLeader):
		if r != nil {
			if l := r.leaderID(); l != "" && l != r.serverID {
				md = map[string]string{rpcerr.MetaLeader: l}
			}
		}
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, err.Error(), md)
	case errors.Is(err, fsm.ErrEntityExists):
		return withIndex(codes.AlreadyExists, rpcerr.ReasonEntityAlreadyExists)
	case errors.Is(err, fsm.ErrEntityNotFound):
		return withIndex(codes.NotFound, rpcerr.ReasonEntityNotFound)
	case errors.Is(err, fsm.ErrConditionFailed):
		return withIndex(codes.FailedPrecondition, rpcerr.ReasonConditionNotSatisfied)
	case errors.Is(err, fsm.ErrKeyOutOfRange), errors.Is(err, fsm.ErrStaleGeneration), errors.Is(err, fsm.ErrRangeFrozen):
		return withIndex(codes.FailedPrecondition, rpcerr.ReasonStaleRange)
	case errors.Is(err, ErrLateDelete):
		return rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonStaleRange, err.Error(), nil)
	case errors.Is(err, fsm.ErrRangeNotFound):
		return rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, err.Error(), nil)
	case errors.Is(err, fsm.ErrBadSplitKey), errors.Is(err, fsm.ErrNotAdjacent), errors.Is(err, fsm.ErrRangeExists), errors.Is(err, fsm.ErrMergePending):
		return rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonInvalidInput, err.Error(), nil)
	case errors.Is(err, fsm.ErrInvalidEntity), errors.Is(err, fsm.ErrBadCommand):
		return withIndex(codes.InvalidArgument, rpcerr.ReasonInvalidInput)
	case errors.Is(err, ErrBusy):
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonServerBusy, err.Error(),
			map[string]string{rpcerr.MetaRetryAfterMs: strconv.FormatInt(busyRetryAfter.Milliseconds(), 10)})
	case errors.Is(err, ErrShuttingDown), errors.Is(err, errWakeTimeout):
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, err.Error(), nil)
	case errors.Is(err, ErrUnknownOutcome):
		return rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonUnavailable, err.Error(), nil)
	case errors.Is(err, context.DeadlineExceeded):
		return rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonUnavailable, err.Error(), nil)
	case errors.Is(err, context.Canceled):
		return rpcerr.New(codes.Canceled, rpcerr.ReasonUnavailable, err.Error(), nil)
	}
	if code, _, ok := edm.AzureError(err); ok {
		md := map[string]string{rpcerr.MetaAzureCode: code}
		if index >= 0 {
			md[rpcerr.MetaIndex] = strconv.Itoa(index)
		}
		return rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidEntity, err.Error(), md)
	}
	return rpcerr.New(codes.Internal, "", err.Error(), nil)
}
