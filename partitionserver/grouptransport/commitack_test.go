package grouptransport

import (
	"testing"

	"github.com/hashicorp/raft"
)

// TestCommitKnown: a follower knows an index committed once an append it
// acknowledged carried a commit index at or past it and reached it (its
// previous entry plus its entries); a heartbeat, or an append that stops
// short of the index, tells it nothing.
func TestCommitKnown(t *testing.T) {
	entries := func(n int) []*raft.Log { return make([]*raft.Log, n) }
	for _, tc := range []struct {
		name string
		acks []raft.AppendEntriesRequest
		want bool // CommitKnown("f", 10)
	}{
		{"nothing acknowledged", nil, false},
		{"a heartbeat", []raft.AppendEntriesRequest{{Term: 3}}, false},
		{"the commit tick after the marker", []raft.AppendEntriesRequest{{PrevLogEntry: 10, LeaderCommitIndex: 10}}, true},
		{"the marker and its commit in one append", []raft.AppendEntriesRequest{{PrevLogEntry: 9, Entries: entries(1), LeaderCommitIndex: 10}}, true},
		{"committed, but the append stops short", []raft.AppendEntriesRequest{{PrevLogEntry: 8, Entries: entries(1), LeaderCommitIndex: 10}}, false},
		{"the marker, its commit not yet", []raft.AppendEntriesRequest{{PrevLogEntry: 9, Entries: entries(1), LeaderCommitIndex: 9}}, false},
		{"a later ack does not lower it", []raft.AppendEntriesRequest{{PrevLogEntry: 10, LeaderCommitIndex: 10}, {PrevLogEntry: 3, LeaderCommitIndex: 3}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g Group
			for i := range tc.acks {
				g.commits.note("f", &tc.acks[i])
			}
			if got := g.CommitKnown("f", 10); got != tc.want {
				t.Fatalf("CommitKnown = %v, want %v", got, tc.want)
			}
			if g.CommitKnown("other", 1) {
				t.Fatal("another follower knows what only f acknowledged")
			}
		})
	}
}
