package router

import (
	"context"
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

// fakeReadPS answers Get and GetMany: a read whose RowKey is "missing"
// fails with ENTITY_NOT_FOUND, one whose RowKey is "moved" with NOT_LEADER
// naming ps2 as the leader; others succeed with the RowKey as the entity.
// Calls block on gate until it is closed; manyErr, when set, is GetMany's
// error.
type fakeReadPS struct {
	pb.PartitionServiceClient
	gate    chan struct{}
	manyErr error
	// manyGate, when set, holds each GetMany until a value is sent on it
	// (instead of gate).
	manyGate chan struct{}

	mu   sync.Mutex
	gets int   // Get calls
	many []int // reads per GetMany call
	reqs []*pb.GetRequest
}

func newFakeReadPS() *fakeReadPS { return &fakeReadPS{gate: make(chan struct{})} }

func readAnswer(req *pb.GetRequest) (*pb.GetResponse, error) {
	switch req.GetRowKey() {
	case "missing":
		return nil, rpcerr.New(codes.NotFound, rpcerr.ReasonEntityNotFound, "not found", nil)
	case "moved":
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonNotLeader, "not the leader", map[string]string{rpcerr.MetaLeader: "ps2"})
	}
	return &pb.GetResponse{Entity: []byte(req.GetRowKey())}, nil
}

