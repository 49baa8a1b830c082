package router

import (
	"context"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// The lane tests that hold for both sides of coalesce.go (writes in
// writemany_test.go, reads in readmany_test.go) run each side through
// these helpers: one body, two fakes.

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

// manyResult is how a fake server puts one answer into a many call's
// result: the response, or the error's status bytes.
func manyResult[Resp any](resp Resp, err error) (Resp, []byte) {
	if err != nil {
		var zero Resp
		b, _ := proto.Marshal(status.Convert(err).Proto())
		return zero, b
	}
	return resp, nil
}

// laneOf is the lane of req at ps1.
func laneOf[Req, Resp any](c *coalescer[Req, Resp], req Req) *lane[Req, Resp] {
	rangeID, kind := c.ops.key(req)
	return c.lanes[laneKey{"ps1", rangeID, kind}]
}

// startCalls starts reqs to ps1 through cl one after the other, each once
// the previous one is either in flight or queued (all in one lane).
func startCalls[Req, Resp any](t *testing.T, c *coalescer[Req, Resp], cl pb.PartitionServiceClient, reqs []Req) []chan answer[Resp] {
	t.Helper()
	outs := make([]chan answer[Resp], len(reqs))
	for i, req := range reqs {
		outs[i] = make(chan answer[Resp], 1)
		go func() {
			resp, err := c.do(context.Background(), "ps1", cl, req)
			outs[i] <- answer[Resp]{resp, err}
		}()
		waitUntil(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			l := laneOf(c, req)
			return l != nil && l.inflight+len(l.queue) == i+1
		})
	}
	return outs
}

// runGroupCase sends reqs (of one lane) through c to a fake server that
// holds its calls until open, checks each answer, then the single calls
// and the sizes of the many calls the server saw (counts), and that the
// server is remembered as without the many call exactly when manyErr (its
// many call's error) is Unimplemented.
func runGroupCase[Req, Resp any](t *testing.T, c *coalescer[Req, Resp], cl pb.PartitionServiceClient, reqs []Req, open func(), counts func() (int, []int),
	check func(t *testing.T, i int, o answer[Resp]), wantSingle int, wantMany []int, manyErr error) {
	t.Helper()
	outs := startCalls(t, c, cl, reqs)
	open()
	for i, ch := range outs {
		check(t, i, <-ch)
	}
	waitUntil(t, laneIdle(c))
	if single, many := counts(); single != wantSingle || !reflect.DeepEqual(many, wantMany) {
		t.Fatalf("single calls %d, %s sizes %v; want %d, %v", single, c.ops.many, many, wantSingle, wantMany)
	}
	c.mu.Lock()
	remembered := c.noMany["ps1"]
	c.mu.Unlock()
	if want := status.Code(manyErr) == codes.Unimplemented; remembered != want {
		t.Fatalf("server remembered as without %s: %v, want %v", c.ops.many, remembered, want)
	}
}

// checkManyFailed checks the answers of a case whose many call fails with
// Unavailable: the first inflight calls (sent alone) succeed, the queued
// ones get the many call's error.
func checkManyFailed[Resp any](inflight int) func(t *testing.T, i int, o answer[Resp]) {
	return func(t *testing.T, i int, o answer[Resp]) {
		if i < inflight {
			if o.err != nil {
				t.Errorf("call %d: %v", i, o.err)
			}
			return
		}
		if status.Code(o.err) != codes.Unavailable {
			t.Errorf("call %d: err %v, want Unavailable", i, o.err)
		}
	}
}

// laneIdle reports whether c has forgotten every lane.
func laneIdle[Req, Resp any](c *coalescer[Req, Resp]) func() bool {
	return func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.lanes) == 0 }
}

// testCallerGivesUp: a queued request whose caller's context ends returns
// at once with the status a call would have returned, and is left out of
// the many call; the others are answered. reqs (at least two) and gone
// are of one lane; open answers the calls held by the fake server, counts
// says its single calls and the sizes of its many calls.
func testCallerGivesUp[Req, Resp any](t *testing.T, c *coalescer[Req, Resp], cl pb.PartitionServiceClient, reqs []Req, gone Req, open func(), counts func() (int, []int)) {
	queued := len(reqs) - c.ops.maxCalls // besides the abandoned one
	outs := startCalls(t, c, cl, reqs)
	ctx, cancel := context.WithCancel(context.Background())
	goneErr := make(chan error, 1)
	go func() {
		_, err := c.do(ctx, "ps1", cl, gone)
		goneErr <- err
	}()
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(laneOf(c, gone).queue) == queued+1
	})
	cancel()
	if err := <-goneErr; status.Code(err) != codes.Canceled {
		t.Fatalf("abandoned call: err %v, want Canceled", err)
	}
	open()
	for i, ch := range outs {
		if o := <-ch; o.err != nil {
			t.Errorf("call %d: %v", i, o.err)
		}
	}
	waitUntil(t, laneIdle(c))
	// The abandoned request was dropped from its batch: the others queued
	// went out as one many call, or alone if only one.
	wantSingle, wantMany := c.ops.maxCalls, []int{queued}
	if queued == 1 {
		wantSingle, wantMany = len(reqs), nil
	}
	if single, many := counts(); single != wantSingle || !reflect.DeepEqual(many, wantMany) {
		t.Fatalf("single calls %d, %s sizes %v; want %d, %v", single, c.ops.many, many, wantSingle, wantMany)
	}
}

// testManyAnswerMalformed: a many-call result with neither a response nor
// an error, or with an undecodable status, is an unknown outcome
// (Unavailable, UNAVAILABLE, retried), not a success or a final error.
// result makes a result carrying status bytes (nil: none).
func testManyAnswerMalformed[R any, Resp comparable](t *testing.T, result func(status []byte) R, conv func(R) (Resp, error)) {
	okStatus, _ := proto.Marshal(status.New(codes.OK, "").Proto())
	tests := []struct {
		name   string
		status []byte
	}{
		{"neither response nor status", nil},
		{"status OK", okStatus},
		{"undecodable status", []byte{0xff, 0xff, 0xff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var zero Resp
			resp, err := conv(result(tt.status))
			if resp != zero || status.Code(err) != codes.Unavailable || !rpcerr.Is(err, rpcerr.ReasonUnavailable) {
				t.Fatalf("answer = %v, %v; want an unknown outcome (Unavailable, UNAVAILABLE)", resp, err)
			}
		})
	}
}
