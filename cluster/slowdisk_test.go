package cluster_test

import (
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/masterclient"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// TestSlowDiskLosesLeadership slows the state-file commits of the range's
// leader by 150 ms (the chaos fault, on one server only) while clients
// write: the master finds the server slow from its heartbeats' commit
// medians and moves the leadership to a healthy follower, with cause
// slow-disk in the event. Leader balancing is off, so only the slow-disk
// rule can move it. Every acknowledged write is there exactly once.
func TestSlowDiskLosesLeadership(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTuned(t, 3, func(m *master.Config) {
		m.Policy.BalanceLeaders = false
		m.Policy.SplitLoad = 1e9 // one range
	}, nil)
	const table = "slowdisk"
	tc, mc, w, victim, id := ledUnderWrites(t, c, table)
	t.Logf("slowing the disk of %s, the range's leader", id)
	slowed := time.Now()
	c.SlowServerDisk(victim, 150*time.Millisecond)
	// The window holds 10 s of healthy commits: the median turns once the
	// slow ones are half of it (about 7 s), then a heartbeat and a policy
	// pass. Generous for a loaded machine.
	clustertest.WaitFor(t, 90*time.Second, "the leadership off the slow server", func() bool {
		l := clustertest.RangeLeader(c, table)
		return l >= 0 && l != victim
	})
	t.Logf("leadership moved off %s %v after its disk slowed", id, time.Since(slowed).Round(time.Millisecond))
	c.SlowServerDisk(victim, 0)
	var cause string
	clustertest.WaitFor(t, 10*time.Second, "the slow-disk transfer's event", func() bool {
		cause = slowDiskEvent(mc, id)
		return cause != ""
	})
	t.Logf("event: %s", cause)
	acked := w.Halt()
	clustertest.VerifyExactlyOnce(t, tc, acked)
}

// slowDiskEvent returns the message of a leader-transfer event off server
// with cause slow-disk ("" if none yet).
func slowDiskEvent(mc clustertest.MasterCaller, server string) string {
	return transferEvent(mc, server, "slow-disk", "slow disk")
}

// transferEvent returns the message of the last leader-transfer event off
// server with the given cause whose message holds phrase ("" if none yet).
func transferEvent(mc clustertest.MasterCaller, server, cause, phrase string) string {
	var msg string
	for _, e := range clustertest.MasterEvents(mc) {
		if e.GetKind() == pb.EventKind_EVENT_KIND_LEADER_TRANSFER && e.GetCause() == cause &&
			len(e.GetServers()) > 0 && e.GetServers()[0] == server && strings.Contains(e.GetMessage(), phrase) {
			msg = e.GetMessage()
		}
	}
	return msg
}

// ledUnderWrites creates table on c, starts two writers over it and waits
// for its range's leader and the first writes: the table's client, a
// master client, the workload, and the leader's index and id.
func ledUnderWrites(t *testing.T, c *cluster.Cluster, table string) (*aztables.Client, *masterclient.Client, *clustertest.Workload, int, string) {
	t.Helper()
	tc := clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), table)
	mc := clustertest.MasterClient(t, c)
	w := clustertest.StartWorkload(t, tc, 2, clustertest.SpreadKeys)
	clustertest.WaitFor(t, 20*time.Second, "a reported range leader", func() bool { return clustertest.RangeLeader(c, table) >= 0 })
	clustertest.WaitFor(t, 20*time.Second, "writes", func() bool { return w.Written.Load() > 50 })
	victim := clustertest.RangeLeader(c, table)
	return tc, mc, w, victim, c.Servers[victim].Config.ID
}
