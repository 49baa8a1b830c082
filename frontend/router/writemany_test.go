package router

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// fakePS answers Write and WriteMany: a write whose first op's RowKey is
// "dup" fails with ENTITY_ALREADY_EXISTS (carrying an index), others
// succeed with a timestamp from their RowKey's length. Calls block on gate
// until it is closed; manyErr, when set, is WriteMany's error.
type fakePS struct {
	pb.PartitionServiceClient
	gate    chan struct{}
	manyErr error
	// manyGate, when set, holds each WriteMany call until it takes a
	// token from it (after gate).
	manyGate chan struct{}

	mu     sync.Mutex
	writes int   // Write calls
	many   []int // writes per WriteMany call
	// manyRanges is the range id of each write of each WriteMany call.
	manyRanges [][]uint64
}

func newFakePS() *fakePS { return &fakePS{gate: make(chan struct{})} }

func (f *fakePS) answer(req *pb.WriteRequest) (*pb.WriteResponse, error) {
	if req.GetOps()[0].GetRowKey() == "dup" {
		return nil, rpcerr.WithIndex(codes.AlreadyExists, rpcerr.ReasonEntityAlreadyExists, "exists", 0)
	}
	return &pb.WriteResponse{TimestampUnixNano: int64(len(req.GetOps()[0].GetRowKey()))}, nil
}

