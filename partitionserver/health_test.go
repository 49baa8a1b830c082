package partitionserver

import (
	"strings"
	"testing"
	"time"
)

func TestReadiness(t *testing.T) {
	const within = 10 * time.Second
	reg := func(f healthFacts) healthFacts {
		f.Started, f.SinceHeartbeat, f.RegisteredWithin = true, time.Second, within
		return f
	}
	for _, tc := range []struct {
		name         string
		facts        healthFacts
		want         string // reasons joined by ";", "" = ready
		wantCaughtUp bool
	}{
		{"not started", healthFacts{}, "not started", false},
		{"never registered", healthFacts{Started: true, SinceHeartbeat: -1, RegisteredWithin: within}, "not registered with a master yet", true},
		{"heartbeats stopped", healthFacts{Started: true, SinceHeartbeat: 12 * time.Second, RegisteredWithin: within}, "no heartbeat accepted by a master for 12s", true},
		{"empty server registered", reg(healthFacts{}), "", true},
		{"replaying log", reg(healthFacts{Replicas: []replicaFacts{
			{Range: 1, LeaderKnown: true, Applied: 10, Commit: 10},
			{Range: 2, LeaderKnown: true, Applied: 3, Commit: 40},
		}}), "1 of 2 replicas catching up (e.g. range 2 applied 3 of 40)", false},
		{"group without leader yet", reg(healthFacts{Replicas: []replicaFacts{{Range: 7}}}), "1 of 1 replicas catching up (e.g. range 7 has no known leader)", false},
		{"caught up", reg(healthFacts{Replicas: []replicaFacts{{Range: 1, LeaderKnown: true, Applied: 10, Commit: 10}}}), "", true},
		{"lag after catching up once", reg(healthFacts{CaughtUpOnce: true, Replicas: []replicaFacts{{Range: 7}}}), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, caught := readiness(tc.facts)
			if got := strings.Join(v.Reasons, ";"); got != tc.want || caught != tc.wantCaughtUp {
				t.Fatalf("readiness = %q, caughtUp %v; want %q, %v", got, caught, tc.want, tc.wantCaughtUp)
			}
		})
	}
}
