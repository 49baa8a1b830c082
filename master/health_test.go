package master

import (
	"strings"
	"testing"

	pb "tablestore/proto/tablestorepb"
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

func TestAssessCluster(t *testing.T) {
	rng := func(servers ...string) *pb.RangeDescriptor {
		d := &pb.RangeDescriptor{}
		for _, s := range servers {
			d.Replicas = append(d.Replicas, &pb.Replica{ServerId: s})
		}
		return d
	}
	ranges := map[uint64]*pb.RangeDescriptor{
		1: rng("a", "b", "c"), // healthy
		2: rng("a", "b", "d"), // d is down: under-replicated
		3: rng("a", "b", "c"), // no leader reported
		4: rng("b", "c", "d"), // leader on the down server
	}
	alive := map[string]bool{"a": true, "b": true, "c": true}
	leaders := map[uint64]string{1: "a", 2: "b", 4: "d"}
	got := assessCluster(ranges, []string{"a", "b", "c", "d"}, alive, leaders, 3)
	want := clusterHealth{up: 3, down: 1, underReplicated: 2, leaderless: 2}
	if got != want {
		t.Fatalf("assessCluster = %+v, want %+v", got, want)
	}
}
