package cluster_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/frontend"
	"tablestore/internal/failpoint"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// TestDeletedTableServesNothing: Delete Table answered 204 through one
// front-end while another front-end's map watch is behind (stalled: a
// loaded machine, a slow or restarting stream), and the master's deletes
// of the table's replicas are not through yet (they are best effort and
// asynchronous; here they do not arrive). The stale front-end still
// routes the table to its old range. Before, the range's leader served
// on: a write answered 201 (and vanished with the range), a read returned
// the deleted table's entity, and after the table was created again a
// write went into the old incarnation (acknowledged, lost). Azure answers
// 404 TableNotFound once Delete Table returned; the master now freezes
// every range of the table for good through its log before it answers.
func TestDeletedTableServesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, err := cluster.Start(cluster.Options{
		Masters: 1, Servers: 3, Frontends: 2, DataDir: t.TempDir(), TuneMaster: clustertest.SoleMasterElects,
		// The servers' own collection of a deleted table's replicas
		// (live_table_ids in the heartbeat's answer) stays out of the
		// test's few seconds.
		TuneServer: func(cfg *partitionserver.Config) { cfg.HeartbeatInterval = 10 * time.Second },
		// A delete whose ranges cannot freeze is answered within it
		// (subtest unfrozen).
		TuneFrontend: func(cfg *frontend.Config) { cfg.RequestTimeout = 3 * time.Second },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := clustertest.Context(t, 60*time.Second)
	stale, fresh := noRetries(t, c, 0), clustertest.ServiceClient(t, c, 1)

	failpoint.Enable("partitionserver/delete-replica/refuse", nil)
	t.Cleanup(func() { failpoint.Disable("partitionserver/delete-replica/refuse") })
	// stallWatches holds every front-end's watch until the returned
	// release: front-end 1 learns its own delete and create from their
	// answers, front-end 0 learns nothing.
	stallWatches := func(t *testing.T) func() {
		release := make(chan struct{})
		failpoint.Enable("router/watch/before-apply", func() error {
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
			return nil
		})
		done := false
		undo := func() {
			if !done {
				done = true
				failpoint.Disable("router/watch/before-apply")
				close(release)
			}
		}
		t.Cleanup(undo)
		return undo
	}
	entity := func(pk, rk string) []byte {
		return []byte(`{"PartitionKey":"` + pk + `","RowKey":"` + rk + `","V":1}`)
	}

	t.Run("delete", func(t *testing.T) {
		if _, err := fresh.CreateTable(ctx, "gone", nil); err != nil {
			t.Fatal(err)
		}
		old := stale.NewClient("gone")
		if _, err := old.AddEntity(ctx, entity("p", "before"), nil); err != nil {
			t.Fatalf("write before the delete: %v", err)
		}
		release := stallWatches(t)
		defer release()
		if _, err := fresh.DeleteTable(ctx, "gone", nil); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := old.AddEntity(ctx, entity("p", "after"), nil); !tableNotFound(err) {
			t.Errorf("write through the stale front-end after the delete's 204: %v, want 404 TableNotFound", err)
		}
		if _, err := old.GetEntity(ctx, "p", "before", nil); !tableNotFound(err) {
			t.Errorf("read through the stale front-end after the delete's 204: %v, want 404 TableNotFound", err)
		}
		if _, err := old.NewListEntitiesPager(nil).NextPage(ctx); !tableNotFound(err) {
			t.Errorf("query through the stale front-end after the delete's 204: %v, want 404 TableNotFound", err)
		}
	})

	t.Run("recreate", func(t *testing.T) {
		if _, err := fresh.CreateTable(ctx, "again", nil); err != nil {
			t.Fatal(err)
		}
		old := stale.NewClient("again")
		if _, err := old.AddEntity(ctx, entity("p", "before"), nil); err != nil {
			t.Fatalf("write before the delete: %v", err)
		}
		release := stallWatches(t)
		defer release()
		if _, err := fresh.DeleteTable(ctx, "again", nil); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := fresh.CreateTable(ctx, "again", nil); err != nil {
			t.Fatalf("create again: %v", err)
		}
		if _, err := old.AddEntity(ctx, entity("p", "after"), nil); err != nil {
			// A refusal is no loss.
			t.Logf("write through the stale front-end refused: %v", err)
			return
		}
		if _, err := fresh.NewClient("again").GetEntity(ctx, "p", "after", nil); err != nil {
			t.Errorf("write acknowledged through the stale front-end is not in the new table: %v", err)
		}
		if _, err := fresh.NewClient("again").GetEntity(ctx, "p", "before", nil); err == nil {
			t.Errorf("the new table holds the deleted table's entity")
		}
	})

	// The range cannot freeze: two of its three replicas are cut off
	// from the third. The delete is answered 500 OperationTimedOut (it
	// may or may not have succeeded: it did, but the range may serve), a
	// create of the name 409 TableBeingDeleted until the range froze, and
	// then the name is free.
	t.Run("unfrozen", func(t *testing.T) {
		if _, err := fresh.CreateTable(ctx, "slow", nil); err != nil {
			t.Fatal(err)
		}
		old := stale.NewClient("slow")
		if _, err := old.AddEntity(ctx, entity("p", "before"), nil); err != nil {
			t.Fatalf("write before the delete: %v", err)
		}
		release := stallWatches(t)
		defer release()
		c.IsolateServer(1, true)
		c.IsolateServer(2, true)
		isolated := true
		heal := func() {
			if isolated {
				isolated = false
				c.IsolateServer(1, false)
				c.IsolateServer(2, false)
			}
		}
		defer heal()
		_, err := stale.DeleteTable(ctx, "slow", nil)
		if !clustertest.AzureCode(err, http.StatusInternalServerError, "OperationTimedOut") {
			t.Fatalf("delete of a table whose range cannot freeze: %v, want 500 OperationTimedOut", err)
		}
		_, err = stale.CreateTable(ctx, "slow", nil)
		if !clustertest.AzureCode(err, http.StatusConflict, "TableBeingDeleted") {
			t.Fatalf("create while the deleted table's range serves: %v, want 409 TableBeingDeleted", err)
		}
		heal()
		clustertest.WaitFor(t, 15*time.Second, "the name to be free", func() bool {
			_, err := stale.CreateTable(ctx, "slow", nil)
			if err != nil && !clustertest.AzureCode(err, http.StatusConflict, "TableBeingDeleted") {
				t.Fatalf("create after the range froze: %v", err)
			}
			return err == nil
		})
		if _, err := old.AddEntity(ctx, entity("p", "after"), nil); err != nil {
			t.Fatalf("write to the new table: %v", err)
		}
		if _, err := fresh.NewClient("slow").GetEntity(ctx, "p", "before", nil); err == nil {
			t.Errorf("the new table holds the deleted table's entity")
		}
	})
}

// noRetries is clustertest.ServiceClient(t, c, i) whose SDK does not retry: a
// refusal shows as itself.
func noRetries(t *testing.T, c *cluster.Cluster, i int) *aztables.ServiceClient {
	t.Helper()
	opts := &aztables.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: -1, TryTimeout: 15 * time.Second}
	sc, err := aztables.NewServiceClientFromConnectionString(c.ConnectionString(i), opts)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// tableNotFound reports whether err is Azure's 404 TableNotFound.
func tableNotFound(err error) bool {
	return clustertest.AzureCode(err, http.StatusNotFound, "TableNotFound")
}

// TestDeletedSplitTableReplicasCollected: the frozen ranges of a deleted
// table of three ranges all go at the master's DeleteReplica, without the
// servers' heartbeats. A frozen range whose left neighbour's replica is
// on the same server is kept while a merge into that neighbour may yet
// apply (fsm.ErrMergePending), so the master deletes the ranges left to
// right: deleted all at once, a range refused went only at a later
// heartbeat, one more range of the chain per heartbeat.
func TestDeletedSplitTableReplicasCollected(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, err := cluster.Start(cluster.Options{
		Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), TuneMaster: clustertest.SoleMasterElects,
		TuneServer: func(cfg *partitionserver.Config) { cfg.HeartbeatInterval = 10 * time.Second },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := clustertest.Context(t, 60*time.Second)
	sc := clustertest.ServiceClient(t, c, 0)
	if _, err := sc.CreateTable(ctx, "split", nil); err != nil {
		t.Fatal(err)
	}
	tc := sc.NewClient("split")
	for _, pk := range []string{"a", "k", "t"} {
		if _, err := tc.AddEntity(ctx, []byte(`{"PartitionKey":"`+pk+`","RowKey":"r"}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	mc := clustertest.MasterClient(t, c)
	for _, key := range []string{"t", "k"} {
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.Split(ctx, &pb.SplitRequest{Table: "split", PartitionKey: key})
			return err
		})
		if err != nil {
			t.Fatalf("split at %s: %v", key, err)
		}
	}
	var ids []uint64
	for _, d := range c.Masters[0].Server.PartitionMap().GetRanges() {
		if d.GetTable() == "split" {
			ids = append(ids, d.GetRangeId())
		}
	}
	if len(ids) != 3 {
		t.Fatalf("%d ranges after two splits, want 3", len(ids))
	}
	if _, err := sc.DeleteTable(ctx, "split", nil); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 5*time.Second, "every replica of the deleted table to go", func() bool {
		for _, s := range c.Servers {
			for _, id := range ids {
				if s.Server.ReplicaState(id) != "absent" {
					return false
				}
			}
		}
		return true
	})
}