func (f *fakePS) Write(ctx context.Context, req *pb.WriteRequest, _ ...grpc.CallOption) (*pb.WriteResponse, error) {
	f.mu.Lock()
	f.writes++
	f.mu.Unlock()
	select {
	case <-f.gate:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return f.answer(req)
}

func (f *fakePS) WriteMany(ctx context.Context, req *pb.WriteManyRequest, _ ...grpc.CallOption) (*pb.WriteManyResponse, error) {
	f.mu.Lock()
	f.many = append(f.many, len(req.GetWrites()))
	var ids []uint64
	for _, w := range req.GetWrites() {
		ids = append(ids, w.GetRangeId())
	}
	f.manyRanges = append(f.manyRanges, ids)
	f.mu.Unlock()
	<-f.gate
	if f.manyGate != nil {
		<-f.manyGate
	}
	if f.manyErr != nil {
		return nil, f.manyErr
	}
	out := &pb.WriteManyResponse{}
	for _, w := range req.GetWrites() {
		r := &pb.WriteManyResult{}
		r.Response, r.Status = manyResult(f.answer(w))
		out.Results = append(out.Results, r)
	}
	return out, nil
}

func (f *fakePS) counts() (int, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes, append([]int(nil), f.many...)
}

func writeReq(rk string) *pb.WriteRequest {
	return &pb.WriteRequest{RangeId: 7, RequestId: []byte("id-" + rk), Ops: []*pb.EntityOp{{PartitionKey: "p", RowKey: rk}}}
}

type writeOutcome = answer[*pb.WriteResponse]

// startWrites starts the writes of rks one after the other, each once the
// previous one is either in flight or queued.
func startWrites(t *testing.T, c *writeCoalescer, f *fakePS, rks []string) []chan writeOutcome {
	t.Helper()
	reqs := make([]*pb.WriteRequest, len(rks))
	for i, rk := range rks {
		reqs[i] = writeReq(rk)
	}
	return startCalls(t, c, f, reqs)
}

func TestCoalescerGroupsQueuedWrites(t *testing.T) {
	tests := []struct {
		name      string
		rks       []string
		manyErr   error
		wantMany  []int
		wantWrite int
		check     func(t *testing.T, i int, o writeOutcome)
	}{
		{
			name: "a lone write is sent alone", rks: []string{"a"}, wantWrite: 1,
			check: func(t *testing.T, i int, o writeOutcome) {
				if o.err != nil || o.resp.GetTimestampUnixNano() != 1 {
					t.Errorf("write %d: %v, %v", i, o.resp, o.err)
				}
			},
		},
		{
			name: "writes beyond the calls in flight go out as one WriteMany, each with its own answer",
			rks:  []string{"a", "bb", "ccc", "dup", "eeeee"}, wantWrite: maxWriteCalls, wantMany: []int{5 - maxWriteCalls},
			check: func(t *testing.T, i int, o writeOutcome) {
				if i == 3 {
					info := rpcerr.Parse(o.err)
					if info.Code != codes.AlreadyExists || info.Reason != rpcerr.ReasonEntityAlreadyExists || info.Index() != 0 {
						t.Errorf("write %d: err %v (%+v), want ENTITY_ALREADY_EXISTS at index 0", i, o.err, info)
					}
					return
				}
				if o.err != nil || o.resp.GetTimestampUnixNano() != int64(i+1) {
					t.Errorf("write %d: %v, %v", i, o.resp, o.err)
				}
			},
		},
		{
			name: "a failed WriteMany fails each of its writes with its error",
			rks:  []string{"a", "bb", "ccc", "dddd"}, manyErr: status.Error(codes.Unavailable, "connection reset"), wantWrite: maxWriteCalls, wantMany: []int{4 - maxWriteCalls},
			check: checkManyFailed[*pb.WriteResponse](maxWriteCalls),
		},
		{
			name: "a server without WriteMany gets single writes",
			rks:  []string{"a", "bb", "ccc", "dddd"}, manyErr: status.Error(codes.Unimplemented, "unknown method WriteMany"), wantWrite: 4, wantMany: []int{4 - maxWriteCalls},
			check: func(t *testing.T, i int, o writeOutcome) {
				if o.err != nil || o.resp.GetTimestampUnixNano() != int64(i+1) {
					t.Errorf("write %d: %v, %v", i, o.resp, o.err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCoalescer()
			f := newFakePS()
			f.manyErr = tt.manyErr
			reqs := make([]*pb.WriteRequest, len(tt.rks))
			for i, rk := range tt.rks {
				reqs[i] = writeReq(rk)
			}
			runGroupCase(t, c, f, reqs, func() { close(f.gate) }, f.counts, tt.check, tt.wantWrite, tt.wantMany, tt.manyErr)
		})
	}
}

// TestCoalescerCallerGivesUp: a queued write whose caller's context ends
// returns at once with the status a call would have returned, and is left
// out of the WriteMany; the others are answered.
func TestCoalescerCallerGivesUp(t *testing.T) {
	c := newCoalescer()
	f := newFakePS()
	reqs := []*pb.WriteRequest{writeReq("a"), writeReq("bb"), writeReq("ccc")}
	testCallerGivesUp(t, c, f, reqs, writeReq("gone"), func() { close(f.gate) }, f.counts)
}

// TestCoalescerLanesAreIndependent: writes to another address do not queue
// behind a busy lane.
func TestCoalescerLanesAreIndependent(t *testing.T) {
	c := newCoalescer()
	f := newFakePS()
	outs := startWrites(t, c, f, []string{"a", "bb", "dd"})
	other := newFakePS()
	close(other.gate)
	for _, rangeID := range []uint64{7, 8} {
		req := writeReq("x")
		req.RangeId = rangeID
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.do(ctx, "ps2", other, req)
		cancel()
		if err != nil {
			t.Fatalf("ps2 range %d: %v", rangeID, err)
		}
	}
	close(f.gate)
	for _, ch := range outs {
		<-ch
	}
	if writes, _ := other.counts(); writes != 2 {
		t.Fatalf("other address: %d Write calls, want 2", writes)
	}
}

// TestCoalescerLanePerRange: a write of another range led by the same
// server does not queue behind a range whose call is stuck (one range's
// stall must not become its neighbours' gap), and a call carries the
// writes of one range.
func TestCoalescerLanePerRange(t *testing.T) {
	c := newCoalescer()
	f := newFakePS()
	outs := startWrites(t, c, f, []string{"a", "bb", "dd"})
	other := newFakePS()
	close(other.gate)
	req := writeReq("ccc")
	req.RangeId = 8
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := c.do(ctx, "ps1", other, req)
	cancel()
	if err != nil || resp.GetTimestampUnixNano() != 3 {
		t.Fatalf("range 8 behind range 7's stuck call: %v, %v", resp, err)
	}
	close(f.gate)
	for _, ch := range outs {
		if o := <-ch; o.err != nil {
			t.Fatal(o.err)
		}
	}
	waitUntil(t, laneIdle(c))
	// The two writes queued behind range 7's call went out together, and
	// only range 7's.
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := [][]uint64{{7, 7}}; !reflect.DeepEqual(f.manyRanges, want) {
		t.Fatalf("range 7's lane made WriteMany calls carrying ranges %v, want %v", f.manyRanges, want)
	}
}

// TestCoalescerLanePerGroup: writes to ranges that are spans of one Raft
// group (doIn with the group) share one lane: the writes to ranges 7 and 9
// queued behind range 7's call go out in one WriteMany.
func TestCoalescerLanePerGroup(t *testing.T) {
	c := newCoalescer()
	f := newFakePS()
	var reqs []*pb.WriteRequest
	for i, rk := range []string{"a", "bb", "dd", "eee"} {
		req := writeReq(rk)
		if i%2 == 1 {
			req.RangeId = 9 // a span of group 7
		}
		reqs = append(reqs, req)
	}
	outs := make([]chan writeOutcome, len(reqs))
	for i, req := range reqs {
		outs[i] = make(chan writeOutcome, 1)
		go func() {
			resp, err := c.doIn(context.Background(), "ps1", f, 7, req)
			outs[i] <- writeOutcome{resp, err}
		}()
		waitUntil(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			l := c.lanes[laneKey{"ps1", 7, false}]
			return l != nil && l.inflight+len(l.queue) == i+1
		})
	}
	close(f.gate)
	for _, ch := range outs {
		if o := <-ch; o.err != nil {
			t.Fatal(o.err)
		}
	}
	waitUntil(t, laneIdle(c))
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := [][]uint64{{9, 7, 9}}; !reflect.DeepEqual(f.manyRanges, want) {
		t.Fatalf("group 7's lane made WriteMany calls carrying ranges %v, want %v", f.manyRanges, want)
	}
}

func TestManyAnswerMalformed(t *testing.T) {
	testManyAnswerMalformed(t, func(b []byte) *pb.WriteManyResult { return &pb.WriteManyResult{Status: b} }, manyAnswer)
	if _, err := manyAnswer(&pb.WriteManyResult{Response: &pb.WriteResponse{}}); err != nil {
		t.Fatal(err)
	}
}

// FuzzManyAnswer: whatever bytes a WriteMany result carries as its status,
// turning it back into Write's answer never panics and never yields
// neither a response nor an error.
func FuzzManyAnswer(f *testing.F) {
	st, _ := proto.Marshal(status.Convert(rpcerr.WithIndex(codes.AlreadyExists, rpcerr.ReasonEntityAlreadyExists, "exists", 3)).Proto())
	f.Add(st)
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x05})
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := manyAnswer(&pb.WriteManyResult{Status: b})
		if resp != nil || err == nil {
			t.Fatalf("manyAnswer(%x) = %v, %v; want an error", b, resp, err)
		}
	})
}

