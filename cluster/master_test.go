package cluster

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestMasterFailover: with three masters, killing the leading one leaves
// the cluster serving: existing tables keep working, a new table can be
// created, and the restarted master rejoins.
func TestMasterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startCluster(t, 3, 3)
	sc := serviceClient(t, c, 0)
	ctx := ctxT(t, 2*time.Minute)
	if _, err := sc.CreateTable(ctx, "before", nil); err != nil {
		t.Fatal(err)
	}
	tc := sc.NewClient("before")
	put := func(tcName string, i int) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprint(i)})
		if _, err := sc.NewClient(tcName).AddEntity(ctx, body, nil); err != nil {
			t.Fatalf("insert %d into %s: %v", i, tcName, err)
		}
	}
	put("before", 0)
	leader := -1
	for i, m := range c.Masters {
		if m.Server != nil && m.Server.IsLeader() {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no master leader")
	}
	if err := c.StopMaster(leader); err != nil {
		t.Fatal(err)
	}
	// Data traffic does not need the master.
	put("before", 1)
	waitFor(t, 20*time.Second, "a new master leader", func() bool {
		for i, m := range c.Masters {
			if i != leader && m.Server != nil && m.Server.IsLeader() {
				return true
			}
		}
		return false
	})
	if _, err := sc.CreateTable(ctx, "after", nil); err != nil {
		t.Fatalf("create table after master failover: %v", err)
	}
	put("after", 0)
	if err := c.RestartMaster(leader); err != nil {
		t.Fatal(err)
	}
	put("before", 2)
	for i := 0; i < 3; i++ {
		if _, err := tc.GetEntity(ctx, "p", fmt.Sprint(i), nil); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
	}
}
