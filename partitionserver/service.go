package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/edm"
	"tablestore/internal/failpoint"
	"tablestore/internal/filter"
	"tablestore/internal/keys"
	"tablestore/internal/rpcerr"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/lifecycle"
	pb "tablestore/proto/tablestorepb"
)

// service implements the PartitionService gRPC API; it translates errors
// into gRPC statuses once, in toStatus.
type service struct {
	pb.UnimplementedPartitionServiceServer
	s *Server
}

func (v *service) replica(id uint64) (*replica, error) {
	m, err := v.s.acquire(id)
	var r *replica
	if err == nil {
		// The group may have given the range up (a merge) since.
		r, err = m.replica(id)
	}
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
	r, err := v.admitWrite(req, start)
	if err != nil {
		return nil, err
	}
	res, err := r.write(ctx, req.GetOps(), req.GetRequestId(), v.s.cfg.ApplyTimeout)
	return v.wrote(r, req, start, res, err)
}

// maxRequestID bounds a write's request id (the front-end's are 16 bytes).
const maxRequestID = 1024

// admitWrite is what a write passes before it is queued for its range's
// log: the range is here and not frozen, the entities are valid, the
// throttle admits it.
func (v *service) admitWrite(req *pb.WriteRequest, start time.Time) (*replica, error) {
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if len(req.GetOps()) == 0 {
		return nil, rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, "write without operations", nil)
	}
	if len(req.GetRequestId()) > maxRequestID {
		// Refused before the log: a record's key and its time-index key
		// must fit bbolt's key limit, or a write would apply without its
		// index entry and a snapshot holding it could not be installed.
		return nil, rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, fmt.Sprintf("request id of %d bytes (at most %d)", len(req.GetRequestId()), maxRequestID), nil)
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
	leader := r.isLeader()
	if leader {
		if err := v.s.disk.admit(v.s.id, start); err != nil {
			observe("write", start, err)
			return nil, err
		}
		if err := v.s.clock.admit(v.s.id, start); err != nil {
			observe("write", start, err)
			return nil, err
		}
	}
	if err := v.admit(r.meters(), leader, pk, len(req.GetOps())); err != nil {
		observe("write", start, err)
		return nil, err
	}
	return r, nil
}

// wrote accounts a write's outcome and makes its answer.
func (v *service) wrote(r *replica, req *pb.WriteRequest, start time.Time, res *fsm.Result, err error) (*pb.WriteResponse, error) {
	if err == nil {
		err = res.Err
	}
	observe("write", start, err)
	if err != nil {
		return nil, toStatus(r, err)
	}
	pk := req.GetOps()[0].GetPartitionKey()
	r.load.writes.Add(1)
	r.load.entities.Add(uint64(len(req.GetOps())))
	r.keys.add(pk, len(req.GetOps()))
	r.keys.served(time.Since(start))
	return &pb.WriteResponse{TimestampUnixNano: res.TimestampUnixNano}, nil
}

// WriteMany serves independent writes together: each is admitted and
// answered as Write would, and the admitted writes of one range are handed
// to its write batcher at once, so they share one log entry (and the call's
// cost) instead of the first being proposed alone.
func (v *service) WriteMany(ctx context.Context, req *pb.WriteManyRequest) (*pb.WriteManyResponse, error) {
	start := time.Now()
	writes := req.GetWrites()
	out := &pb.WriteManyResponse{Results: make([]*pb.WriteManyResult, len(writes))}
	// Writes are grouped by Raft group (member): the writes of several
	// ranges that are spans of one group share its entries too.
	type group struct {
		m   *member
		idx []int
	}
	reps := make([]*replica, len(writes))
	admitOne := func(i int) {
		r, err := v.admitWrite(writes[i], start)
		if err != nil {
			out.Results[i] = manyResult(nil, err)
			return
		}
		reps[i] = r
	}
	if v.s.capacity != nil && len(writes) > 1 {
		// The capacity model may make a write wait for its turn (a sleep
		// in admitCapacity): the writes wait side by side, as their own
		// calls would have, not one after another.
		var wg sync.WaitGroup
		for i := range writes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				admitOne(i)
			}()
		}
		wg.Wait()
	} else {
		for i := range writes {
			admitOne(i)
		}
	}
	var groups []*group
	for i, r := range reps {
		if r == nil {
			continue
		}
		var g *group
		for _, h := range groups {
			if h.m == r.member {
				g = h
				break
			}
		}
		if g == nil {
			g = &group{m: r.member}
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	answer := func(g *group) {
		ws := make([]*pb.WriteRequest, len(g.idx))
		rs := make([]*replica, len(g.idx))
		for j, i := range g.idx {
			ws[j], rs[j] = writes[i], reps[i]
		}
		res, errs := g.m.writeMany(ctx, rs, ws, v.s.cfg.ApplyTimeout)
		for j, i := range g.idx {
			out.Results[i] = manyResult(v.wrote(rs[j], writes[i], start, res[j], errs[j]))
		}
	}
	if len(groups) == 1 {
		answer(groups[0])
		return out, nil
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answer(g)
		}()
	}
	wg.Wait()
	return out, nil
}

