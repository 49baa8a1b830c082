package router

import (
	"math/rand/v2"
	"strings"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestHintsForgottenWithTheirRanges: the leader hints a front-end learns
// from partition servers go with their ranges (split away, merged,
// dropped with their table, absent from a whole map), by delta and by
// whole map alike: range ids are never reused, so a hint outliving its
// range is only memory, kept for good (one entry per retired range that
// ever had a leader other than the map's).
func TestHintsForgottenWithTheirRanges(t *testing.T) {
	tests := []struct {
		name  string
		apply func(r *Router, prev, next *pb.PartitionMap)
	}{
		{"deltas", func(r *Router, p, n *pb.PartitionMap) { r.applyStreamDelta(diff(p, n)) }},
		{"whole maps", func(r *Router, _, n *pb.PartitionMap) { r.install(n) }},
		// DeleteTable's local delta: the table's name alone.
		{"tables deleted here", func(r *Router, _, n *pb.PartitionMap) {
			keep := map[string]bool{}
			for _, t := range n.GetTables() {
				keep[strings.ToLower(t.GetName())] = true
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			for key := range r.tables {
				if !keep[key] {
					r.applyLocked(&pb.PartitionMap{Delta: true, RemovedTables: []string{key}})
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			ids := map[string]uint64{}
			prev := randomMap(rng, 1, ids)
			r := newTestRouter()
			r.installStream(prev)
			for v := uint64(2); v < 100; v++ {
				// A hint for every range held, naming a server the map
				// does not (kept until the map reports a leader).
				r.mu.RLock()
				var held []uint64
				for id := range r.rangeTable {
					held = append(held, id)
				}
				r.mu.RUnlock()
				for _, id := range held {
					r.hint(id, "c")
				}
				next := randomMap(rng, v, ids)
				tt.apply(r, prev, next)
				r.mu.RLock()
				for id := range r.hinted {
					if _, ok := r.rangeTable[id]; !ok {
						r.mu.RUnlock()
						t.Fatalf("version %d: hint kept for range %d, which the map no longer has", v, id)
					}
				}
				r.mu.RUnlock()
				prev = next
			}
		})
	}
}
