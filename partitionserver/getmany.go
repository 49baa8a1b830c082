package partitionserver

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rpcerr"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/lifecycle"
	pb "tablestore/proto/tablestorepb"
)

// GetMany serves independent point reads together. The reads of one range
// (and one kind: linearizable or follower) share one read check and one
// bbolt read transaction; each is admitted and answered as Get would have
// answered it alone. Sharing the check is safe: every read of the call
// arrived before the check starts, so the state it confirms is at least as
// new as any write acknowledged before any of them arrived, and the answer
// is taken after it, as Get's is.
func (v *service) GetMany(ctx context.Context, req *pb.GetManyRequest) (*pb.GetManyResponse, error) {
	start := time.Now()
	gets := req.GetGets()
	out := &pb.GetManyResponse{Results: make([]*pb.GetManyResult, len(gets))}
	type groupKey struct {
		id       uint64
		follower bool
	}
	var order []groupKey
	groups := map[groupKey][]int{}
	for i, g := range gets {
		k := groupKey{g.GetRangeId(), g.GetFollowerRead()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	serve := func(k groupKey) {
		idx := groups[k]
		if len(idx) == 1 || !v.sharedRead(k.id, k.follower) {
			// Alone, or a path with per-read work of its own (a quiet
			// range's read without waking it; the capacity model's
			// queue): each read as its own Get.
			v.getEach(ctx, gets, idx, out)
			return
		}
		v.getGroup(ctx, start, gets, idx, out)
	}
	if len(order) == 1 {
		serve(order[0])
	} else {
		var wg sync.WaitGroup
		for _, k := range order {
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(k)
			}()
		}
		wg.Wait()
	}
	capAnswer(out.Results, maxManyAnswerBytes)
	return out, nil
}

// maxManyAnswerBytes bounds the entities of one GetMany answer, well
// below the 64 MiB message limit of both ends: 256 reads of entities near
// Azure's 1 MiB limit would exceed it, and the whole call would fail.
const maxManyAnswerBytes = 16 << 20

// capAnswer replaces the responses past budget bytes of entities (all but
// the first, which is always answered, so a read makes progress) with a
// retryable refusal: a read has no effect, and the front-end's range
// client sends it again in a later call.
func capAnswer(results []*pb.GetManyResult, budget int) {
	total, answered := 0, false
	var over []byte
	for i, r := range results {
		if r.GetResponse() == nil {
			continue
		}
		total += len(r.GetResponse().GetEntity())
		if answered && total > budget {
			if over == nil {
				over, _ = proto.Marshal(status.Convert(rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable,
					"partitionserver: GetMany answer over its size budget: read again", nil)).Proto())
			}
			results[i] = &pb.GetManyResult{Status: over}
			continue
		}
		answered = true
	}
}

// sharedRead reports whether reads of range id may share one check and
// transaction: not when Get would serve them from a quiet replica (each
// is cheap there and the path is Get's own) or admission may wait its
// turn in the capacity model (reads wait side by side, as their own calls
// would).
func (v *service) sharedRead(id uint64, follower bool) bool {
	if v.s.capacity != nil {
		return false
	}
	if sl := v.s.slotOf(id); !follower && sl != nil && sl.State() == lifecycle.Quiet && v.s.cfg.QuietReadTimeout > 0 {
		return false
	}
	return true
}

// getEach answers the reads idx of gets each through Get, concurrently.
func (v *service) getEach(ctx context.Context, gets []*pb.GetRequest, idx []int, out *pb.GetManyResponse) {
	if len(idx) == 1 {
		out.Results[idx[0]] = getResult(v.Get(ctx, gets[idx[0]]))
		return
	}
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out.Results[i] = getResult(v.Get(ctx, gets[i]))
		}()
	}
	wg.Wait()
}

// getGroup answers the reads idx of gets, all of one range and kind, with
// one read check and one read transaction.
func (v *service) getGroup(ctx context.Context, start time.Time, gets []*pb.GetRequest, idx []int, out *pb.GetManyResponse) {
	first := gets[idx[0]]
	// observed as Get observes it (the error before its status), answered
	// with the status Get returns.
	fail := func(i int, observed, err error) {
		observe("get", start, observed)
		out.Results[i] = getResult(nil, err)
	}
	r, err := v.replica(first.GetRangeId())
	if err != nil {
		// Not observed, as Get does not observe it.
		for _, i := range idx {
			out.Results[i] = getResult(nil, err)
		}
		return
	}
	admitted := make([]int, 0, len(idx))
	for _, i := range idx {
		if err := v.admit(r.meters(), r.isLeader(), gets[i].GetPartitionKey(), 1); err != nil {
			fail(i, err, err)
			continue
		}
		admitted = append(admitted, i)
	}
	if len(admitted) == 0 {
		return
	}
	if err := r.readCheck(first.GetFollowerRead(), func() error { return r.linearizable(ctx) }); err != nil {
		st := toStatus(r, err)
		for _, i := range admitted {
			fail(i, err, st)
		}
		return
	}
	ks := make([]fsm.Key, len(admitted))
	for j, i := range admitted {
		ks[j] = fsm.Key{PK: gets[i].GetPartitionKey(), RK: gets[i].GetRowKey()}
	}
	bs, errs := r.fsm.GetMany(ks)
	for j, i := range admitted {
		if errs[j] != nil {
			fail(i, errs[j], toStatus(r, errs[j]))
			continue
		}
		observe("get", start, nil)
		r.meters().servedRead(ks[j].PK, 1, start)
		out.Results[i] = &pb.GetManyResult{Response: &pb.GetResponse{Entity: bs[j]}}
	}
}

// getResult is one read's entry of a GetMany answer: its response, or the
// status Get would have returned.
func getResult(resp *pb.GetResponse, err error) *pb.GetManyResult {
	if err == nil {
		return &pb.GetManyResult{Response: resp}
	}
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(codes.Internal, err.Error()).Proto())
	}
	return &pb.GetManyResult{Status: b}
}