func TestLingerDecision(t *testing.T) {
	tests := []struct {
		name             string
		all              int
		linger           time.Duration
		queued, answered int
		wait             bool
		want             int
	}{
		{"nothing queued after several: wait for them", 0, time.Millisecond, 0, 10, true, 10},
		{"a lone write answered, nothing queued", 0, time.Millisecond, 0, 1, false, 0},
		{"a lone write answered", 0, time.Millisecond, 1, 1, false, 0},
		{"half as many queued as answered", 0, time.Millisecond, 5, 10, false, 0},
		{"fewer than half queued", 0, time.Millisecond, 4, 10, true, 10},
		{"the wait is for at most lingerTarget writes", 0, time.Millisecond, 1, 2 * maxCoalesced, true, lingerTarget},
		{"half of lingerTarget queued after a large call", 0, time.Millisecond, lingerTarget / 2, 2 * lingerTarget, false, 0},
		{"fewer than half of lingerTarget queued after a large call", 0, time.Millisecond, lingerTarget/2 - 1, 2 * lingerTarget, true, lingerTarget},
		{"lingering off", 0, 0, 1, 10, false, 0},
		// all (writes): the callers answered on top of those queued.
		{"all: nothing queued after several", maxCoalesced, time.Millisecond, 0, 10, true, 10},
		{"all: the other cohort queued, wait for both", maxCoalesced, time.Millisecond, 5, 5, true, 10},
		{"all: half queued no longer ends it", maxCoalesced, time.Millisecond, 5, 10, true, 15},
		{"all: two cohorts of lingerTarget, wait for both", maxCoalesced, time.Millisecond, lingerTarget, lingerTarget, true, 2 * lingerTarget},
		{"all: a lone write answered never waits", maxCoalesced, time.Millisecond, 3, 1, false, 0},
		{"all: as many queued as the cap already", 8, time.Millisecond, 8, 4, false, 0},
		{"all: the wait is for at most the cap", 8, time.Millisecond, 7, 4, true, 8},
		{"all: lingering off", maxCoalesced, 0, 1, 10, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &lane[*pb.WriteRequest, *pb.WriteResponse]{queue: make([]*pending[*pb.WriteRequest, *pb.WriteResponse], tt.queued)}
			wake := lingerLocked(l, tt.answered, tt.linger, tt.all)
			if (wake != nil) != tt.wait || l.want != tt.want {
				t.Fatalf("lingerLocked(%d queued, %d answered, all %v) = wait %v for %d; want wait %v for %d", tt.queued, tt.answered, tt.all, wake != nil, l.want, tt.wait, tt.want)
			}
		})
	}
}

