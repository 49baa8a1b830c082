package grouptransport

import (
	"testing"

	"github.com/hashicorp/raft"
)

// TestStaleInstallCalls: the stale-install function is called for a
// refusal of the first append to a follower after a snapshot install to
// it, and for nothing else.
func TestStaleInstallCalls(t *testing.T) {
	type call struct {
		peer              raft.ServerID
		installed, follow uint64
	}
	refused := &raft.AppendEntriesResponse{Term: 4, LastLog: 12}
	taken := &raft.AppendEntriesResponse{Term: 4, LastLog: 21, Success: true}
	deposed := &raft.AppendEntriesResponse{Term: 5, LastLog: 12}
	req := &raft.AppendEntriesRequest{Term: 4, PrevLogEntry: 5, PrevLogTerm: 1}
	type step struct {
		install uint64 // >0: a snapshot at this index installed on "f" first
		peer    raft.ServerID
		resp    *raft.AppendEntriesResponse
	}
	tests := []struct {
		name  string
		steps []step
		want  []call
	}{
		{"refusal after an install", []step{{5, "f", refused}}, []call{{"f", 5, 12}}},
		{"accepted after an install", []step{{5, "f", taken}}, nil},
		{"refusal without an install", []step{{0, "f", refused}}, nil},
		{"only the first append after the install", []step{{5, "f", taken}, {0, "f", refused}}, nil},
		{"each install once", []step{{5, "f", refused}, {0, "f", refused}, {7, "f", refused}}, []call{{"f", 5, 12}, {"f", 7, 12}}},
		{"another follower", []step{{5, "f", nil}, {0, "g", refused}}, nil},
		{"a newer term deposes the leader", []step{{5, "f", deposed}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var g Group
			var got []call
			g.SetStaleInstall(func(peer raft.ServerID, installed, followerLast uint64) {
				got = append(got, call{peer, installed, followerLast})
			})
			for _, s := range tc.steps {
				if s.install > 0 {
					g.noteInstalled("f", s.install)
				}
				if s.resp != nil {
					g.checkInstalled(s.peer, req, s.resp)
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
