package partitionserver

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/internal/edm"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/raftlog"
	pb "tablestore/proto/tablestorepb"
)

// TestOpenRestoresStoredSnapshot: a follower crashed after raft stored a
// leader's snapshot in the range's directory and before the state file
// committed its restore. Opening the replica brings the file up to the
// snapshot: raft (NoSnapshotRestoreOnStart) takes the snapshot as applied
// and would never hand the state machine the entries before it.
func TestOpenRestoresStoredSnapshot(t *testing.T) {
	desc := &pb.RangeDescriptor{RangeId: 1, Table: "t", TableId: 7, Generation: 1,
		Replicas: []*pb.Replica{{ServerId: "l"}, {ServerId: "f"}}}
	logger := slog.New(slog.DiscardHandler)

	// The leader's replica, 5 writes.
	ls, err := fsm.OpenWithInterval(filepath.Join(t.TempDir(), "state.db"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close() })
	if err := ls.CreateRange(desc, true); err != nil {
		t.Fatal(err)
	}
	lr, _ := ls.OpenRange(1, logger)
	ent := edm.MarshalBinary(&edm.Entity{})
	for i := range 5 {
		data, err := fsm.EncodeWrite(&pb.WriteCommand{ProposedUnixNano: int64(i+1) * 1000,
			Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: fmt.Sprint(i), Entity: ent}}})
		if err != nil {
			t.Fatal(err)
		}
		lr.ApplyBatch([]*raft.Log{{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}})
	}
	snap, err := lr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()

	// The follower: its file knows the range at index 0; the leader's
	// snapshot (at index 7: two barriers after the writes) is stored.
	dir := t.TempDir()
	store, err := fsm.OpenWithInterval(filepath.Join(dir, "state.db"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.CreateRange(desc, false); err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(replicaDir(dir, 1), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	voters := raft.Configuration{Servers: []raft.Server{{ID: "l", Address: "l-addr"}, {ID: "f", Address: "f-addr"}}}
	_, peers := raft.NewInmemTransport("")
	sink, err := snaps.Create(raft.SnapshotVersionMax, 7, 1, voters, 1, peers)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	logs, err := raftlog.Open(filepath.Join(dir, "raft"), raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logs.Close() })
	if err := logs.Log(1).SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}

	fr, err := store.OpenRange(1, logger)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.AdvertiseRaft = "f-addr"
	sl := newSlot(1, fr, &cfg)
	d := replicaDeps{serverID: "f", cfg: &cfg, store: store, logs: logs, raftNet: newTestTransport(t), logger: logger}
	rep, err := openReplica(d, sl, false, nil, joinFloor{})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.close()
	if got := fr.AppliedIndex(); got != 5 {
		t.Fatalf("state machine applied index after open = %d, want 5 (the snapshot's)", got)
	}
	if _, err := fr.Get("p", "4"); err != nil {
		t.Fatalf("the snapshot's last write is missing: %v", err)
	}
}