// TestCoalescerLingersForAnsweredWriters: after a WriteMany of four
// returns with one write queued, the lane waits until those four are
// queued too (five) and sends them as one call; a lane that lingers with
// too few comes back after lingerMax and sends what it has.
func TestCoalescerLingersForAnsweredWriters(t *testing.T) {
	c := newCoalescer()
	c.linger = time.Hour // the first wait must end by the queue, not the timer
	c.since = func(time.Time) time.Duration { return time.Hour }
	f := newFakePS()
	f.manyGate = make(chan struct{})
	outs := startWrites(t, c, f, []string{"a", "bb", "ccc", "dddd", "eeeee"})
	close(f.gate) // "a" is answered; the WriteMany of four is sent and held
	waitUntil(t, func() bool { _, many := f.counts(); return len(many) == 1 })
	start := func(rk string) chan writeOutcome {
		ch := make(chan writeOutcome, 1)
		go func() {
			resp, err := c.do(context.Background(), "ps1", f, writeReq(rk))
			ch <- writeOutcome{resp, err}
		}()
		return ch
	}
	queued := func(n int) func() bool {
		return func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			l := c.lanes[laneKey{"ps1", 7, false}]
			return l != nil && len(l.queue) == n
		}
	}
	outs = append(outs, start("f"))
	waitUntil(t, queued(1))
	f.manyGate <- struct{}{} // the four are answered, one is queued: linger
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		l := c.lanes[laneKey{"ps1", 7, false}]
		return l != nil && l.wake != nil
	})
	for i, rk := range []string{"g", "h", "i"} {
		outs = append(outs, start(rk))
		waitUntil(t, queued(2+i))
	}
	if _, many := f.counts(); len(many) != 1 {
		t.Fatalf("WriteMany sizes %v: the lane did not wait", many)
	}
	outs = append(outs, start("k"))
	waitUntil(t, func() bool { _, many := f.counts(); return len(many) == 2 })
	c.mu.Lock()
	c.linger = 20 * time.Millisecond
	c.mu.Unlock()
	outs = append(outs, start("j"))
	waitUntil(t, queued(1))
	f.manyGate <- struct{}{} // five answered, "j" queued: waits, then goes alone
	for i, ch := range outs {
		if o := <-ch; o.err != nil {
			t.Errorf("write %d: %v", i, o.err)
		}
	}
	waitUntil(t, laneIdle(c))
	if writes, many := f.counts(); writes != 2 || !reflect.DeepEqual(many, []int{4, 5}) {
		t.Fatalf("Write calls %d, WriteMany sizes %v; want 2, [4 5]", writes, many)
	}
}

