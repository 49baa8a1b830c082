package partitionserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
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
	g := newClockGuard(slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	now := time.Now()
	if err := g.admit("s", now); err != nil {
		t.Fatalf("no verdict yet: %v", err)
	}
	// Skewed by less than clockRefuseOver: the leaderships move off,
	// writes go on.
	g.set(skewedAnswer(true, 45*time.Second), now, now, now)
	if err := g.admit("s", now); err != nil {
		t.Fatalf("skewed by 45s: %v, want admitted (refused only past %v)", err, clockRefuseOver)
	}
	g.set(skewedAnswer(true, 75*time.Second), now, now, now)
	err := g.admit("s", now.Add(clockVerdictTTL-time.Millisecond))
	info := rpcerr.Parse(err)
	if info.Code != codes.ResourceExhausted || info.Reason != rpcerr.ReasonServerBusy ||
		!strings.Contains(err.Error(), "1m15s") || !strings.Contains(err.Error(), "10s") {
		t.Fatalf("skewed: %v; want ResourceExhausted/ServerBusy naming 1m15s and 10s", err)
	}
	g.set(skewedAnswer(false, time.Second), now.Add(time.Second), now.Add(time.Second), now.Add(time.Second))
	if err := g.admit("s", now.Add(time.Second)); err != nil {
		t.Fatalf("cleared: %v", err)
	}
	g.set(skewedAnswer(true, -2*time.Minute), now.Add(2*time.Second), now.Add(2*time.Second), now.Add(2*time.Second))
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

	s.clock.set(skewedAnswer(true, 2*time.Minute), time.Now(), s.clockNow(), time.Now())
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

	s.clock.set(skewedAnswer(false, 0), time.Now(), s.clockNow(), time.Now())
	if err := write("cleared"); err != nil {
		t.Fatalf("write once cleared: %v", err)
	}
	s.clock.set(skewedAnswer(true, 2*time.Minute), time.Now().Add(-clockVerdictTTL), s.clockNow(), time.Now())
	if err := write("expired"); err != nil {
		t.Fatalf("write with a verdict %v old: %v", clockVerdictTTL, err)
	}
}

// stepClock is a wall clock a test sets apart from the monotonic one: the
// wall reading is the monotonic reading's plus the step.
type stepClock struct{ step atomic.Int64 }

func (c *stepClock) now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.step.Load()))
}

