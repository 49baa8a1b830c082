package grouptransport

import (
	"testing"

	"github.com/hashicorp/raft"
)

// TestStuckFollowerCalls: the stuck-follower function is called for a
// refusal of the first append to a follower after a snapshot install to
// it, and of an append from the log's start by a follower holding entries,
// and for nothing else.
func TestStuckFollowerCalls(t *testing.T) {
	type call struct {
		peer raft.ServerID
		last uint64
	}
	refused := &raft.AppendEntriesResponse{Term: 4, LastLog: 12}
	taken := &raft.AppendEntriesResponse{Term: 4, LastLog: 21, Success: true}
	deposed := &raft.AppendEntriesResponse{Term: 5, LastLog: 12}
	emptyRefused := &raft.AppendEntriesResponse{Term: 4, LastLog: 0} // a split-born member waiting for its snapshot
	entries := []*raft.Log{{Index: 6, Term: 1}}
	afterSnap := &raft.AppendEntriesRequest{Term: 4, PrevLogEntry: 5, PrevLogTerm: 1, Entries: entries}
	fromStart := &raft.AppendEntriesRequest{Term: 4, Entries: []*raft.Log{{Index: 1, Term: 1}}}
	type step struct {
		install uint64 // a snapshot installed on "f" first, in this term (0: none)
		peer    raft.ServerID
		req     *raft.AppendEntriesRequest
		resp    *raft.AppendEntriesResponse
	}
	tests := []struct {
		name  string
		steps []step
		want  []call
	}{
		{"refusal after an install", []step{{4, "f", afterSnap, refused}}, []call{{"f", 12}}},
		{"accepted after an install", []step{{4, "f", afterSnap, taken}}, nil},
		{"refusal without an install", []step{{0, "f", afterSnap, refused}}, nil},
		{"only the first append after the install", []step{{4, "f", afterSnap, taken}, {0, "f", afterSnap, refused}}, nil},
		{"each install once", []step{{4, "f", afterSnap, refused}, {0, "f", afterSnap, refused}, {4, "f", afterSnap, refused}}, []call{{"f", 12}, {"f", 12}}},
		{"another follower", []step{{4, "f", nil, nil}, {0, "g", afterSnap, refused}}, nil},
		{"an install of an earlier term", []step{{3, "f", afterSnap, refused}}, nil},
		{"a newer term deposes the leader", []step{{4, "f", afterSnap, deposed}}, nil},
		{"refusal from the log's start", []step{{0, "f", fromStart, refused}}, []call{{"f", 12}}},
		{"refusal from the start by an empty member", []step{{0, "f", fromStart, emptyRefused}}, nil},
		{"accepted from the log's start", []step{{0, "f", fromStart, taken}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var g Group
			var got []call
			g.SetStuckFollower(func(peer raft.ServerID, followerLast uint64) {
				got = append(got, call{peer, followerLast})
			})
			for _, s := range tc.steps {
				if s.install > 0 {
					g.noteInstalled("f", s.install)
				}
				if s.resp != nil {
					g.checkStuck(s.peer, s.req, s.resp)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("calls %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("calls %v, want %v", got, tc.want)
				}
			}
		})
	}
}
