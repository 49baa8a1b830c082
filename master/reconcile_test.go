package master

import "testing"

func TestPlanReplicaFix(t *testing.T) {
	cases := []struct {
		name       string
		replicas   []string
		voters     []string
		leader     string
		down       []string
		draining   []string
		counts     map[string]int
		wantSync   bool
		wantRemove string
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
		{name: "under-replicated: not this rule's", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, leader: "a"},
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
			got := planReplicaFix(replicaCheck{factor: 3, replicas: c.replicas, voters: c.voters, leader: c.leader,
				down: set(c.down), draining: set(c.draining), counts: c.counts})
			if got.sync != c.wantSync || got.remove != c.wantRemove {
				t.Fatalf("fix %+v, want sync %v remove %q", got, c.wantSync, c.wantRemove)
			}
			if !got.none() && got.reason == "" {
				t.Fatal("a fix without a reason")
			}
		})
	}
}