func (f *fakeReadPS) Get(ctx context.Context, req *pb.GetRequest, _ ...grpc.CallOption) (*pb.GetResponse, error) {
	f.mu.Lock()
	f.gets++
	f.mu.Unlock()
	select {
	case <-f.gate:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return readAnswer(req)
}

func (f *fakeReadPS) GetMany(ctx context.Context, req *pb.GetManyRequest, _ ...grpc.CallOption) (*pb.GetManyResponse, error) {
	f.mu.Lock()
	f.many = append(f.many, len(req.GetGets()))
	f.reqs = append(f.reqs, req.GetGets()...)
	f.mu.Unlock()
	if f.manyGate != nil {
		<-f.manyGate
	} else {
		<-f.gate
	}
	if f.manyErr != nil {
		return nil, f.manyErr
	}
	out := &pb.GetManyResponse{}
	for _, g := range req.GetGets() {
		r := &pb.GetManyResult{}
		r.Response, r.Status = manyResult(readAnswer(g))
		out.Results = append(out.Results, r)
	}
	return out, nil
}

func (f *fakeReadPS) counts() (int, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, append([]int(nil), f.many...)
}

func readReq(rangeID uint64, rk string) *pb.GetRequest {
	return &pb.GetRequest{RangeId: rangeID, PartitionKey: "p", RowKey: rk}
}

type readOutcome = answer[*pb.GetResponse]

func TestReadCoalescerGroupsQueuedReads(t *testing.T) {
	tests := []struct {
		name     string
		reqs     []*pb.GetRequest
		manyErr  error
		wantMany []int
		wantGets int
		check    func(t *testing.T, i int, o readOutcome)
	}{
		{
			name: "a lone read is sent alone", reqs: []*pb.GetRequest{readReq(7, "a")}, wantGets: 1,
			check: func(t *testing.T, i int, o readOutcome) {
				if o.err != nil || string(o.resp.GetEntity()) != "a" {
					t.Errorf("read %d: %v, %v", i, o.resp, o.err)
				}
			},
		},
		{
			name:     "reads of a range beyond the call in flight go out as one GetMany, each with its own answer",
			reqs:     []*pb.GetRequest{readReq(7, "r0"), readReq(7, "r1"), readReq(7, "missing"), readReq(7, "moved"), readReq(7, "r4")},
			wantGets: maxReadCalls, wantMany: []int{5 - maxReadCalls},
			check: func(t *testing.T, i int, o readOutcome) {
				switch i {
				case 2:
					if info := rpcerr.Parse(o.err); info.Code != codes.NotFound || info.Reason != rpcerr.ReasonEntityNotFound {
						t.Errorf("read %d: err %v (%+v), want ENTITY_NOT_FOUND", i, o.err, info)
					}
				case 3:
					if info := rpcerr.Parse(o.err); info.Reason != rpcerr.ReasonNotLeader || info.Metadata[rpcerr.MetaLeader] != "ps2" {
						t.Errorf("read %d: err %v (%+v), want NOT_LEADER naming ps2", i, o.err, info)
					}
				default:
					if want := []string{"r0", "r1", "", "", "r4"}[i]; o.err != nil || string(o.resp.GetEntity()) != want {
						t.Errorf("read %d: %v, %v; want %q", i, o.resp, o.err, want)
					}
				}
			},
		},
		{
			name:    "a failed GetMany fails each of its reads with its error",
			reqs:    []*pb.GetRequest{readReq(7, "a"), readReq(7, "b"), readReq(7, "c"), readReq(7, "d")},
			manyErr: status.Error(codes.Unavailable, "connection reset"), wantGets: maxReadCalls, wantMany: []int{4 - maxReadCalls},
			check: checkManyFailed[*pb.GetResponse](maxReadCalls),
		},
		{
			name:    "a server without GetMany gets single reads",
			reqs:    []*pb.GetRequest{readReq(7, "a"), readReq(7, "b"), readReq(7, "missing"), readReq(7, "d")},
			manyErr: status.Error(codes.Unimplemented, "unknown method GetMany"), wantGets: 4, wantMany: []int{4 - maxReadCalls},
			check: func(t *testing.T, i int, o readOutcome) {
				if i == 2 {
					if rpcerr.Parse(o.err).Reason != rpcerr.ReasonEntityNotFound {
						t.Errorf("read %d: err %v, want ENTITY_NOT_FOUND", i, o.err)
					}
					return
				}
				if want := []string{"a", "b", "", "d"}[i]; o.err != nil || string(o.resp.GetEntity()) != want {
					t.Errorf("read %d: %v, %v; want %q", i, o.resp, o.err, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newReadCoalescer()
			f := newFakeReadPS()
			f.manyErr = tt.manyErr
			runGroupCase(t, c, f, tt.reqs, func() { close(f.gate) }, f.counts, tt.check, tt.wantGets, tt.wantMany, tt.manyErr)
			if _, many := f.counts(); len(many) > 0 {
				// The coalesced reads went out in their order, each as it was.
				f.mu.Lock()
				for j, req := range f.reqs {
					if !proto.Equal(req, tt.reqs[maxReadCalls+j]) {
						t.Errorf("GetMany read %d = %v, want %v", j, req, tt.reqs[maxReadCalls+j])
					}
				}
				f.mu.Unlock()
			}
		})
	}
}

// TestReadCoalescerCallerGivesUp: a queued read whose caller's context
// ends returns at once with the status a call would have returned, and is
// left out of the GetMany; the others are answered.
func TestReadCoalescerCallerGivesUp(t *testing.T) {
	c := newReadCoalescer()
	f := newFakeReadPS()
	reqs := []*pb.GetRequest{readReq(7, "a"), readReq(7, "b"), readReq(7, "c")}
	testCallerGivesUp(t, c, f, reqs, readReq(7, "gone"), func() { close(f.gate) }, f.counts)
}

// TestReadCoalescerLanesAreIndependent: follower reads, reads of another
// range of the same server and reads to another server do not queue
// behind a busy lane of linearizable reads (a slow range must not hold up
// the others).
func TestReadCoalescerLanesAreIndependent(t *testing.T) {
	c := newReadCoalescer()
	f := newFakeReadPS()
	outs := startCalls(t, c, f, []*pb.GetRequest{readReq(7, "a"), readReq(7, "b")})
	other := newFakeReadPS()
	close(other.gate)
	for _, k := range []struct {
		addr     string
		rangeID  uint64
		follower bool
	}{{"ps1", 7, true}, {"ps1", 8, false}, {"ps2", 7, false}} {
		req := readReq(k.rangeID, "x")
		req.FollowerRead = k.follower
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.do(ctx, k.addr, other, req)
		cancel()
		if err != nil || string(resp.GetEntity()) != "x" {
			t.Fatalf("%s range %d follower %v: %v, %v", k.addr, k.rangeID, k.follower, resp, err)
		}
	}
	close(f.gate)
	for _, ch := range outs {
		<-ch
	}
	if gets, _ := other.counts(); gets != 3 {
		t.Fatalf("other lanes: %d Get calls, want 3", gets)
	}
}

func TestGetManyAnswerMalformed(t *testing.T) {
	testManyAnswerMalformed(t, func(b []byte) *pb.GetManyResult { return &pb.GetManyResult{Status: b} }, getManyAnswer)
	if _, err := getManyAnswer(&pb.GetManyResult{Response: &pb.GetResponse{}}); err != nil {
		t.Fatal(err)
	}
}

// TestReadCoalescerLingersForAnsweredReaders: read lanes linger as write
// lanes do (readLinger): after a GetMany of four returns with one read
// queued, the lane waits until four are queued and sends them as one
// call, instead of a GetMany of the one and another of the rest.
func TestReadCoalescerLingersForAnsweredReaders(t *testing.T) {
	c := newReadCoalescer()
	if c.linger != readLinger || readLinger <= 0 {
		t.Fatalf("read lanes linger %v, want readLinger (%v) > 0", c.linger, readLinger)
	}
	c.linger = time.Hour // the wait must end by the queue, not the timer
	f := newFakeReadPS()
	f.manyGate = make(chan struct{})
	type out struct {
		rk   string
		resp *pb.GetResponse
		err  error
	}
	outs := make(chan out, 16)
	start := func(rk string) {
		go func() {
			resp, err := c.do(context.Background(), "ps1", f, readReq(7, rk))
			outs <- out{rk, resp, err}
		}()
	}
	queued := func(n int) func() bool {
		return func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			l := c.lanes[laneKey{"ps1", 7, false}]
			return l != nil && len(l.queue) == n
		}
	}
	start("a")
	waitUntil(t, func() bool { gets, _ := f.counts(); return gets == 1 })
	for i, rk := range []string{"b", "c", "d", "e"} {
		start(rk)
		waitUntil(t, queued(i+1))
	}
	close(f.gate) // "a" is answered; the GetMany of four is sent and held
	waitUntil(t, func() bool { _, many := f.counts(); return len(many) == 1 })
	start("f")
	waitUntil(t, queued(1))
	f.manyGate <- struct{}{} // four answered, one queued: the lane lingers
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		l := c.lanes[laneKey{"ps1", 7, false}]
		return l != nil && l.wake != nil
	})
	for i, rk := range []string{"g", "h"} {
		start(rk)
		waitUntil(t, queued(2+i))
	}
	if _, many := f.counts(); len(many) != 1 {
		t.Fatalf("GetMany sizes %v: the lane did not wait", many)
	}
	start("i")
	waitUntil(t, func() bool { _, many := f.counts(); return len(many) == 2 })
	c.mu.Lock()
	c.linger = 20 * time.Millisecond // four answered, none queued: waits that long, then idles
	c.mu.Unlock()
	f.manyGate <- struct{}{}
	for range 9 {
		o := <-outs
		if o.err != nil || string(o.resp.GetEntity()) != o.rk {
			t.Errorf("read %q: %v, %v", o.rk, o.resp, o.err)
		}
	}
	waitUntil(t, laneIdle(c))
	if gets, many := f.counts(); gets != 1 || len(many) != 2 || many[0] != 4 || many[1] != 4 {
		t.Fatalf("Get calls %d, GetMany sizes %v; want 1, [4 4]", gets, many)
	}
}

