package scheduler

import (
	"slices"
	"testing"
)

// TestSpread: a new range's replicas go to as many zones as the
// candidates have, in the caller's order of preference within a zone
// choice, and a later tier (a low disk) is taken only once the earlier
// ones are exhausted, whatever its zone.
func TestSpread(t *testing.T) {
	c := func(id, zone string, tier int) Candidate { return Candidate{ID: id, Zone: zone, Tier: tier} }
	for _, tc := range []struct {
		name  string
		cands []Candidate
		n     int
		want  []string
	}{
		{"no zones: the caller's order", []Candidate{c("a", "", 0), c("b", "", 0), c("c", "", 0), c("d", "", 0)}, 3, []string{"a", "b", "c"}},
		{"three zones", []Candidate{c("a1", "A", 0), c("a2", "A", 0), c("b1", "B", 0), c("b2", "B", 0), c("c1", "C", 0)}, 3, []string{"a1", "b1", "c1"}},
		{"two zones: 2+1", []Candidate{c("a1", "A", 0), c("a2", "A", 0), c("a3", "A", 0), c("b1", "B", 0)}, 3, []string{"a1", "b1", "a2"}},
		{"one zone", []Candidate{c("a1", "A", 0), c("a2", "A", 0), c("a3", "A", 0)}, 3, []string{"a1", "a2", "a3"}},
		{"unnamed is a zone of its own", []Candidate{c("a1", "A", 0), c("a2", "A", 0), c("x", "", 0)}, 3, []string{"a1", "x", "a2"}},
		{"unnamed share none", []Candidate{c("x", "", 0), c("y", "", 0), c("a1", "A", 0)}, 3, []string{"x", "y", "a1"}},
		{"a tier before zones", []Candidate{c("a1", "A", 0), c("a2", "A", 0), c("a3", "A", 0), c("b1", "B", 1)}, 3, []string{"a1", "a2", "a3"}},
		{"zones within the next tier", []Candidate{c("a1", "A", 0), c("a2", "A", 1), c("b1", "B", 1)}, 3, []string{"a1", "b1", "a2"}},
		{"too few", []Candidate{c("a1", "A", 0), c("a2", "A", 0)}, 3, []string{"a1", "a2"}},
	} {
		if got := Spread(tc.cands, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Spread = %v, want %v", tc.name, got, tc.want)
		}
	}
}
