package router

import (
	"strings"
	"testing"
	"time"
)

func TestReadiness(t *testing.T) {
	for _, tc := range []struct {
		name  string
		facts healthFacts
		want  string // reasons joined by ";", "" = ready
	}{
		{"watching", healthFacts{HasMap: true, Watching: true, Grace: 15 * time.Second}, ""},
		{"failover in progress", healthFacts{HasMap: true, Disconnected: 3 * time.Second, Grace: 15 * time.Second}, ""},
		{"masters gone", healthFacts{HasMap: true, Disconnected: 20 * time.Second, Grace: 15 * time.Second}, "no master reachable for 20s (partition map may be stale)"},
		{"no map", healthFacts{Watching: true, Grace: 15 * time.Second}, "no partition map yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(readiness(tc.facts).Reasons, ";"); got != tc.want {
				t.Fatalf("readiness(%+v) = %q, want %q", tc.facts, got, tc.want)
			}
		})
	}
}
