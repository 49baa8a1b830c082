package partitionserver

import (
	"testing"

	"github.com/hashicorp/raft"
)

func TestFirstUnheard(t *testing.T) {
	servers := []raft.Server{
		{ID: "ps1", Suffrage: raft.Voter},
		{ID: "ps2", Suffrage: raft.Voter},
		{ID: "ps3", Suffrage: raft.Nonvoter},
		{ID: "ps4", Suffrage: raft.Voter},
	}
	cases := []struct {
		name  string
		heard map[raft.ServerID]bool
		want  string
	}{
		{"every voter heard", map[raft.ServerID]bool{"ps2": true, "ps4": true}, ""},
		{"self needs no answer", map[raft.ServerID]bool{"ps1": false, "ps2": true, "ps4": true}, ""},
		{"a voter not heard", map[raft.ServerID]bool{"ps2": true}, "ps4"},
		{"a non-voter is not waited for", map[raft.ServerID]bool{"ps2": true, "ps4": true, "ps3": false}, ""},
		{"the first one not heard", map[raft.ServerID]bool{}, "ps2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := firstUnheard(servers, "ps1", func(s raft.Server) bool { return c.heard[s.ID] })
			if got != c.want || ok != (c.want != "") {
				t.Fatalf("firstUnheard = %q, %v; want %q", got, ok, c.want)
			}
		})
	}
}
