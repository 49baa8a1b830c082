package master

import "testing"

func TestPlanReplicaFix(t *testing.T) {
	cases := []struct {
		name       string
		replicas   []string
		voters     []string
		nonvoters  []string
		leader     string
		down       []string
		draining   []string
		counts     map[string]int
		servers    []string
		wantSync   bool
		wantRemove string
		wantAdd    string
		// wantNonvoter: the removal is of a non-voter.
		wantNonvoter bool
	}{
		{name: "in step", replicas: []string{"a", "b", "c"}, voters: []string{"c", "a", "b"}, leader: "a"},
		{name: "voters unknown, three replicas", replicas: []string{"a", "b", "c"}, leader: "a"},
		{name: "Raft configuration ahead of the descriptor", replicas: []string{"a", "b", "c"}, voters: []string{"a", "b", "c", "d"}, leader: "a", wantSync: true},
		{name: "removal not recorded", replicas: []string{"a", "b", "c"}, voters: []string{"a", "b", "d"}, leader: "a", wantSync: true},
		{name: "move interrupted after the add: busiest server's replica goes", replicas: []string{"a", "b", "c", "d"}, voters: []string{"a", "b", "c", "d"}, leader: "a",
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "b"},
		{name: "never the leader", replicas: []string{"a", "b", "c", "d"}, leader: "b",
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "a"},
		{name: "a down server's replica first (re-replication)", replicas: []string{"a", "b", "c", "d"}, leader: "a", down: []string{"c"},
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "c"},
		{name: "then a draining server's", replicas: []string{"a", "b", "c", "d"}, leader: "a", draining: []string{"d"},
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "d"},
		{name: "ties: the greater id", replicas: []string{"a", "b", "c", "d"}, leader: "a", wantRemove: "d"},
		{name: "no leader known: wait", replicas: []string{"a", "b", "c", "d"}},
		{name: "under-replicated: the live server with the fewest replicas gets a voter", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, leader: "a",
			servers: []string{"a", "b", "c", "d", "e"}, counts: map[string]int{"a": 5, "b": 5, "c": 7, "d": 2, "e": 3}, wantAdd: "d"},
		{name: "under-replicated: never a down or draining server", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, leader: "a",
			servers: []string{"a", "b", "c", "d", "e"}, down: []string{"d"}, draining: []string{"e"}, counts: map[string]int{"c": 7, "d": 2, "e": 3}, wantAdd: "c"},
		{name: "under-replicated: ties go to the smaller id", replicas: []string{"b"}, leader: "b", servers: []string{"d", "c", "b"}, wantAdd: "c"},
		{name: "under-replicated, no server to add: nothing", replicas: []string{"a", "b"}, leader: "a", servers: []string{"a", "b", "c"}, down: []string{"c"}},
		{name: "under-replicated, descriptor behind the Raft configuration: sync first", replicas: []string{"a", "b"}, voters: []string{"a", "b", "c"}, leader: "a",
			servers: []string{"a", "b", "c", "d"}, wantSync: true},
		{name: "under-replicated, no leader known: wait", replicas: []string{"a", "b"}, servers: []string{"a", "b", "c"}},
		{name: "a non-voter an interrupted move left goes", replicas: []string{"a", "b", "c"}, voters: []string{"a", "b", "c"}, nonvoters: []string{"d"}, leader: "a",
			wantRemove: "d", wantNonvoter: true},
		{name: "a non-voter goes before a fourth voter", replicas: []string{"a", "b", "c", "d"}, voters: []string{"a", "b", "c", "d"}, nonvoters: []string{"e"}, leader: "a",
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "e", wantNonvoter: true},
		{name: "a non-voter goes before an add", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, nonvoters: []string{"d"}, leader: "a",
			servers: []string{"a", "b", "c", "d"}, wantRemove: "d", wantNonvoter: true},
		{name: "a non-voter, descriptor behind the Raft configuration: sync first", replicas: []string{"a", "b", "c"}, voters: []string{"a", "b", "d"}, nonvoters: []string{"c"}, leader: "a",
			wantSync: true},
		{name: "a non-voter, no leader known: wait", replicas: []string{"a", "b", "c"}, nonvoters: []string{"d"}},
	}
	set := func(ids []string) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := planReplicaFix(replicaCheck{factor: 3, replicas: c.replicas, voters: c.voters, nonvoters: c.nonvoters, leader: c.leader,
				down: set(c.down), draining: set(c.draining), counts: c.counts, servers: c.servers})
			if got.sync != c.wantSync || got.remove != c.wantRemove || got.add != c.wantAdd || got.nonvoter != c.wantNonvoter {
				t.Fatalf("fix %+v, want sync %v remove %q (non-voter %v) add %q", got, c.wantSync, c.wantRemove, c.wantNonvoter, c.wantAdd)
			}
			if !got.none() && got.reason == "" {
				t.Fatal("a fix without a reason")
			}
		})
	}
}
