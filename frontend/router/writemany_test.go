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

	mu     sync.Mutex
	writes int   // Write calls
	many   []int // writes per WriteMany call
}

func newFakePS() *fakePS { return &fakePS{gate: make(chan struct{})} }

func answer(req *pb.WriteRequest) (*pb.WriteResponse, error) {
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
	return answer(req)
}

func (f *fakePS) WriteMany(ctx context.Context, req *pb.WriteManyRequest, _ ...grpc.CallOption) (*pb.WriteManyResponse, error) {
	f.mu.Lock()
	f.many = append(f.many, len(req.GetWrites()))
	f.mu.Unlock()
	<-f.gate
	if f.manyErr != nil {
		return nil, f.manyErr
	}
	out := &pb.WriteManyResponse{}
	for _, w := range req.GetWrites() {
		resp, err := answer(w)
		r := &pb.WriteManyResult{Response: resp}
		if err != nil {
			r.Response = nil
			r.Status, _ = proto.Marshal(status.Convert(err).Proto())
		}
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

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

type writeOutcome struct {
	resp *pb.WriteResponse
	err  error
}

// startWrites starts the writes of rks one after the other, each once the
// previous one is either in flight or queued.
func startWrites(t *testing.T, c *coalescer, f *fakePS, rks []string) []chan writeOutcome {
	t.Helper()
	outs := make([]chan writeOutcome, len(rks))
	for i, rk := range rks {
		outs[i] = make(chan writeOutcome, 1)
		go func() {
			resp, err := c.write(context.Background(), "ps1", f, writeReq(rk))
			outs[i] <- writeOutcome{resp, err}
		}()
		waitUntil(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			l := c.lanes[laneKey{"ps1", 7}]
			return l != nil && l.inflight+len(l.queue) == i+1
		})
	}
	return outs
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
			check: func(t *testing.T, i int, o writeOutcome) {
				if i < maxWriteCalls {
					if o.err != nil {
						t.Errorf("write %d: %v", i, o.err)
					}
					return
				}
				if status.Code(o.err) != codes.Unavailable {
					t.Errorf("write %d: err %v, want Unavailable", i, o.err)
				}
			},
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
			outs := startWrites(t, c, f, tt.rks)
			close(f.gate)
			for i, ch := range outs {
				tt.check(t, i, <-ch)
			}
			waitUntil(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.lanes) == 0 })
			writes, many := f.counts()
			if writes != tt.wantWrite || !reflect.DeepEqual(many, tt.wantMany) {
				t.Fatalf("Write calls %d, WriteMany sizes %v; want %d, %v", writes, many, tt.wantWrite, tt.wantMany)
			}
			if tt.manyErr != nil && status.Code(tt.manyErr) == codes.Unimplemented {
				c.mu.Lock()
				remembered := c.noMany["ps1"]
				c.mu.Unlock()
				if !remembered {
					t.Fatal("the server without WriteMany was not remembered")
				}
			}
		})
	}
}

// TestCoalescerCallerGivesUp: a queued write whose caller's context ends
// returns at once with the status a call would have returned, and is left
// out of the WriteMany; the others are answered.
func TestCoalescerCallerGivesUp(t *testing.T) {
	c := newCoalescer()
	f := newFakePS()
	rks := []string{"a", "bb", "ccc"}
	queued := len(rks) - maxWriteCalls // besides the abandoned one
	outs := startWrites(t, c, f, rks)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := c.write(ctx, "ps1", f, writeReq("gone"))
		gone <- err
	}()
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.lanes[laneKey{"ps1", 7}].queue) == queued+1
	})
	cancel()
	if err := <-gone; status.Code(err) != codes.Canceled {
		t.Fatalf("abandoned write: err %v, want Canceled", err)
	}
	close(f.gate)
	for i, ch := range outs {
		if o := <-ch; o.err != nil {
			t.Errorf("write %d: %v", i, o.err)
		}
	}
	waitUntil(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.lanes) == 0 })
	// The abandoned write was dropped from its batch: the others queued
	// went out as one WriteMany, or alone if only one.
	wantWrites, wantMany := maxWriteCalls, []int{queued}
	if queued == 1 {
		wantWrites, wantMany = len(rks), nil
	}
	if writes, many := f.counts(); writes != wantWrites || !reflect.DeepEqual(many, wantMany) {
		t.Fatalf("Write calls %d, WriteMany sizes %v; want %d, %v", writes, many, wantWrites, wantMany)
	}
}

// TestCoalescerLanesAreIndependent: writes to another range, or to the
// same range at another address, do not queue behind a busy lane.
func TestCoalescerLanesAreIndependent(t *testing.T) {
	c := newCoalescer()
	f := newFakePS()
	outs := startWrites(t, c, f, []string{"a", "bb"})
	other := newFakePS()
	close(other.gate)
	for _, k := range []struct {
		addr    string
		rangeID uint64
	}{{"ps1", 8}, {"ps2", 7}} {
		req := writeReq("x")
		req.RangeId = k.rangeID
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.write(ctx, k.addr, other, req)
		cancel()
		if err != nil {
			t.Fatalf("%s range %d: %v", k.addr, k.rangeID, err)
		}
	}
	close(f.gate)
	for _, ch := range outs {
		<-ch
	}
	if writes, _ := other.counts(); writes != 2 {
		t.Fatalf("other lanes: %d Write calls, want 2", writes)
	}
}

func TestManyAnswerMalformed(t *testing.T) {
	okStatus, _ := proto.Marshal(status.New(codes.OK, "").Proto())
	tests := []struct {
		name string
		r    *pb.WriteManyResult
	}{
		{"neither response nor status", &pb.WriteManyResult{}},
		{"status OK", &pb.WriteManyResult{Status: okStatus}},
		{"undecodable status", &pb.WriteManyResult{Status: []byte{0xff, 0xff, 0xff}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := manyAnswer(tt.r)
			// The write may have applied: an unknown outcome, retried.
			if resp != nil || status.Code(err) != codes.Unavailable || !rpcerr.Is(err, rpcerr.ReasonUnavailable) {
				t.Fatalf("manyAnswer = %v, %v; want an unknown outcome (Unavailable, UNAVAILABLE)", resp, err)
			}
		})
	}
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
