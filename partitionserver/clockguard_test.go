package partitionserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
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
	applied := rep.group.Spans()[0].State().GetAppliedIndex()
	refused := counterValue(t, clockSkewRefusedTotal.WithLabelValues(s.id))
	err := write("skewed")
	if info := rpcerr.Parse(err); info.Code != codes.ResourceExhausted || info.Reason != rpcerr.ReasonServerBusy || !strings.Contains(err.Error(), "2m0s") {
		t.Fatalf("write while skewed: %v; want ResourceExhausted/ServerBusy naming the offset", err)
	}
	if got := rep.group.Spans()[0].State().GetAppliedIndex(); got != applied {
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

// TestClockStepHeld is a step of the wall clock between two heartbeats:
// the stamps are held to the time line the master last confirmed (at most
// the threshold ahead of it) from the first stamp after the step, by the
// answer to a heartbeat that left before it, by answers that do not show
// the master counted it, and by answers in which the master cannot tell
// (not skewed, but the offset from the others as large as the step); they
// carry the wall clock again once answers cover it with an offset from the
// others within the threshold (the offset moved with the step: a clock set
// right; or heartbeats of clockStepConfirm: every clock moved alike, or
// the monotonic clock stood still), or at once with a master without the
// clock rule (bound 0); a step back, or within the threshold, is not held.
func TestClockStepHeld(t *testing.T) {
	answer := func(skewed bool, offset, bound time.Duration) *pb.HeartbeatResponse {
		return &pb.HeartbeatResponse{ClockSkewed: skewed, ClockOffsetNanos: int64(offset), MaxClockOffsetNanos: int64(bound)}
	}
	type heartbeat struct{ wall, mono time.Time }
	setup := func() (*clockGuard, *stepClock, func(later time.Duration) heartbeat) {
		c := &stepClock{}
		g := newClockGuard(slog.New(slog.DiscardHandler), c.now)
		// A heartbeat sent later by the monotonic clock (and the wall
		// clock with it).
		return g, c, func(later time.Duration) heartbeat { return heartbeat{c.now().Add(later), time.Now().Add(later)} }
	}
	// ahead is how far the stamp runs ahead of the monotonic clock's
	// time line (the wall clock less the step).
	ahead := func(g *clockGuard) time.Duration { return g.stamp().Sub(time.Now().Round(0)) }
	held := func(t *testing.T, g *clockGuard, what string) {
		t.Helper()
		if a := ahead(g); a > defaultClockBound+time.Second {
			t.Fatalf("%s: stamp %v ahead of the confirmed time line, want at most %v", what, a, defaultClockBound)
		}
	}
	wallClock := func(t *testing.T, g *clockGuard, c *stepClock, what string) {
		t.Helper()
		want := time.Duration(c.step.Load())
		if a := ahead(g); a < want-time.Second || a > want+time.Second {
			t.Fatalf("%s: stamp %v ahead, want the wall clock's %v", what, a, want)
		}
	}
	const bound = 10 * time.Second

	t.Run("a clock set right", func(t *testing.T) {
		g, c, send := setup()
		c.step.Store(int64(-5 * time.Minute))
		hb := send(0)
		// The master cannot tell yet (not skewed), but measures it behind.
		g.set(answer(false, -5*time.Minute, bound), time.Now(), hb.wall, hb.mono)
		wallClock(t, g, c, "behind")
		before := send(0) // left before the step, answered after it
		c.step.Store(0)
		held(t, g, "right after the step")
		g.set(answer(false, -5*time.Minute, bound), time.Now(), before.wall, before.mono)
		held(t, g, "answered for a heartbeat sent before the step")
		hb = send(0)
		g.set(answer(false, -5*time.Minute, bound), time.Now(), hb.wall, hb.mono)
		held(t, g, "answered before the master counted it")
		hb = send(0)
		g.set(answer(false, 0, bound), time.Now(), hb.wall, hb.mono)
		wallClock(t, g, c, "the master moved its offset with the step, in bounds")
	})
	t.Run("the master cannot tell", func(t *testing.T) {
		g, c, send := setup()
		c.step.Store(int64(5 * time.Minute))
		held(t, g, "after the step")
		for _, later := range []time.Duration{0, time.Second, clockStepConfirm, 2 * clockStepConfirm} {
			hb := send(later)
			g.set(answer(false, 5*time.Minute, bound), time.Now(), hb.wall, hb.mono)
			held(t, g, fmt.Sprintf("answers not skewed, offset 5m, %v after the first", later))
		}
	})
	t.Run("every clock moved alike, or a host resumed", func(t *testing.T) {
		// Its wall clock agrees with the others' (the master's offset for
		// it does not move), its monotonic clock stood still.
		g, c, send := setup()
		c.step.Store(int64(5 * time.Minute))
		hb := send(0)
		g.set(answer(false, 0, bound), time.Now(), hb.wall, hb.mono)
		held(t, g, "the first answer")
		hb = send(clockStepConfirm - time.Second)
		g.set(answer(false, 0, bound), time.Now(), hb.wall, hb.mono)
		held(t, g, "answers short of the confirmation span")
		hb = send(clockStepConfirm)
		g.set(answer(false, 0, bound), time.Now(), hb.wall, hb.mono)
		wallClock(t, g, c, "answers in bounds over the confirmation span")
	})
	t.Run("judged skewed by the master, then healed", func(t *testing.T) {
		g, c, send := setup()
		c.step.Store(int64(2 * time.Minute))
		held(t, g, "after the step")
		hb := send(0)
		g.set(answer(true, 2*time.Minute, bound), time.Now(), hb.wall, hb.mono)
		if err := g.admit("s", time.Now()); err == nil {
			t.Fatal("skewed: admitted")
		}
		held(t, g, "skewed")
		c.step.Store(0)
		hb = send(0)
		g.set(answer(false, 0, bound), time.Now(), hb.wall, hb.mono)
		wallClock(t, g, c, "healed")
	})
	t.Run("a master without the clock rule", func(t *testing.T) {
		g, c, send := setup()
		c.step.Store(int64(5 * time.Minute))
		held(t, g, "after the step")
		hb := send(0)
		g.set(&pb.HeartbeatResponse{}, time.Now(), hb.wall, hb.mono)
		wallClock(t, g, c, "answered by a master without the clock rule")
	})
	t.Run("back, or within the threshold", func(t *testing.T) {
		g, c, _ := setup()
		c.step.Store(int64(-5 * time.Minute))
		wallClock(t, g, c, "a step back")
		c.step.Store(int64(defaultClockBound - time.Second))
		wallClock(t, g, c, "a step within the threshold")
	})
}

// TestClockStepNotStamped: a range leader whose wall clock is set five
// minutes ahead, its master out of reach (no answer can confirm it),
// stamps its next writes at most the threshold ahead of the time it had,
// and its range's log clock with them; once the clock is set back the
// stamps follow it again.
func TestClockStepNotStamped(t *testing.T) {
	c := &stepClock{}
	s := startedServerWith(t, func(cfg *Config) { cfg.ClockNow = c.now })
	const id = 51
	_, v := leadingRangeWithWrites(t, s, id, 1, 1)
	write := func(rk string) time.Time {
		t.Helper()
		op := &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: rk,
			Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: "p", RowKey: rk})}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := v.Write(ctx, &pb.WriteRequest{RangeId: id, Generation: 1, Ops: []*pb.EntityOp{op}, RequestId: []byte("id-" + rk)})
		if err != nil {
			t.Fatalf("write %s: %v", rk, err)
		}
		return time.Unix(0, resp.GetTimestampUnixNano())
	}
	write("before")
	c.step.Store(int64(5 * time.Minute))
	for i := range 3 {
		if ts := write(fmt.Sprintf("stepped-%d", i)); ts.Sub(time.Now()) > defaultClockBound+time.Second {
			t.Fatalf("write after the step stamped %v ahead, want at most %v", ts.Sub(time.Now()).Round(time.Second), defaultClockBound)
		}
	}
	c.step.Store(0)
	if ts := write("back"); ts.Sub(time.Now()) > defaultClockBound+time.Second {
		t.Fatalf("write after the clock was set back stamped %v ahead", ts.Sub(time.Now()).Round(time.Second))
	}
}

