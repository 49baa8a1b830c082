package main

import (
	"maps"
	"testing"
)

// TestFreePortsNeverRepeat: freePorts never hands out a port twice in one
// test binary, nor claimPort one freePorts gave, though the kernel offers
// a port again once its probe closed (without the record a port came back
// within 25 to 88 calls in eight runs; this makes 300, ~600 ports).
func TestFreePortsNeverRepeat(t *testing.T) {
	// What this test hands out goes back afterwards: it listens on none,
	// and a record of thousands of ports (-count) leaves the kernel few
	// others to offer.
	handedPorts.Lock()
	before := maps.Clone(handedPorts.ports)
	handedPorts.Unlock()
	t.Cleanup(func() {
		handedPorts.Lock()
		defer handedPorts.Unlock()
		handedPorts.ports = before
	})
	seen := map[int]bool{}
	for i := range 300 {
		for _, p := range freePorts(t, 1+i%3) {
			if seen[p] {
				t.Fatalf("port %d handed out twice (after %d calls)", p, i)
			}
			seen[p] = true
		}
	}
	for p := range seen {
		if claimPort(p) {
			t.Fatalf("claimPort(%d) gave a port freePorts gave", p)
		}
		break
	}
}
