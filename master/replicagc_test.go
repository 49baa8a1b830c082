package master

import (
	"fmt"
	"testing"
	"time"
)

// TestReplicaGC: a stale replica is due for collection once staleGrace
// passed since it was first reported, whether or not it is reported again
// (heartbeats are deltas), then due again only after staleRetry, or at
// once when its collection did not start; it is forgotten when no longer
// reported.
func TestReplicaGC(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		op     string // observe, due, unask
		server string
		at     time.Duration
		want   []uint64
	}{
		{"observe", "ps2", 0, nil},                      // first report: remembered
		{"due", "ps2", staleGrace / 2, nil},             // within the grace
		{"observe", "ps3", staleGrace, nil},             // another server: its own grace
		{"due", "ps3", staleGrace, nil},                 //
		{"due", "ps2", staleGrace, []uint64{7}},         // grace over, no report since: collect
		{"due", "ps2", staleGrace + time.Second, nil},   // asked already
		{"unask", "ps2", staleGrace + time.Second, nil}, // the range was claimed by an operation
		{"due", "ps2", staleGrace + 2*time.Second, []uint64{7}},
		{"observe", "ps2", 10 * time.Second, nil}, // still reported
		{"due", "ps2", 10 * time.Second, nil},     // within staleRetry of the ask
		{"due", "ps2", staleGrace + 2*time.Second + staleRetry, []uint64{7}},
		{"due", "ps3", 2 * staleGrace, []uint64{7}}, // ps3's grace over
	}
	g := newReplicaGC()
	for i, s := range steps {
		var got []uint64
		switch s.op {
		case "observe":
			g.observe(s.server, 7, at(s.at))
		case "unask":
			g.unask(s.server, 7)
		case "due":
			got = g.due(s.server, at(s.at))
		}
		if fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Fatalf("step %d (%s %s at %v): due %v, want %v", i, s.op, s.server, s.at, got, s.want)
		}
	}
	g.forget(at(10*time.Second + 2*staleRetry + time.Second))
	g.observe("ps2", 7, at(100*time.Second))
	if got := g.due("ps2", at(100*time.Second)); len(got) != 0 {
		t.Fatal("a replica forgotten and reported again was collected without a grace")
	}
}