// manyResult is one write's entry of a WriteMany answer: its response, or
// the status Write would have returned.
func manyResult(resp *pb.WriteResponse, err error) *pb.WriteManyResult {
	if err == nil {
		return &pb.WriteManyResult{Response: resp}
	}
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(codes.Internal, err.Error()).Proto())
	}
	return &pb.WriteManyResult{Status: b}
}

func (v *service) Get(ctx context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	start := time.Now()
	var b []byte
	pk := req.GetPartitionKey()
	served, admitted, m, err := v.quietRead(ctx, req.GetRangeId(), req.GetFollowerRead(), pk, true, func(rf *fsm.Range) (err error) {
		b, err = rf.Get(pk, req.GetRowKey())
		return err
	})
	if !served && err != nil {
		observe("get", start, err)
		return nil, err
	}
	if served {
		observe("get", start, err)
		if err != nil {
			return nil, toStatus(nil, err)
		}
		m.servedRead(pk, 1, start)
		return &pb.GetResponse{Entity: b}, nil
	}
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if !admitted {
		if err := v.admit(r.meters(), r.isLeader(), pk, 1); err != nil {
			observe("get", start, err)
			return nil, err
		}
	}
	err = r.readCheck(req.GetFollowerRead(), func() error { return r.linearizable(ctx) })
	if err == nil {
		b, err = r.fsm.Get(pk, req.GetRowKey())
	}
	observe("get", start, err)
	if err != nil {
		return nil, toStatus(r, err)
	}
	r.meters().servedRead(pk, 1, start)
	return &pb.GetResponse{Entity: b}, nil
}

// quietRead serves a linearizable read from range id's quiet replica
// without opening it (quietread.go). The request passes admission first
// (admitted), with pk when admitPK. served false: take the normal path,
// which wakes the range, unless err is set: the admission's refusal (a
// status), to return as it is. served true: err is the read's.
func (v *service) quietRead(ctx context.Context, id uint64, followerRead bool, pk string, admitPK bool, read func(*fsm.Range) error) (served, admitted bool, m rangeMeters, err error) {
	sl := v.s.slotOf(id)
	if followerRead || sl == nil || sl.State() != lifecycle.Quiet || v.s.cfg.QuietReadTimeout <= 0 {
		return false, false, rangeMeters{}, nil
	}
	m = sl.meters.get(id)
	if admitPK {
		// A quiet leader's read uses this server's capacity, as an open
		// leader's does; a quiet follower's (it will wake and redirect)
		// does not.
		if err := v.admit(m, sl.wasLeader.Load(), pk, 1); err != nil {
			return false, true, m, err
		}
	}
	served, err = v.s.quietRead(ctx, id, read)
	return served, admitPK, m, err
}

func (v *service) Query(ctx context.Context, req *pb.QueryRequest) (*pb.QueryResponse, error) {
	start := time.Now()
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
	opts.KeyLower, opts.KeyUpper = filterKeySpan(f.Bounds())
	if req.GetFilter() != "" {
		opts.Match = func(e *edm.Entity) bool { return f.Match(e) }
	}
	if sel := req.GetSelect(); len(sel) > 0 {
		opts.Project = func(e *edm.Entity) *edm.Entity { return e.Project(sel) }
	}
	pointPK, point := f.Bounds().PK.Point()
	var res *fsm.ScanResult
	served, admitted, m, err := v.quietRead(ctx, req.GetRangeId(), req.GetFollowerRead(), pointPK, point, func(rf *fsm.Range) (err error) {
		res, err = rf.Scan(opts)
		return err
	})
	if !served && err != nil {
		observe("query", start, err)
		return nil, err
	}
	var r *replica
	if served {
		observe("query", start, err)
		if err != nil {
			return nil, toStatus(nil, err)
		}
		m.servedRead(req.GetStartPartitionKey(), max(1, len(res.Entities)), start)
	} else {
		if r, err = v.replica(req.GetRangeId()); err != nil {
			return nil, err
		}
		if point && !admitted {
			if err := v.admit(r.meters(), r.isLeader(), pointPK, 1); err != nil {
				observe("query", start, err)
				return nil, err
			}
		}
		if err = r.readCheck(req.GetFollowerRead(), func() error { return r.linearizable(ctx) }); err != nil {
			observe("query", start, err)
			return nil, toStatus(r, err)
		}
		res, err = r.fsm.Scan(opts)
		observe("query", start, err)
		if err != nil {
			return nil, toStatus(r, err)
		}
		r.meters().servedRead(req.GetStartPartitionKey(), max(1, len(res.Entities)), start)
	}
	out := &pb.QueryResponse{Entities: res.Entities, Range: res.Descriptor}
	if res.Next != nil {
		pk, rk, err := keys.Decode(res.Next)
		if err != nil {
			return nil, toStatus(r, err)
		}
		out.HasNext, out.NextPartitionKey, out.NextRowKey = true, pk, rk
	}
	return out, nil
}