// TestReadCoalescerStopsLingeringAfterAMiss: a read lane whose linger ran
// out before its readers came back (a steady stream, not a closed loop)
// sends its next readSkipAfterMiss calls without lingering.
func TestReadCoalescerStopsLingeringAfterAMiss(t *testing.T) {
	c := newReadCoalescer()
	c.linger = 20 * time.Millisecond
	f := newFakeReadPS()
	f.manyGate = make(chan struct{})
	type out struct {
		rk  string
		err error
	}
	outs := make(chan out, 16)
	start := func(rk string) {
		go func() {
			_, err := c.do(context.Background(), "ps1", f, readReq(7, rk))
			outs <- out{rk, err}
		}()
	}
	onLane := func(fn func(l *readLane) bool) func() bool {
		return func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			l := c.lanes[laneKey{"ps1", 7, false}]
			return l != nil && fn(l)
		}
	}
	queued := func(n int) func() bool {
		return onLane(func(l *readLane) bool { return len(l.queue) == n })
	}
	start("a")
	waitUntil(t, func() bool { gets, _ := f.counts(); return gets == 1 })
	for i, rk := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		start(rk)
		waitUntil(t, queued(i+1))
	}
	close(f.gate) // "a" answered; the GetMany of eight is sent and held
	waitUntil(t, func() bool { _, many := f.counts(); return len(many) == 1 })
	for i, rk := range []string{"j", "k", "l"} {
		start(rk)
		waitUntil(t, queued(i+1))
	}
	f.manyGate <- struct{}{} // eight answered, three queued: linger, and miss
	waitUntil(t, func() bool { _, many := f.counts(); return len(many) == 2 })
	if !onLane(func(l *readLane) bool { return l.skipLinger == readSkipAfterMiss })() {
		t.Fatal("the missed linger did not set the lane to skip lingering")
	}
	c.mu.Lock()
	c.linger = time.Hour // a linger now would hold "m" past the test's deadline
	c.mu.Unlock()
	start("m")
	waitUntil(t, queued(1))
	f.manyGate <- struct{}{} // three answered, one queued: no linger, "m" goes at once
	for range 13 {
		select {
		case o := <-outs:
			if o.err != nil {
				t.Errorf("read %q: %v", o.rk, o.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a read is still waiting: the lane lingered after a miss")
		}
	}
	waitUntil(t, laneIdle(c))
	if gets, many := f.counts(); gets != 2 || len(many) != 2 || many[0] != 8 || many[1] != 3 {
		t.Fatalf("Get calls %d, GetMany sizes %v; want 2, [8 3]", gets, many)
	}
}

type readLane = lane[*pb.GetRequest, *pb.GetResponse]
