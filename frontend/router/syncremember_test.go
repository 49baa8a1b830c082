package router

import (
	"errors"
	"testing"
)

// TestRememberedNewerGenerationConfirmsNothing: an answer from a state at
// a newer descriptor generation than the probed map (the probe's verdict
// is syncStale) is not remembered under the probed generation. Before, a
// later probe of the same map in which no replica answered confirmed an
// index past the record that changed the membership, over the old map,
// against section 36's proof (a time confirmed over the older descriptor
// comes only from replicas that reported the older generation).
func TestRememberedNewerGenerationConfirmsNothing(t *testing.T) {
	const gen = 3
	var rs rangeSync
	// Probe 1, map at gen 3: every replica has applied the move's
	// SET_REPLICAS (generation 4, say at index 100) and holds 120.
	first := []replicaAnswer{
		{server: "a", applied: 120, generation: gen + 1},
		{server: "b", applied: 120, generation: gen + 1},
		{server: "c", applied: 120, generation: gen + 1},
	}
	rem := rs.remember(gen, 0, first)
	if _, v, _ := combineAnswers(gen, 0, first, rem); v != syncStale {
		t.Fatalf("probe 1 verdict %d, want stale", v)
	}
	// Probe 2, same map (refresh not in yet / master unreachable): no
	// replica answers.
	down := errors.New("unavailable")
	second := []replicaAnswer{{server: "a", err: down}, {server: "b", err: down}, {server: "c", err: down}}
	rem = rs.remember(gen, 0, second)
	least, v, _ := combineAnswers(gen, 0, second, rem)
	if v == syncHeld && least > 100 {
		t.Fatalf("map at generation %d confirms index %d, past the generation-%d record at 100: a moved-in replica that applied just that record serves older state than the time", gen, least, gen+1)
	}
}
