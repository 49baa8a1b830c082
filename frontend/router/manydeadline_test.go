package router

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"tablestore/internal/rangeclient"
	pb "tablestore/proto/tablestorepb"
)

// deadlineOnly is an attempt context whose deadline has passed without
// Done or Err showing it yet: a context's timer fires a moment after its
// deadline, in no set order with the many call's own timer for the same
// instant, so the caller with the latest deadline of a batch may be handed
// the many call's answer before its context says it ended.
type deadlineOnly struct {
	context.Context
	at time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.at, true }

// stallWriteManyPS and stallGetManyPS answer the many call only when its
// context ends, with what gRPC returns then (DeadlineExceeded, no reason).
type stallWriteManyPS struct{ *fakePS }

func (stallWriteManyPS) WriteMany(ctx context.Context, _ *pb.WriteManyRequest, _ ...grpc.CallOption) (*pb.WriteManyResponse, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

type stallGetManyPS struct{ *fakeReadPS }

func (stallGetManyPS) GetMany(ctx context.Context, _ *pb.GetManyRequest, _ ...grpc.CallOption) (*pb.GetManyResponse, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestManyCallOutlivingItsDeadline: a many call that runs out the latest
// attempt deadline it carries is, for the callers still waiting on it, an
// attempt abandoned without an answer: an unknown outcome the range client
// retries (a write by its request id), not the bare DeadlineExceeded that
// rangeclient.Classify ends the call on (500 OperationTimedOut for a write
// the next replica would have taken). Before, a caller whose own context
// had not yet shown its deadline got that bare status.
func TestManyCallOutlivingItsDeadline(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T) []error
	}{
		{"writes", func(t *testing.T) []error {
			f := newFakePS()
			return runPastDeadline(t, newCoalescer(), stallWriteManyPS{f}, writeReq("a"),
				[]*pb.WriteRequest{writeReq("bb"), writeReq("ccc")}, func() { close(f.gate) })
		}},
		{"reads", func(t *testing.T) []error {
			f := newFakeReadPS()
			return runPastDeadline(t, newReadCoalescer(), stallGetManyPS{f}, readReq(7, "a"),
				[]*pb.GetRequest{readReq(7, "b"), readReq(7, "c")}, func() { close(f.gate) })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, err := range tt.run(t) {
				if d := rangeclient.Classify(err); err == nil || !d.Retry || d.Busy {
					t.Errorf("queued call %d: err %v (retry %v, busy %v); want an unknown outcome the range client retries", i, err, d.Retry, d.Busy)
				}
			}
		})
	}
}

// runPastDeadline sends first alone (held by the fake until open), queues
// queued behind it with deadlineOnly contexts 50 ms away, opens the fake
// and returns the queued calls' errors (their many call stalls until its
// context ends).
func runPastDeadline[Req, Resp any](t *testing.T, c *coalescer[Req, Resp], cl pb.PartitionServiceClient, first Req, queued []Req, open func()) []error {
	t.Helper()
	firstDone := make(chan error, 1)
	go func() {
		_, err := c.do(context.Background(), "ps1", cl, first)
		firstDone <- err
	}()
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		l := laneOf(c, first)
		return l != nil && l.inflight == 1
	})
	at := time.Now().Add(50 * time.Millisecond)
	errs := make(chan error, len(queued))
	for i, req := range queued {
		go func() {
			_, err := c.do(deadlineOnly{context.Background(), at}, "ps1", cl, req)
			errs <- err
		}()
		waitUntil(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(laneOf(c, first).queue) == i+1
		})
	}
	open()
	if err := <-firstDone; err != nil {
		t.Fatalf("first call: %v", err)
	}
	out := make([]error, 0, len(queued))
	timeout := time.After(5 * time.Second)
	for range queued {
		select {
		case err := <-errs:
			out = append(out, err)
		case <-timeout:
			t.Fatal("a queued call was not answered within 5 s of its many call's deadline")
		}
	}
	waitUntil(t, laneIdle(c))
	return out
}
