package cluster

import (
	"testing"
	"time"
)

// TestIsolatedLeader cuts the range leader off the Raft network (a network
// partition): clients keep writing through the new leader, reads never see
// stale data from the isolated one, and after healing every acknowledged
// write is there exactly once.
func TestIsolatedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	besideOneOther(t)
	c := startTuned(t, 3, quietPolicies, nil)
	sc := serviceClient(t, c, 0)
	const table = "isolated"
	tc := newTable(t, sc, table)
	w := startWorkload(t, tc, 4, spreadKeys)
	time.Sleep(300 * time.Millisecond)
	waitFor(t, 10*time.Second, "a reported range leader", func() bool { return rangeLeader(c, table) >= 0 })
	victim := rangeLeader(c, table)
	t.Logf("isolating ps%d", victim+1)
	c.IsolateServer(victim, true)
	before := w.written.Load()
	waitFor(t, 20*time.Second, "writes continuing without the isolated leader", func() bool { return w.written.Load() > before+200 })
	c.IsolateServer(victim, false)
	time.Sleep(time.Second)
	acked := w.halt()
	t.Logf("%d acknowledged, %d failed (after retries), longest pause %v", len(acked), w.failed.Load(), time.Duration(w.maxGap.Load()))
	verifyExactlyOnce(t, tc, acked)
}
