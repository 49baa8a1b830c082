package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	"tablestore/partitionserver"
)

// TestShutdownBounded: a server whose peers stall every Raft RPC (paused
// processes, connections open) while its groups replicate still stops
// within the 10 s SIGTERM bound.
func TestShutdownBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, func(s *partitionserver.Config) { s.QuiesceAfter = 0 })
	sc := clustertest.ServiceClient(t, c, 0)
	for i := 0; i < 8; i++ {
		clustertest.NewTable(t, sc, fmt.Sprintf("shut%d", i))
	}
	c.PauseServer(1, true)
	c.PauseServer(2, true)
	defer c.PauseServer(1, false)
	defer c.PauseServer(2, false)
	// Let the groups notice: heartbeats and appends now hang.
	time.Sleep(time.Second)
	start := time.Now()
	if err := c.StopServer(0); err != nil {
		t.Logf("stop: %v", err)
	}
	took := time.Since(start)
	t.Logf("server stopped in %v with both peers paused", took)
	if took > 10*time.Second {
		t.Fatalf("shutdown took %v, want within 10s", took)
	}
}

// TestShutdownHandsOffLeadership: a partition server stopping (SIGTERM)
// hands the leadership of the ranges it leads to another replica before
// its members stop, so the range has a leader when Close returns, not an
// election timeout (500 ms here) after the server went silent.
func TestShutdownHandsOffLeadership(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, func(s *partitionserver.Config) { s.QuiesceAfter = 0 })
	tcl := clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), "handoff")
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tcl, acked, "before", 5)
	mc := clustertest.MasterClient(t, c)
	rng := clustertest.TableRanges(clustertest.PartitionMap(t, mc), "handoff")[0]
	id := rng.GetRangeId()
	leader := -1
	clustertest.WaitFor(t, 10*time.Second, "the range's leader", func() bool {
		for i, n := range c.Servers {
			if st := clustertest.RangeInfo(n.Server, id); st != nil && st.GetLeader() {
				leader = i
				return true
			}
		}
		return false
	})
	if err := c.StopServer(leader); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	deadline := stopped.Add(250 * time.Millisecond)
	for {
		for i, n := range c.Servers {
			if i == leader {
				continue
			}
			if st := clustertest.RangeInfo(n.Server, id); st != nil && st.GetLeader() {
				t.Logf("%s leads %v after %s stopped", n.Config.ID, time.Since(stopped).Round(time.Millisecond), c.Servers[leader].Config.ID)
				clustertest.WriteSeq(t, tcl, acked, "after", 5)
				clustertest.VerifyExactlyOnce(t, tcl, acked)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no other replica leads range %d 250 ms after its leader %s stopped (an election timeout is 500 ms): no hand-off", id, c.Servers[leader].Config.ID)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
