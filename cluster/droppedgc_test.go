package cluster_test

import (
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/partitionserver"
)

// TestDroppedTableReplicasCollected: a deleted table's replicas go from
// every server: from the live ones (the master's DeleteReplica, else their
// heartbeats), and from a server that was down during the delete once it
// is back (its heartbeat's answer no longer lists the table as live).
func TestDroppedTableReplicasCollected(t *testing.T) {
	clustertest.BesideOneOther(t)
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), TuneMaster: clustertest.SoleMasterElects,
		TuneServer: func(cfg *partitionserver.Config) { cfg.HeartbeatInterval = 200 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 60*time.Second)
	if _, err := sc.CreateTable(ctx, "gone", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.NewClient("gone").AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatal(err)
	}
	var rid uint64
	for _, d := range c.Masters[0].Server.PartitionMap().GetRanges() {
		if d.GetTable() == "gone" {
			rid = d.GetRangeId()
		}
	}
	if err := c.StopServer(2); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.DeleteTable(ctx, "gone", nil); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 5*time.Second, "the live servers to drop the replicas", func() bool {
		return c.Servers[0].Server.ReplicaState(rid) == "absent" && c.Servers[1].Server.ReplicaState(rid) == "absent"
	})
	if err := c.RestartServer(2); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted: %s", c.Servers[2].Server.ReplicaState(rid))
	clustertest.WaitFor(t, 10*time.Second, "the restarted server to drop its replica", func() bool {
		return c.Servers[2].Server.ReplicaState(rid) == "absent"
	})
}
