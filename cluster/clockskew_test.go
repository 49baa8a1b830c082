package cluster_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	"tablestore/master"
	"tablestore/partitionserver"
)

// TestClockSkewLosesLeadership shifts the range leader's wall clock a
// minute ahead (Config.ClockNow: what its heartbeats report and what it
// stamps its write proposals with, as one host clock) while clients write: the
// master finds it more than --max-clock-offset from the other servers'
// median and moves the leadership to a follower, with cause clock-skew in
// the event, and it gets no leadership back while skewed. Leader
// balancing is off, so only the clock rule can move it. Every
// acknowledged write is there exactly once.
func TestClockSkewLosesLeadership(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	shift := map[string]*atomic.Int64{}
	for i := 1; i <= 3; i++ {
		shift[fmt.Sprintf("ps%d", i)] = new(atomic.Int64)
	}
	c := clustertest.StartTuned(t, 3, func(m *master.Config) {
		m.Policy.BalanceLeaders = false
		m.Policy.SplitLoad = 1e9 // one range
	}, func(s *partitionserver.Config) {
		d := shift[s.ID]
		s.ClockNow = func() time.Time { return time.Now().Add(time.Duration(d.Load())) }
	})
	const table = "clockskew"
	tc, mc, w, victim, id := ledUnderWrites(t, c, table)
	t.Logf("shifting the clock of %s, the range's leader, a minute ahead", id)
	shifted := time.Now()
	shift[id].Store(int64(time.Minute))
	clustertest.WaitFor(t, 30*time.Second, "the leadership off the skewed server", func() bool {
		l := clustertest.RangeLeader(c, table)
		return l >= 0 && l != victim
	})
	t.Logf("leadership moved off %s %v after its clock was shifted (%d writes failed meanwhile: a minute off is not past the refusal threshold)",
		id, time.Since(shifted).Round(time.Millisecond), w.Failed.Load())
	var msg string
	clustertest.WaitFor(t, 10*time.Second, "the clock-skew transfer's event", func() bool {
		msg = clockSkewEvent(mc, id)
		return msg != ""
	})
	t.Logf("event: %s", msg)
	before := w.Written.Load()
	clustertest.WaitFor(t, 20*time.Second, "writes after the move", func() bool { return w.Written.Load() > before+50 })
	if l := clustertest.RangeLeader(c, table); l == victim {
		t.Fatalf("the leadership went back to %s while its clock is off", id)
	}
	shift[id].Store(0)
	acked := w.Halt()
	clustertest.VerifyExactlyOnce(t, tc, acked)
}

// clockSkewEvent returns the message of a leader-transfer event off
// server with cause clock-skew ("" if none yet).
func clockSkewEvent(mc clustertest.MasterCaller, server string) string {
	return transferEvent(mc, server, "clock-skew", "clock skew")
}