// TestClockSetRightAfterStepBack: a clock set back (answers in bounds
// while the master's window still hid it, then refused), then set right:
// the stamps carry the wall clock again from the first answer in bounds
// that measured the new reading, not after clockStepConfirm (the refusing
// answers gave the master's figure for the baseline's clock). From the
// session's review.
func TestClockSetRightAfterStepBack(t *testing.T) {
	c := &stepClock{}
	g := newClockGuard(slog.New(slog.DiscardHandler), c.now)
	const bound = 10 * time.Second
	answer := func(skewed bool, offset time.Duration) {
		g.set(&pb.HeartbeatResponse{ClockSkewed: skewed, ClockOffsetNanos: int64(offset), MaxClockOffsetNanos: int64(bound)},
			time.Now(), c.now(), time.Now())
	}
	answer(false, 0)
	c.step.Store(int64(-2 * time.Minute))
	answer(false, 0) // the master's window still hides the step back
	answer(true, -2*time.Minute)
	c.step.Store(0)
	answer(false, 0)
	if a := g.stamp().Sub(time.Now().Round(0)); a < -time.Second {
		t.Fatalf("stamp %v behind the wall clock after an answer in bounds that measured it, want the wall clock", a)
	}
}

// TestClockStampBaselineNotTorn: stamps taken while answers move the
// baseline between readings two minutes apart (each pair consistent, no
// step) are never held: the baseline is one number. From the session's
// review.
func TestClockStampBaselineNotTorn(t *testing.T) {
	c := &stepClock{}
	g := newClockGuard(slog.New(slog.DiscardHandler), c.now)
	ok := &pb.HeartbeatResponse{MaxClockOffsetNanos: int64(10 * time.Second)}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			wall, mono := c.now(), time.Now()
			if i%2 == 0 {
				wall, mono = wall.Add(-2*time.Minute), mono.Add(-2*time.Minute)
			}
			g.set(ok, time.Now(), wall, mono)
		}
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if a := g.stamp().Sub(time.Now().Round(0)); a < -time.Second {
			t.Fatalf("no step, stamp held %v behind the wall clock", -a)
		}
	}
}
