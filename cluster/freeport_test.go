package cluster

import (
	"maps"
	"testing"
)

// TestPortsNeverHandedTwice: in one test binary, a port freePort or
// FreeBasePort gave is never given again by either, though the kernel
// calls it free whenever its node is down or not listening yet.
func TestPortsNeverHandedTwice(t *testing.T) {
	// What this test hands out goes back afterwards: it listens on none,
	// and the binary's other tests need the room.
	handedMu.Lock()
	before := maps.Clone(handed)
	handedMu.Unlock()
	t.Cleanup(func() {
		handedMu.Lock()
		defer handedMu.Unlock()
		for p := range handed {
			if !before[p] {
				delete(handed, p)
			}
		}
	})
	given := map[int]string{}
	give := func(p int, by string) {
		t.Helper()
		if prev, ok := given[p]; ok {
			t.Fatalf("port %d handed out by %s, and before by %s", p, by, prev)
		}
		given[p] = by
	}
	// A twentieth of freePort's range first: a block of 9 ports overlaps
	// it by chance ~37% of the time, so FreeBasePort meets handed ports
	// while whole blocks stay (the binary's earlier tests hold some too).
	for range 600 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		give(p, "freePort")
	}
	layout := Options{Masters: 1, Servers: 3, Frontends: 1}
	for range 5 {
		base, err := FreeBasePort(layout)
		if err != nil {
			t.Fatal(err)
		}
		for _, off := range layout.portOffsets() {
			give(base+off, "FreeBasePort")
		}
	}
	// 3,000 picks of freePort's 12,000 ports miss all 45 of the blocks
	// ports by chance once in ~10^5.
	for range 3000 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		give(p, "freePort")
	}
}
