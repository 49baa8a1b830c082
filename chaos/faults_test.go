package chaos

import (
	"math/rand"
	"slices"
	"testing"
	"time"
)

// TestChooseFault: a seed's faults are its own (the same seed draws the
// same faults, in order, whatever else the run draws), every kind is
// drawn, clock faults included, and each choice is one the cluster can
// take: a one-way cut between two distinct servers, a clock off by one
// of clockOffsets, past the master's bound and inside the request
// records' TTL.
func TestChooseFault(t *testing.T) {
	const servers, masters, seeds, per = 4, 3, 60, 8
	kinds := map[faultKind]int{}
	offsets := map[time.Duration]int{}
	var clockFirst []int64
	for seed := int64(1); seed <= seeds; seed++ {
		a := rand.New(rand.NewSource(faultSeed(seed)))
		b := rand.New(rand.NewSource(faultSeed(seed)))
		other := rand.New(rand.NewSource(seed)) // the run's other draws
		for i := 0; i < per; i++ {
			other.Intn(3)
			fa, fb := chooseFault(a, servers, masters), chooseFault(b, servers, masters)
			if fa != fb {
				t.Fatalf("seed %d fault %d: %+v, then %+v from the same seed", seed, i, fa, fb)
			}
			kinds[fa.kind]++
			if fa.kind < 0 || fa.kind >= faultKinds || fa.server < 0 || fa.server >= servers || fa.master < 0 || fa.master >= masters {
				t.Fatalf("seed %d fault %d: %+v out of range", seed, i, fa)
			}
			if fa.kind == faultOneWay && (fa.other == fa.server || fa.other < 0 || fa.other >= servers) {
				t.Fatalf("seed %d fault %d: one-way cut from %d to %d", seed, i, fa.server, fa.other)
			}
			if (fa.kind == faultClock) != (fa.offset != 0) {
				t.Fatalf("seed %d fault %d: %+v: an offset only with a clock fault", seed, i, fa)
			}
			if fa.kind == faultClock {
				offsets[fa.offset]++
				if !slices.Contains(clockOffsets, fa.offset) {
					t.Fatalf("seed %d fault %d: clock offset %v not one of %v", seed, i, fa.offset, clockOffsets)
				}
				if i == 0 {
					clockFirst = append(clockFirst, seed)
				}
			}
		}
	}
	for k := faultKind(0); k < faultKinds; k++ {
		if kinds[k] == 0 {
			t.Errorf("fault kind %d never drawn in %d seeds", k, seeds)
		}
	}
	for _, d := range clockOffsets {
		if offsets[d] == 0 {
			t.Errorf("clock offset %v never drawn", d)
		}
		// Past the master's --max-clock-offset (10 s), inside the request
		// records' 10 minutes (partitionserver/fsm/dedup.go).
		if d.Abs() <= 10*time.Second || d.Abs() >= 10*time.Minute {
			t.Errorf("clock offset %v outside (10s, 10m)", d)
		}
	}
	t.Logf("seeds 1-%d whose first fault is a clock fault: %v", seeds, clockFirst)
}

// TestSkewedSpan: the first and last poll within the window whose map
// flags the server, none when no poll there does.
func TestSkewedSpan(t *testing.T) {
	s := time.Second
	places := []placement{
		{at: 1 * s, skewed: []string{"ps1"}},
		{at: 2 * s, skewed: []string{"ps2"}},
		{at: 3 * s, skewed: []string{"ps1", "ps2"}},
		{at: 4 * s},
		{at: 5 * s, skewed: []string{"ps2"}},
	}
	cases := []struct {
		server      string
		from, to    time.Duration
		first, last time.Duration
		ok          bool
	}{
		{"ps1", 0, 10 * s, 1 * s, 3 * s, true},
		{"ps1", 2 * s, 10 * s, 3 * s, 3 * s, true},
		{"ps2", 0, 4 * s, 2 * s, 3 * s, true},
		{"ps2", 0, 10 * s, 2 * s, 5 * s, true},
		{"ps1", 4 * s, 10 * s, 0, 0, false},
		{"ps3", 0, 10 * s, 0, 0, false},
	}
	for _, c := range cases {
		first, last, ok := skewedSpan(places, c.server, c.from, c.to)
		if first != c.first || last != c.last || ok != c.ok {
			t.Errorf("skewedSpan(%s, %v, %v) = %v, %v, %v; want %v, %v, %v", c.server, c.from, c.to, first, last, ok, c.first, c.last, c.ok)
		}
	}
}
