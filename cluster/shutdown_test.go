package cluster

import (
	"fmt"
	"testing"
	"time"

	"tablestore/partitionserver"
)

// TestShutdownBounded: a server whose peers stall every Raft RPC (paused
// processes, connections open) while its groups replicate still stops
// within the 10 s SIGTERM bound.
func TestShutdownBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startTuned(t, 3, quietPolicies, func(s *partitionserver.Config) { s.QuiesceAfter = 0 })
	sc := serviceClient(t, c, 0)
	for i := 0; i < 8; i++ {
		newTable(t, sc, fmt.Sprintf("shut%d", i))
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
