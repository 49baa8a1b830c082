package partitionserver

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/edm"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

func skewedAnswer(skewed bool, offset time.Duration) *pb.HeartbeatResponse {
	return &pb.HeartbeatResponse{ClockSkewed: skewed, ClockOffsetNanos: int64(offset), MaxClockOffsetNanos: int64(10 * time.Second)}
}

// TestClockGuard is the verdict's life: refused while the last answer
// says skewed and is younger than clockVerdictTTL, admitted once an
// answer clears it or the verdict expires unconfirmed, and refused again
// on a new verdict.
func TestClockGuard(t *testing.T) {
	g := newClockGuard(slog.New(slog.NewTextHandler(io.Discard, nil)))
	now := time.Now()
	if err := g.admit("s", now); err != nil {
		t.Fatalf("no verdict yet: %v", err)
	}
	// Skewed by less than clockRefuseOver: the leaderships move off,
	// writes go on.
	g.set(skewedAnswer(true, 45*time.Second), now)
	if err := g.admit("s", now); err != nil {
		t.Fatalf("skewed by 45s: %v, want admitted (refused only past %v)", err, clockRefuseOver)
	}
	g.set(skewedAnswer(true, 75*time.Second), now)
	err := g.admit("s", now.Add(clockVerdictTTL-time.Millisecond))
	info := rpcerr.Parse(err)
	if info.Code != codes.ResourceExhausted || info.Reason != rpcerr.ReasonServerBusy ||
		!strings.Contains(err.Error(), "1m15s") || !strings.Contains(err.Error(), "10s") {
		t.Fatalf("skewed: %v; want ResourceExhausted/ServerBusy naming 1m15s and 10s", err)
	}
	g.set(skewedAnswer(false, time.Second), now.Add(time.Second))
	if err := g.admit("s", now.Add(time.Second)); err != nil {
		t.Fatalf("cleared: %v", err)
	}
	g.set(skewedAnswer(true, -2*time.Minute), now.Add(2*time.Second))
	if err := g.admit("s", now.Add(3*time.Second)); err == nil {
		t.Fatal("skewed again: admitted")
	}
	if err := g.admit("s", now.Add(2*time.Second+clockVerdictTTL)); err != nil {
		t.Fatalf("verdict %v old: %v", clockVerdictTTL, err)
	}
	if err := g.admit("s", now.Add(3*time.Second)); err != nil {
		t.Fatalf("after the expiry: %v", err)
	}
}

// TestClockSkewRefusesWrites has a range leader told by the master that
// its clock is off: client writes are refused with 503 ServerBusy before
// the log (nothing of them applied), counted, reads go on, and writes are
// taken again once an answer clears it and once a verdict expires.
func TestClockSkewRefusesWrites(t *testing.T) {
	s := startedServer(t)
	const id = 49
	rep, v := leadingRangeWithWrites(t, s, id, 1, 1)
	write := func(rk string) error {
		op := &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: rk,
			Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: "p", RowKey: rk})}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := v.Write(ctx, &pb.WriteRequest{RangeId: id, Generation: 1, Ops: []*pb.EntityOp{op}, RequestId: []byte("id-" + rk)})
		return err
	}
	if err := write("before"); err != nil {
		t.Fatalf("write before: %v", err)
	}

	s.clock.set(skewedAnswer(true, 2*time.Minute), time.Now())
	applied := rep.fsm.State().GetAppliedIndex()
	refused := counterValue(t, clockSkewRefusedTotal.WithLabelValues(s.id))
	err := write("skewed")
	if info := rpcerr.Parse(err); info.Code != codes.ResourceExhausted || info.Reason != rpcerr.ReasonServerBusy || !strings.Contains(err.Error(), "2m0s") {
		t.Fatalf("write while skewed: %v; want ResourceExhausted/ServerBusy naming the offset", err)
	}
	if got := rep.fsm.State().GetAppliedIndex(); got != applied {
		t.Fatalf("applied index %d after the refused write, was %d: it reached the log", got, applied)
	}
	if got := counterValue(t, clockSkewRefusedTotal.WithLabelValues(s.id)); got != refused+1 {
		t.Fatalf("refusals counted %v, want %v", got, refused+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := v.Get(ctx, &pb.GetRequest{RangeId: id, Generation: 1, PartitionKey: "p", RowKey: "before"}); err != nil {
		t.Fatalf("read while skewed: %v", err)
	}

	s.clock.set(skewedAnswer(false, 0), time.Now())
	if err := write("cleared"); err != nil {
		t.Fatalf("write once cleared: %v", err)
	}
	s.clock.set(skewedAnswer(true, 2*time.Minute), time.Now().Add(-clockVerdictTTL))
	if err := write("expired"); err != nil {
		t.Fatalf("write with a verdict %v old: %v", clockVerdictTTL, err)
	}
}
