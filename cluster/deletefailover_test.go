package cluster_test

import (
	"net/http"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/frontend"
	"tablestore/internal/failpoint"
	"tablestore/partitionserver"
)

// TestDeletedTableFreezeSurvivesMasterFailover: a delete whose range
// cannot freeze (two of its three replicas cut off; the other two servers
// could host a new table) answers 500
// OperationTimedOut, and the leading master then steps down. The new
// leader refuses a create of the name (409 TableBeingDeleted) and, once
// the range can freeze, freezes it and frees the name. Before, the
// pending freeze and the refusal lived in the deposed leader's memory:
// the new leader created the table at once, while the old table's range
// could still serve a front-end whose map is behind.
func TestDeletedTableFreezeSurvivesMasterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, err := cluster.Start(cluster.Options{
		Masters: 3, Servers: 5, Frontends: 1, DataDir: t.TempDir(),
		// The table a span of an anchor group (the masters' default):
		// a span whose group's followers were cut off before they
		// applied its add answered "not hosted" on a majority, and the
		// delete took that for gone (204, nothing frozen).
		AwaitHomeGroup: true,
		// The servers' own collection of a deleted table's replicas stays
		// out of the test's few seconds.
		TuneServer:   func(cfg *partitionserver.Config) { cfg.HeartbeatInterval = 10 * time.Second },
		TuneFrontend: func(cfg *frontend.Config) { cfg.RequestTimeout = 3 * time.Second },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := clustertest.Context(t, 60*time.Second)
	sc := noRetries(t, c, 0)
	failpoint.Enable("partitionserver/delete-replica/refuse", nil)
	t.Cleanup(func() { failpoint.Disable("partitionserver/delete-replica/refuse") })

	if _, err := sc.CreateTable(ctx, "slow", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.NewClient("slow").AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"before"}`), nil); err != nil {
		t.Fatal(err)
	}
	// Two of the table's replicas.
	var cut []int
	for _, d := range clustertest.LeaderOf(t, c).PartitionMap().GetRanges() {
		if d.GetTable() != "slow" {
			continue
		}
		for _, rep := range d.GetReplicas()[1:] {
			for i, n := range c.Servers {
				if n.Server.ID() == rep.GetServerId() {
					cut = append(cut, i)
				}
			}
		}
	}
	if len(cut) != 2 {
		t.Fatalf("servers to cut off: %v, want two of the table's replicas", cut)
	}
	for _, i := range cut {
		c.IsolateServer(i, true)
	}
	isolated := true
	heal := func() {
		if isolated {
			isolated = false
			for _, i := range cut {
				c.IsolateServer(i, false)
			}
		}
	}
	defer heal()
	if _, err := sc.DeleteTable(ctx, "slow", nil); !clustertest.AzureCode(err, http.StatusInternalServerError, "OperationTimedOut") {
		t.Fatalf("delete of a table whose range cannot freeze: %v, want 500 OperationTimedOut", err)
	}
	old := -1
	for i, m := range c.Masters {
		if m.Server.IsLeader() {
			old = i
		}
	}
	if old < 0 {
		t.Fatal("no master leads")
	}
	if err := c.Masters[old].Server.StepDown(); err != nil {
		t.Fatalf("step down: %v", err)
	}
	clustertest.WaitFor(t, 10*time.Second, "another master to lead", func() bool {
		for i, m := range c.Masters {
			if i != old && m.Server.IsLeader() {
				return true
			}
		}
		return false
	})
	// The front-end may reach the deposed master first: it answers
	// NotLeader, and the front-end asks the new one.
	clustertest.WaitFor(t, 10*time.Second, "the create answered by the new leader", func() bool {
		_, err := sc.CreateTable(ctx, "slow", nil)
		if err == nil || clustertest.AzureCode(err, http.StatusConflict, "TableAlreadyExists") {
			t.Fatalf("the new leader created the table while the deleted table's range may serve (%v)", err)
		}
		if !clustertest.AzureCode(err, http.StatusConflict, "TableBeingDeleted") {
			t.Logf("create: %v", err)
			return false
		}
		return true
	})
	heal()
	clustertest.WaitFor(t, 20*time.Second, "the name to be free", func() bool {
		_, err := sc.CreateTable(ctx, "slow", nil)
		if err != nil && !clustertest.AzureCode(err, http.StatusConflict, "TableBeingDeleted") {
			t.Fatalf("create after the range froze: %v", err)
		}
		return err == nil
	})
	if _, err := sc.NewClient("slow").GetEntity(ctx, "p", "before", nil); err == nil {
		t.Error("the new table holds the deleted table's entity")
	}
}