// TestClockStepGuard is a step of the wall clock between two heartbeats:
// refused from the first write after it, before any answer; still refused
// by the answer to a heartbeat that left before it, and by an answer that
// does not show the master saw it; taken once an answer covers it (the
// master moved its offset with it and found it in bounds) or once it has
// waited clockVerdictTTL unconfirmed; a step back is never refused, nor a
// step within the threshold; with a master without the clock rule (bound
// 0) the first answer to a heartbeat carrying the step covers it.
func TestClockStepGuard(t *testing.T) {
	answer := func(skewed bool, offset, bound time.Duration) *pb.HeartbeatResponse {
		return &pb.HeartbeatResponse{ClockSkewed: skewed, ClockOffsetNanos: int64(offset), MaxClockOffsetNanos: int64(bound)}
	}
	type heartbeat struct{ wall, mono time.Time }
	setup := func() (*clockGuard, *stepClock, func() heartbeat) {
		c := &stepClock{}
		g := newClockGuard(slog.New(slog.DiscardHandler), c.now)
		return g, c, func() heartbeat { return heartbeat{c.now(), time.Now()} }
	}
	refusedForStep := func(t *testing.T, g *clockGuard, at time.Time) {
		t.Helper()
		err := g.admit("s", at)
		if info := rpcerr.Parse(err); info.Code != codes.ResourceExhausted || info.Reason != rpcerr.ReasonServerBusy || !strings.Contains(fmt.Sprint(err), "stepped") {
			t.Fatalf("write after the step: %v; want ResourceExhausted/ServerBusy naming the step", err)
		}
	}
	admitted := func(t *testing.T, g *clockGuard, at time.Time, what string) {
		t.Helper()
		if err := g.admit("s", at); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	t.Run("covered by the master's answer", func(t *testing.T) {
		g, c, send := setup()
		hb := send()
		g.set(answer(false, 0, 10*time.Second), time.Now(), hb.wall, hb.mono)
		admitted(t, g, time.Now(), "before the step")
		before := send() // left before the step, answered after it
		c.step.Store(int64(5 * time.Minute))
		refusedForStep(t, g, time.Now())
		g.set(answer(false, 0, 10*time.Second), time.Now(), before.wall, before.mono)
		refusedForStep(t, g, time.Now())
		after := send()
		g.set(answer(false, 0, 10*time.Second), time.Now(), after.wall, after.mono)
		refusedForStep(t, g, time.Now()) // the master did not count it yet
		after = send()
		g.set(answer(false, 5*time.Minute, 10*time.Second), time.Now(), after.wall, after.mono)
		admitted(t, g, time.Now(), "the master saw the step and found the clock in bounds")
	})
	t.Run("then judged skewed by the master, and healed", func(t *testing.T) {
		g, c, send := setup()
		c.step.Store(int64(2 * time.Minute))
		refusedForStep(t, g, time.Now())
		hb := send()
		g.set(answer(true, 2*time.Minute, 10*time.Second), time.Now(), hb.wall, hb.mono)
		if err := g.admit("s", time.Now()); err == nil {
			t.Fatal("skewed: admitted")
		}
		c.step.Store(0)
		hb = send()
		g.set(answer(false, 0, 10*time.Second), time.Now(), hb.wall, hb.mono)
		admitted(t, g, time.Now(), "healed")
	})
	t.Run("unconfirmed for the verdict's life", func(t *testing.T) {
		g, c, _ := setup()
		c.step.Store(int64(5 * time.Minute))
		start := time.Now()
		refusedForStep(t, g, start)
		refusedForStep(t, g, start.Add(clockVerdictTTL-time.Second))
		admitted(t, g, start.Add(clockVerdictTTL), "unconfirmed after the verdict's life")
		admitted(t, g, start.Add(clockVerdictTTL+time.Second), "after that")
	})
	t.Run("a master without the clock rule", func(t *testing.T) {
		g, c, send := setup()
		c.step.Store(int64(5 * time.Minute))
		refusedForStep(t, g, time.Now())
		hb := send()
		g.set(&pb.HeartbeatResponse{}, time.Now(), hb.wall, hb.mono)
		admitted(t, g, time.Now(), "answered by a master without the clock rule")
	})
	t.Run("back, or within the threshold", func(t *testing.T) {
		g, c, _ := setup()
		c.step.Store(int64(-5 * time.Minute))
		admitted(t, g, time.Now(), "a step back")
		c.step.Store(int64(clockRefuseOver - time.Second))
		admitted(t, g, time.Now(), "a step within the threshold")
	})
}

// TestClockStepRefusesWritesAtOnce: a range leader whose wall clock is
// set five minutes ahead refuses client writes from the next write on,
// with no heartbeat answered in between (its master is unreachable here),
// before the log; a write after the clock is set back is taken.
func TestClockStepRefusesWritesAtOnce(t *testing.T) {
	c := &stepClock{}
	s := startedServerWith(t, func(cfg *Config) { cfg.ClockNow = c.now })
	const id = 51
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
	c.step.Store(int64(5 * time.Minute))
	applied := rep.fsm.State().GetAppliedIndex()
	err := write("stepped")
	if info := rpcerr.Parse(err); info.Code != codes.ResourceExhausted || info.Reason != rpcerr.ReasonServerBusy || !strings.Contains(fmt.Sprint(err), "stepped 5m") {
		t.Fatalf("write after the step: %v; want ResourceExhausted/ServerBusy naming the step", err)
	}
	if got := rep.fsm.State().GetAppliedIndex(); got != applied {
		t.Fatalf("applied index %d after the refused write, was %d: it reached the log", got, applied)
	}
	c.step.Store(0)
	if err := write("back"); err != nil {
		t.Fatalf("write once the clock is back: %v", err)
	}
}
