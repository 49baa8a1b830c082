package master

import (
	"testing"
	"time"
)

// TestReplicaGC: a stale replica is collected once it was reported again
// at least staleGrace after first, then asked for again only after
// staleRetry, and forgotten when no longer reported.
func TestReplicaGC(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		server string
		at     time.Duration
		want   bool
	}{
		{"ps2", 0, false},                // first report: remembered
		{"ps2", 2 * time.Second, false},  // within the grace
		{"ps3", 5 * time.Second, false},  // another server: its own grace
		{"ps2", 5 * time.Second, true},   // grace over: collect
		{"ps2", 10 * time.Second, false}, // asked already
		{"ps2", 35 * time.Second, true},  // still reported after staleRetry: again
		{"ps3", 11 * time.Second, true},  // ps3's grace over
	}
	g := newReplicaGC()
	for i, s := range steps {
		if got := g.observe(s.server, 7, at(s.at)); got != s.want {
			t.Fatalf("step %d (%s at %v): collect %v, want %v", i, s.server, s.at, got, s.want)
		}
	}
	g.forget(at(35*time.Second + 2*staleRetry + time.Second))
	if got := g.observe("ps2", 7, at(100*time.Second)); got {
		t.Fatal("a replica forgotten and reported again was collected without a grace")
	}
}
