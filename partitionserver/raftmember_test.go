package partitionserver

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// testRaftConfig is a raft member's config for the tests that run real
// hashicorp members over the group transport on in-memory stores: timeouts
// of tick (heartbeat and election; lease half of it unless lease is set),
// snapshots only when a test asks, keeping trailing entries when it does.
func testRaftConfig(id string, tick, lease time.Duration, trailing uint64) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(id)
	if lease == 0 {
		lease = tick / 2
	}
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = tick, tick, lease
	c.CommitTimeout = 10 * time.Millisecond
	c.SnapshotThreshold, c.SnapshotInterval, c.TrailingLogs = 1<<30, time.Hour, trailing
	c.LogLevel = "ERROR"
	return c
}

// startTestLeader bootstraps a one-voter member on tr with in-memory
// stores and waits (up to 20 s: a loaded machine) until it leads. The
// member is shut down when the test ends.
func startTestLeader(t *testing.T, cfg *raft.Config, tr raft.Transport) (*raft.Raft, *raft.InmemStore, *raft.InmemSnapshotStore) {
	t.Helper()
	logs, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	boot := raft.Configuration{Servers: []raft.Server{{ID: cfg.LocalID, Address: tr.LocalAddr()}}}
	if err := raft.BootstrapCluster(cfg, logs, logs, snaps, tr, boot); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(cfg, &countFSM{}, logs, logs, snaps, tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown().Error() })
	for deadline := time.Now().Add(20 * time.Second); r.State() != raft.Leader; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the bootstrapped member never led")
		}
	}
	return r, logs, snaps
}
