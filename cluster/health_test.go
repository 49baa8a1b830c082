package cluster_test

import (
	"strings"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
)

// TestReadiness: a running cluster is ready; a partition server restarted on
// its data is ready again once registered and caught up; a master group
// that lost its quorum makes its survivor unready.
func TestReadiness(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.Start(t, 3, 3)
	clustertest.WaitFor(t, 30*time.Second, "cluster ready", func() bool { return c.Ready().Ready() })
	sc := clustertest.ServiceClient(t, c, 0)
	tc := clustertest.NewTable(t, sc, "ready")
	ctx := clustertest.Context(t, 30*time.Second)
	for i := range 10 {
		if _, err := tc.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"`+strings.Repeat("r", i+1)+`"}`), nil); err != nil {
			t.Fatal(err)
		}
	}

	if err := c.StopServer(1); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartServer(1); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 30*time.Second, "restarted server ready", func() bool { return c.Servers[1].Server.Ready().Ready() })

	// Two of three masters gone: no leader, so the last one is not ready.
	c.StopMaster(1)
	c.StopMaster(2)
	clustertest.WaitFor(t, 30*time.Second, "survivor master unready", func() bool {
		v := c.Masters[0].Server.Ready()
		return !v.Ready() && strings.Contains(strings.Join(v.Reasons, ";"), "no known leader")
	})
	if err := c.RestartMaster(1); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 30*time.Second, "master ready again with a quorum", func() bool { return c.Masters[0].Server.Ready().Ready() })
}