// filterKeySpan is the span of encoded keys [lo, hi) that can hold an
// entity matching a filter of bounds b (nil: unbounded). The request's
// PartitionKey bounds are inclusive only, so "PartitionKey lt 'q'" read
// all of partition q, and a page that filled before q ended with a
// continuation into it (an empty page to follow, or several, for a large
// partition); and RowKey bounds were not used at all, so "PartitionKey eq
// 'p' and RowKey ge 'r5'" read the whole partition before r5, and
// continued past the RowKey range.
func filterKeySpan(b filter.Bounds) (lo, hi []byte) {
	pk := b.PK
	if pk.HasLower {
		if pk.LowerInclusive {
			lo = keys.PartitionStart(pk.Lower)
		} else {
			lo = keys.PartitionEnd(pk.Lower)
		}
	}
	if pk.HasUpper {
		if pk.UpperInclusive {
			hi = keys.PartitionEnd(pk.Upper)
		} else {
			hi = keys.PartitionStart(pk.Upper)
		}
	}
	p, point := pk.Point()
	if !point {
		// RowKey bounds hold in every partition: a span of several
		// partitions cannot use them without a seek per partition.
		return lo, hi
	}
	rk := b.RK
	if rk.HasLower {
		lo = keys.Encode(p, rk.Lower) // exclusive: the filter drops that one key
	}
	if rk.HasUpper {
		if rk.UpperInclusive {
			hi = keys.RowEnd(p, rk.Upper)
		} else {
			hi = keys.Encode(p, rk.Upper)
		}
	}
	return lo, hi
}

func (v *service) CreateReplica(ctx context.Context, req *pb.CreateReplicaRequest) (*pb.CreateReplicaResponse, error) {
	if req.GetRange() == nil || req.GetRange().GetRangeId() == 0 {
		return nil, rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, "descriptor required", nil)
	}
	if err := v.s.createReplica(req.GetRange(), req.GetBootstrap(), req.GetCampaign(), req.GetRaftAddrs(), joinFloor{req.GetJoinFloorTerm(), req.GetJoinFloorIndex()}); err != nil {
		return nil, toStatus(nil, err)
	}
	return &pb.CreateReplicaResponse{LeaderServerId: v.s.settledLeader(ctx, req.GetRange().GetRangeId(), req.GetCampaign())}, nil
}

func (v *service) DeleteReplica(ctx context.Context, req *pb.DeleteReplicaRequest) (*pb.DeleteReplicaResponse, error) {
	if err := failpoint.Inject("partitionserver/delete-replica/refuse"); err != nil {
		// The master's delete does not arrive (a lost call, a server
		// cut off from the master but not from the front-ends).
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, err.Error(), nil)
	}
	if err := v.s.deleteRemoved(req.GetRangeId(), req.GetBeforeGeneration(), req.GetAbortedThrough(), req.GetGroupId()); err != nil {
		return nil, toStatus(nil, err)
	}
	return &pb.DeleteReplicaResponse{}, nil
}

func (v *service) RangeInfo(ctx context.Context, req *pb.RangeInfoRequest) (*pb.RangeInfoResponse, error) {
	if req.GetJoinFloor() {
		return v.joinFloor(ctx, req.GetRangeId())
	}
	// An observation: it does not wake a quiet range, which reports the
	// leader it knew when it closed.
	sl := v.s.slotOf(req.GetRangeId())
	sp := sl.span(req.GetRangeId())
	if sp == nil {
		return nil, rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, fmt.Sprintf("range %d is not hosted on %s", req.GetRangeId(), v.s.id), nil)
	}
	if sl.State() == lifecycle.Broken {
		// Its applied index is of files it cannot open: the master's
		// checks that ask (a move's, a merge's) must count it as a
		// replica that does not answer, never as a healthy one.
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, fmt.Sprintf("range %d's replica on %s is broken", req.GetRangeId(), v.s.id), nil)
	}
	resp := &pb.RangeInfoResponse{Status: v.s.status(sl, sp, false)}
	if r := sl.open(); r != nil {
		resp.LeaderServerId = r.leaderID()
	} else if l := sl.lastLeader.Load(); l != nil {
		resp.LeaderServerId = *l
	}
	return resp, nil
}

