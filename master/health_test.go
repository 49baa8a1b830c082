package master

import (
	"strings"
	"testing"
)

func TestReadiness(t *testing.T) {
	for _, tc := range []struct {
		name  string
		facts healthFacts
		want  string // reasons joined by ";", "" = ready
	}{
		{"not started", healthFacts{}, "not started"},
		{"ready follower", healthFacts{Started: true, Leader: "10.0.0.1:7100", InConfig: true}, ""},
		{"no leader", healthFacts{Started: true, InConfig: true}, "master group has no known leader"},
		{"removed member", healthFacts{Started: true, Leader: "10.0.0.1:7100"}, "not a voter in the master group's configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(readiness(tc.facts).Reasons, ";"); got != tc.want {
				t.Fatalf("readiness(%+v) = %q, want %q", tc.facts, got, tc.want)
			}
		})
	}
}
