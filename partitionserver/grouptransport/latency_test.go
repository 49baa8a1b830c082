package grouptransport

import (
	"testing"
	"time"
)

// TestSequentialApplyLatency reports one writer's commit latency over the
// shared transport (a regression guard against added waits on the path).
func TestSequentialApplyLatency(t *testing.T) {
	c := newTestCluster(t, 3)
	for i := range c.nodes {
		c.startGroup(i, 1, all(3), nil)
	}
	c.waitLeaders([]uint64{1})
	c.apply(1, 20, 100)
	l := c.leader(1)
	const n = 200
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := c.nodes[l].rafts[1].Apply([]byte("x"), time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	per := time.Since(start) / n
	t.Logf("sequential apply: %v per entry", per)
}
