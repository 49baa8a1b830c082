package cluster

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"tablestore/internal/failpoint"
)

// TestTableRequestsAcrossMasterFailover: the leading master commits a
// CreateTable (then a DeleteTable) and stops before answering; the
// front-end's retry reaches the next leader, which answers from the
// replicated request record: 201 for the create (not 409, and the table
// takes writes at once), 204 for the delete (not 404).
func TestTableRequestsAcrossMasterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startCluster(t, 3, 3)
	sc := serviceClient(t, c, 0)
	ctx := ctxT(t, 90*time.Second)
	if _, err := sc.CreateTable(ctx, "warmup", nil); err != nil {
		t.Fatal(err)
	}
	var old atomic.Int32
	stopLeader := func(point string) *atomic.Int32 {
		var calls atomic.Int32
		failpoint.Enable(point, func() error {
			if calls.Add(1) != 1 {
				return nil
			}
			for i, m := range c.Masters {
				if m.Server != nil && m.Server.IsLeader() {
					old.Store(int32(i))
					// Not from the handler itself: stopping waits for it.
					go func() { _ = c.StopMaster(i) }()
					break
				}
			}
			return failpoint.ErrInjected
		})
		t.Cleanup(func() { failpoint.Disable(point) })
		return &calls
	}

	calls := stopLeader("master/create-table/after-commit")
	if _, err := sc.CreateTable(ctx, "failover", nil); err != nil {
		t.Fatalf("create across the master failover: %v", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("create point ran %d times, want once (the retry is answered from the record)", calls.Load())
	}
	waitFor(t, 10*time.Second, "another master to lead", func() bool {
		for i, m := range c.Masters {
			if i != int(old.Load()) && m.Server != nil && m.Server.IsLeader() {
				return true
			}
		}
		return false
	})
	if _, err := sc.NewClient("failover").AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatalf("write to the table created across the failover: %v", err)
	}
	if _, err := sc.CreateTable(ctx, "failover", nil); httpStatus(err) != http.StatusConflict {
		t.Fatalf("another create: %v, want 409", err)
	}

	// The stopped master comes back, so the next stop leaves a quorum.
	waitFor(t, 10*time.Second, "the old leader to stop", func() bool { return c.Masters[old.Load()].Server == nil })
	if err := c.RestartMaster(int(old.Load())); err != nil {
		t.Fatal(err)
	}
	stopLeader("master/delete-table/after-commit")
	if _, err := sc.DeleteTable(ctx, "failover", nil); err != nil {
		t.Fatalf("delete across the master failover: %v", err)
	}
	if _, err := sc.NewClient("failover").GetEntity(ctx, "p", "r", nil); httpStatus(err) != http.StatusNotFound {
		t.Fatalf("read after the delete: %v, want 404", err)
	}
}
