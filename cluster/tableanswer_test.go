package cluster_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/internal/logging"
	"tablestore/partitionserver"
)

// TestTableAnswerFromDeposedMaster: the leading master has read its answer
// to a front-end's CreateTable (DeleteTable), and before the answer
// arrives it loses the leadership, the new leader deletes the table
// (creates it again) for another front-end, and the first front-end's map
// watch, now on the new leader, brings it that change. The old master's
// answer then says what was true before: the front-end must keep what its
// watch brought. Before, it applied the answer because it came from
// another master (whose versions do not compare), and listed the deleted
// table (did not list the re-created one) until a whole map happened to
// replace its map; nothing in a quiet cluster does.
func TestTableAnswerFromDeposedMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, err := cluster.Start(cluster.Options{
		Masters: 3, Servers: 3, Frontends: 2, DataDir: t.TempDir(), Logger: logging.FromEnv(""),
		TuneServer: func(cfg *partitionserver.Config) { cfg.HeartbeatInterval = 200 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := clustertest.Context(t, 60*time.Second)
	a, b := clustertest.ServiceClient(t, c, 0), clustertest.ServiceClient(t, c, 1)
	held := func(name string) bool { return frontendHolds(ctx, t, c, 0, name) }
	listed := func(sc *aztables.ServiceClient, name string) bool { return tableListed(ctx, t, sc, name) }
	// depose runs in the leader's handler, its answer read: the leader
	// steps down and another master leads.
	depose := func() {
		old := -1
		for i, m := range c.Masters {
			if m.Server.IsLeader() {
				old = i
			}
		}
		if old < 0 {
			t.Error("no master leads while one answers")
			return
		}
		if err := c.Masters[old].Server.StepDown(); err != nil {
			t.Errorf("step down: %v", err)
		}
		clustertest.WaitFor(t, 10*time.Second, "another master to lead", func() bool {
			for i, m := range c.Masters {
				if i != old && m.Server.IsLeader() {
					return true
				}
			}
			return false
		})
	}
	// hook arms point to run fn once, in the first handler that gets there.
	hook := func(point string, fn func()) {
		var calls atomic.Int32
		failpoint.Enable(point, func() error {
			if calls.Add(1) == 1 {
				fn()
			}
			return nil
		})
		t.Cleanup(func() { failpoint.Disable(point) })
	}

	t.Run("create", func(t *testing.T) {
		const name = "deleted"
		hook("master/create-table/after-read", func() {
			// Front-end 0's watch, on the old leader, delivers the table.
			clustertest.WaitFor(t, 10*time.Second, "front-end 0 to hold the new table", func() bool { return held(name) })
			depose()
			if _, err := b.DeleteTable(context.Background(), name, nil); err != nil {
				t.Errorf("delete through front-end 1: %v", err)
			}
			// Only a map from the new leader can bring it the deletion.
			clustertest.WaitFor(t, 10*time.Second, "front-end 0 to drop the deleted table", func() bool { return !held(name) })
		})
		if _, err := a.CreateTable(ctx, name, nil); err != nil {
			t.Fatalf("create: %v", err)
		}
		failpoint.Disable("master/create-table/after-read")
		if listed(b, name) {
			t.Fatalf("front-end 1 lists deleted table %s", name)
		}
		if listed(a, name) {
			t.Fatalf("front-end 0 lists deleted table %s after the deposed master's answer to its create", name)
		}
	})

	t.Run("delete", func(t *testing.T) {
		const name = "recreated"
		if _, err := a.CreateTable(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		hook("master/delete-table/after-read", func() {
			clustertest.WaitFor(t, 10*time.Second, "front-end 0 to drop the deleted table", func() bool { return !held(name) })
			depose()
			if _, err := b.CreateTable(context.Background(), name, nil); err != nil {
				t.Errorf("create again through front-end 1: %v", err)
			}
			clustertest.WaitFor(t, 10*time.Second, "front-end 0 to hold the table created again", func() bool { return held(name) })
		})
		if _, err := a.DeleteTable(ctx, name, nil); err != nil {
			t.Fatalf("delete: %v", err)
		}
		failpoint.Disable("master/delete-table/after-read")
		if !listed(b, name) {
			t.Fatalf("front-end 1 does not list table %s created again", name)
		}
		if !listed(a, name) {
			t.Fatalf("front-end 0 does not list table %s created again, after the deposed master's answer to its delete", name)
		}
	})
}