// TestCoalescerLingersWithNothingQueued: a WriteMany of two returns with
// nothing queued; the lane keeps its slot while it waits, so the first
// writer to come back queues instead of going out alone, and the two go
// out together.
func TestCoalescerLingersWithNothingQueued(t *testing.T) {
	c := newCoalescer()
	c.linger = time.Hour // the wait must end by the queue, not the timer
	c.since = func(time.Time) time.Duration { return time.Hour }
	f := newFakePS()
	f.manyGate = make(chan struct{})
	outs := startWrites(t, c, f, []string{"a", "bb", "ccc"})
	close(f.gate) // "a" is answered; the WriteMany of two is sent and held
	waitUntil(t, func() bool { _, many := f.counts(); return len(many) == 1 })
	f.manyGate <- struct{}{}
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		l := c.lanes[laneKey{"ps1", 7, false}]
		return l != nil && l.wake != nil && l.inflight == 1
	})
	for i, rk := range []string{"d", "e"} {
		ch := make(chan writeOutcome, 1)
		go func() {
			resp, err := c.do(context.Background(), "ps1", f, writeReq(rk))
			ch <- writeOutcome{resp, err}
		}()
		outs = append(outs, ch)
		if i == 0 {
			waitUntil(t, func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				return len(c.lanes[laneKey{"ps1", 7, false}].queue) == 1
			})
		}
	}
	waitUntil(t, func() bool { _, many := f.counts(); return len(many) == 2 })
	// After this WriteMany the lane waits for its two writers, who do not
	// come back: with a short wait it then gives its slot back.
	c.mu.Lock()
	c.linger = 10 * time.Millisecond
	c.mu.Unlock()
	f.manyGate <- struct{}{}
	for i, ch := range outs {
		if o := <-ch; o.err != nil {
			t.Errorf("write %d: %v", i, o.err)
		}
	}
	waitUntil(t, laneIdle(c))
	if writes, many := f.counts(); writes != 1 || !reflect.DeepEqual(many, []int{2, 2}) {
		t.Fatalf("Write calls %d, WriteMany sizes %v; want 1, [2 2]", writes, many)
	}
}

// TestCoalescerLingerBoundedByCall: a write lane lingering for its callers
// waits no longer than the call it just made took, however long its
// linger: with a linger of an hour and calls that "took" 30 ms, the lane
// whose two writers do not come back gives its slot back.
func TestCoalescerLingerBoundedByCall(t *testing.T) {
	c := newCoalescer()
	c.linger = time.Hour
	c.since = func(time.Time) time.Duration { return 30 * time.Millisecond }
	f := newFakePS()
	f.manyGate = make(chan struct{})
	outs := startWrites(t, c, f, []string{"a", "bb", "ccc"})
	close(f.gate) // "a" is answered; the WriteMany of two is sent and held
	waitUntil(t, func() bool { _, many := f.counts(); return len(many) == 1 })
	f.manyGate <- struct{}{} // two answered, nothing queued: linger
	for i, ch := range outs {
		if o := <-ch; o.err != nil {
			t.Errorf("write %d: %v", i, o.err)
		}
	}
	waitUntil(t, laneIdle(c)) // an hour's linger would not end in time
	if writes, many := f.counts(); writes != 1 || !reflect.DeepEqual(many, []int{2}) {
		t.Fatalf("Write calls %d, WriteMany sizes %v; want 1, [2]", writes, many)
	}
}
