package partitionserver

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

func TestSnapshotFirst(t *testing.T) {
	entries := &raft.AppendEntriesRequest{Entries: []*raft.Log{{Index: 1, Type: raft.LogConfiguration}}}
	heartbeat := &raft.AppendEntriesRequest{Term: 3}
	vote := &raft.RequestVoteRequest{Term: 3}
	install := &raft.InstallSnapshotRequest{Term: 3}

	tests := []struct {
		name       string
		generation uint64
		applied    uint64
		bootstrap  bool
		logged     bool // the member's log holds an entry
		snapshot   bool // the member has a snapshot
		wantGate   bool
	}{
		{name: "empty joiner of a split-born range", generation: 3, wantGate: true},
		{name: "first range of a table", generation: 1},
		{name: "member that applied the split (bootstraps)", generation: 3, bootstrap: true},
		{name: "member with applied state", generation: 3, applied: 12},
		{name: "member with a log", generation: 3, logged: true},
		{name: "member with a snapshot", generation: 3, snapshot: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := raft.NewInmemStore()
			if tc.logged {
				if err := logs.StoreLog(&raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration}); err != nil {
					t.Fatal(err)
				}
			}
			snaps := raft.NewInmemSnapshotStore()
			if tc.snapshot {
				takeSnapshot(t, snaps)
			}
			gate, err := snapshotFirst(tc.generation, tc.applied, tc.bootstrap, logs, snaps)
			if err != nil {
				t.Fatal(err)
			}
			if (gate != nil) != tc.wantGate {
				t.Fatalf("gate installed = %v, want %v", gate != nil, tc.wantGate)
			}
			if gate == nil {
				return
			}
			for _, msg := range []any{heartbeat, vote, install} {
				if err := gate(msg); err != nil {
					t.Fatalf("%T refused: %v", msg, err)
				}
			}
			if err := gate(entries); !errors.Is(err, errAwaitingSnapshot) {
				t.Fatalf("log entries before a snapshot: got %v, want errAwaitingSnapshot", err)
			}
			takeSnapshot(t, snaps)
			if err := gate(entries); err != nil {
				t.Fatalf("log entries after the snapshot refused: %v", err)
			}
		})
	}
}

func takeSnapshot(t *testing.T, snaps raft.SnapshotStore) {
	t.Helper()
	sink, err := snaps.Create(raft.SnapshotVersionMax, 20, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}
