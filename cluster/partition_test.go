package cluster_test

import (
	"testing"
	"time"

	"tablestore/cluster/clustertest"
)

// TestIsolatedLeader cuts the range leader off the Raft network (a network
// partition): clients keep writing through the new leader, reads never see
// stale data from the isolated one, and after healing every acknowledged
// write is there exactly once.
func TestIsolatedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	const table = "isolated"
	tc := clustertest.NewTable(t, sc, table)
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	time.Sleep(300 * time.Millisecond)
	clustertest.WaitFor(t, 10*time.Second, "a reported range leader", func() bool { return clustertest.RangeLeader(c, table) >= 0 })
	victim := clustertest.RangeLeader(c, table)
	t.Logf("isolating ps%d", victim+1)
	c.IsolateServer(victim, true)
	before := w.Written.Load()
	clustertest.WaitFor(t, 20*time.Second, "writes continuing without the isolated leader", func() bool { return w.Written.Load() > before+200 })
	c.IsolateServer(victim, false)
	time.Sleep(time.Second)
	acked := w.Halt()
	t.Logf("%d acknowledged, %d failed (after retries), longest pause %v", len(acked), w.Failed.Load(), time.Duration(w.MaxGap.Load()))
	clustertest.VerifyExactlyOnce(t, tc, acked)
}
