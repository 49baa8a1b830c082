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

// fakeReadPS answers Get and GetMany: a read whose RowKey is "missing"
// fails with ENTITY_NOT_FOUND, one whose RowKey is "moved" with NOT_LEADER
// naming ps2 as the leader; others succeed with the RowKey as the entity.
// Calls block on gate until it is closed; manyErr, when set, is GetMany's
// error.
type fakeReadPS struct {
	pb.PartitionServiceClient
	gate    chan struct{}
	manyErr error

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
	<-f.gate
	if f.manyErr != nil {
		return nil, f.manyErr
	}
	out := &pb.GetManyResponse{}
	for _, g := range req.GetGets() {
		resp, err := readAnswer(g)
		r := &pb.GetManyResult{Response: resp}
		if err != nil {
			r.Response = nil
			r.Status, _ = proto.Marshal(status.Convert(err).Proto())
		}
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

type readOutcome struct {
	resp *pb.GetResponse
	err  error
}

// startReads starts the reads reqs to ps1 one after the other, each once
// the previous one is either in flight or queued.
func startReads(t *testing.T, c *readCoalescer, f *fakeReadPS, reqs []*pb.GetRequest) []chan readOutcome {
	t.Helper()
	outs := make([]chan readOutcome, len(reqs))
	for i, req := range reqs {
		outs[i] = make(chan readOutcome, 1)
		go func() {
			resp, err := c.do(context.Background(), "ps1", f, req)
			outs[i] <- readOutcome{resp, err}
		}()
		waitUntil(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			l := c.lanes[laneKey{"ps1", 7, false}]
			return l != nil && l.inflight+len(l.queue) == i+1
		})
	}
	return outs
}

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
			check: func(t *testing.T, i int, o readOutcome) {
				if i < maxReadCalls {
					if o.err != nil {
						t.Errorf("read %d: %v", i, o.err)
					}
					return
				}
				if status.Code(o.err) != codes.Unavailable {
					t.Errorf("read %d: err %v, want Unavailable", i, o.err)
				}
			},
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
			outs := startReads(t, c, f, tt.reqs)
			close(f.gate)
			for i, ch := range outs {
				tt.check(t, i, <-ch)
			}
			waitUntil(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.lanes) == 0 })
			gets, many := f.counts()
			if gets != tt.wantGets || !reflect.DeepEqual(many, tt.wantMany) {
				t.Fatalf("Get calls %d, GetMany sizes %v; want %d, %v", gets, many, tt.wantGets, tt.wantMany)
			}
			if len(many) > 0 {
				// The coalesced reads went out in their order, each as it was.
				f.mu.Lock()
				for j, req := range f.reqs {
					if !proto.Equal(req, tt.reqs[maxReadCalls+j]) {
						t.Errorf("GetMany read %d = %v, want %v", j, req, tt.reqs[maxReadCalls+j])
					}
				}
				f.mu.Unlock()
			}
			c.mu.Lock()
			remembered := c.noMany["ps1"]
			c.mu.Unlock()
			if want := status.Code(tt.manyErr) == codes.Unimplemented; remembered != want {
				t.Fatalf("server remembered as without GetMany: %v, want %v", remembered, want)
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
	queued := len(reqs) - maxReadCalls // besides the abandoned one
	outs := startReads(t, c, f, reqs)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := c.do(ctx, "ps1", f, readReq(7, "gone"))
		gone <- err
	}()
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.lanes[laneKey{"ps1", 7, false}].queue) == queued+1
	})
	cancel()
	if err := <-gone; status.Code(err) != codes.Canceled {
		t.Fatalf("abandoned read: err %v, want Canceled", err)
	}
	close(f.gate)
	for i, ch := range outs {
		if o := <-ch; o.err != nil {
			t.Errorf("read %d: %v", i, o.err)
		}
	}
	waitUntil(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.lanes) == 0 })
	wantGets, wantMany := maxReadCalls, []int{queued}
	if queued == 1 {
		wantGets, wantMany = len(reqs), nil
	}
	if gets, many := f.counts(); gets != wantGets || !reflect.DeepEqual(many, wantMany) {
		t.Fatalf("Get calls %d, GetMany sizes %v; want %d, %v", gets, many, wantGets, wantMany)
	}
}

// TestReadCoalescerLanesAreIndependent: follower reads, reads of another
// range of the same server and reads to another server do not queue
// behind a busy lane of linearizable reads (a slow range must not hold up
// the others).
func TestReadCoalescerLanesAreIndependent(t *testing.T) {
	c := newReadCoalescer()
	f := newFakeReadPS()
	outs := startReads(t, c, f, []*pb.GetRequest{readReq(7, "a"), readReq(7, "b")})
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
	okStatus, _ := proto.Marshal(status.New(codes.OK, "").Proto())
	tests := []struct {
		name string
		r    *pb.GetManyResult
	}{
		{"neither response nor status", &pb.GetManyResult{}},
		{"status OK", &pb.GetManyResult{Status: okStatus}},
		{"undecodable status", &pb.GetManyResult{Status: []byte{0xff, 0xff, 0xff}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := getManyAnswer(tt.r)
			if resp != nil || status.Code(err) != codes.Unavailable || !rpcerr.Is(err, rpcerr.ReasonUnavailable) {
				t.Fatalf("getManyAnswer = %v, %v; want Unavailable, UNAVAILABLE", resp, err)
			}
		})
	}
	if _, err := getManyAnswer(&pb.GetManyResult{Response: &pb.GetResponse{}}); err != nil {
		t.Fatal(err)
	}
}
