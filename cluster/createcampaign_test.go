package cluster_test

import (
	"sync/atomic"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/master"
	"tablestore/partitionserver"
)

// TestCreateTableCampaignsAfterHeartbeatCreate: the servers also create the
// replicas they are assigned from their heartbeats' answers, without a
// campaign. When that happens between the master's commit of a new table
// and its CreateReplica calls, the replica the master asks to campaign is
// already open as a follower; it must still campaign, or the range waits
// for an election timeout (made a minute long here, so only the campaign
// can elect a leader within the test's deadline).
func TestCreateTableCampaignsAfterHeartbeatCreate(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// One Raft group per table: the campaign checked is a new group's
	// (a span added to an anchor group is never bootstrapped), and an
	// anchor group started in the servers' read lease would wait out the
	// minute-long election timeout.
	c := clustertest.StartTuned(t, 3, func(m *master.Config) { clustertest.QuietPolicies(m); m.TableGroups = false }, func(s *partitionserver.Config) {
		s.RaftHeartbeatTimeout = time.Minute
		s.RaftElectionTimeout = time.Minute
		s.RaftLeaderLease = 30 * time.Second
		s.QuiesceAfter = 0
	})
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 3*time.Minute)
	const table = "heartbeatfirst"
	// Hold the master after its commit until every server opened a replica
	// from its heartbeat.
	var held atomic.Bool
	failpoint.Enable("master/create-table/after-commit", func() error {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var id uint64
			for _, r := range c.Masters[0].Server.PartitionMap().GetRanges() {
				if r.GetTable() == table {
					id = r.GetRangeId()
				}
			}
			open := 0
			for _, n := range c.Servers {
				if id != 0 && n.Server.ReplicaState(id) == "active" {
					open++
				}
			}
			if open == len(c.Servers) {
				held.Store(true)
				return nil
			}
		}
		return nil
	})
	defer failpoint.Disable("master/create-table/after-commit")
	tc := clustertest.NewTable(t, sc, table)
	if !held.Load() {
		t.Fatal("the servers did not create the replicas from their heartbeats while the master waited")
	}
	clustertest.WaitFor(t, 20*time.Second, "a leader of the new range", func() bool { return clustertest.RangeLeader(c, table) >= 0 })
	if _, err := tc.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatal(err)
	}
}