// joinFloor answers RangeInfo's join_floor: the leader's verified
// (term, commit index), the floor of a replica a move is about to create
// (joinfloor.go). It wakes a quiet range: only a running leader can
// verify.
func (v *service) joinFloor(ctx context.Context, id uint64) (*pb.RangeInfoResponse, error) {
	r, err := v.leaderReplica(id)
	if err != nil {
		return nil, err
	}
	f, err := r.joinFloor(ctx)
	if err != nil {
		return nil, toStatus(r, err)
	}
	sl := v.s.slotOf(id)
	sp := sl.span(id)
	if sp == nil {
		// Deleted or merged away during the wait.
		return nil, rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, fmt.Sprintf("range %d is not hosted on %s", id, v.s.id), nil)
	}
	return &pb.RangeInfoResponse{Status: v.s.status(sl, sp, false), LeaderServerId: v.s.id, FloorTerm: f.term, FloorIndex: f.index}, nil
}

// rangeMeters are a range's request meters; they outlive its Raft member,
// so a quiet read counts in them too.
type rangeMeters struct {
	load     *loadMeter
	keys     *keyMeter
	throttle *throttle
}

func (r *replica) meters() rangeMeters { return r.rangeMeters }

// spanMeters holds the meters of each range a slot's group serves,
// created at a range's first use: the master's load view and split
// policies are per range, whichever group serves it.
type spanMeters struct {
	rate float64 // the partition throttle's
	mu   sync.RWMutex
	of   map[uint64]rangeMeters
}

func newSpanMeters(rate float64) *spanMeters {
	return &spanMeters{rate: rate, of: map[uint64]rangeMeters{}}
}

// get returns range id's meters. The load window of new ones starts now:
// a quiet leader's first report of reads (heartbeat.go) is then a rate,
// not zero.
func (m *spanMeters) get(id uint64) rangeMeters {
	m.mu.RLock()
	rm, ok := m.of[id]
	m.mu.RUnlock()
	if ok {
		return rm
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rm, ok = m.of[id]
	if !ok {
		rm = rangeMeters{load: &loadMeter{lastAt: time.Now()}, keys: newKeyMeter(), throttle: newThrottle(m.rate)}
		m.of[id] = rm
	}
	return rm
}

// forget drops range id's meters: its group no longer serves it.
func (m *spanMeters) forget(id uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.of, id)
}

// servedRead counts a read of n entities (at least one) keyed by pk.
func (m rangeMeters) servedRead(pk string, n int, start time.Time) {
	m.load.reads.Add(1)
	m.load.entities.Add(uint64(n))
	m.keys.add(pk, n)
	m.keys.served(time.Since(start))
}

// busyRetryAfter is the retry delay suggested with ErrBusy: about one
// election timeout, the time a leadership transfer takes.
const busyRetryAfter = 500 * time.Millisecond

// admit applies the per-partition throttle: Azure serves one PartitionKey
// up to a fixed rate and answers 503 ServerBusy beyond it.
func (v *service) admit(m rangeMeters, leader bool, pk string, n int) error {
	ok, wait := m.throttle.allow(pk, n, time.Now())
	if ok {
		return v.admitCapacity(m, leader, n)
	}
	m.keys.throttle()
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
	case errors.Is(err, ErrFreezeMismatch):
		// Nothing was proposed; the merge's master is stale (or this
		// replica still far behind): not a retry for the range client.
		return rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonNotReady, err.Error(), nil)
	case errors.Is(err, fsm.ErrGroupFull):
		return rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonGroupFull, err.Error(), nil)
	case errors.Is(err, ErrLateDelete):
		return rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonStaleRange, err.Error(), nil)
	case errors.Is(err, fsm.ErrRangeNotFound):
		return rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, err.Error(), nil)
	case errors.Is(err, fsm.ErrBadSplitKey), errors.Is(err, fsm.ErrNotAdjacent), errors.Is(err, fsm.ErrRangeExists), errors.Is(err, fsm.ErrMergePending), errors.Is(err, fsm.ErrSpanStays),
		errors.Is(err, fsm.ErrRangeRetired), errors.Is(err, ErrSpanOfAnotherGroup), errors.Is(err, fsm.ErrNotOwnGroup):
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
