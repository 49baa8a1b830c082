package partitionserver

import (
	"fmt"
	"io"
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
	snaps, err := raft.NewFileSnapshotStore(replicaDir(dir, 1), 2, io.Discard)
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
	sl := newSlot(1, fr.Group(), &cfg)
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

// TestCreateIgnoresLeftoverSnapshots: a delete that crashed after removing
// a replica's state and before its directory leaves that replica's
// snapshots behind. A replica of the range created here again later (a
// move back) starts empty: opened on the leftover, it restored the old
// snapshot (RestoreNewerSnapshot), whose span, from before a split, wrote
// stale rows into the right range this server hosts.
func TestCreateIgnoresLeftoverSnapshots(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	ent := func(v int32) []byte {
		return edm.MarshalBinary(&edm.Entity{Properties: []edm.Property{{Name: "V", Value: edm.Value{Type: edm.TypeInt32, Int: int64(v)}}}})
	}
	write := func(r *fsm.Range, index uint64, pk string, v int32) {
		t.Helper()
		data, err := fsm.EncodeWrite(&pb.WriteCommand{ProposedUnixNano: int64(index) * 1000,
			Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT_OR_REPLACE, PartitionKey: pk, RowKey: "r", Entity: ent(v)}}})
		if err != nil {
			t.Fatal(err)
		}
		if res := r.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: data}}); res[0].(*fsm.Result).Err != nil {
			t.Fatal(res[0].(*fsm.Result).Err)
		}
	}

	// The old replica of range 5, before its split: n/r = 1.
	old := &pb.RangeDescriptor{RangeId: 5, Table: "t", TableId: 7, Generation: 1, Replicas: []*pb.Replica{{ServerId: "f"}}}
	oldStore, err := fsm.OpenWithInterval(filepath.Join(t.TempDir(), "state.db"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { oldStore.Close() })
	if err := oldStore.CreateRange(old, true); err != nil {
		t.Fatal(err)
	}
	or, _ := oldStore.OpenRange(5, logger)
	write(or, 1, "n", 1)
	snap, err := or.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()

	dir := t.TempDir()
	snaps, err := raft.NewFileSnapshotStore(replicaDir(dir, 5), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, peers := raft.NewInmemTransport("")
	sink, err := snaps.Create(raft.SnapshotVersionMax, 1, 1, raft.Configuration{Servers: []raft.Server{{ID: "f", Address: "f-addr"}}}, 1, peers)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}

	// This server now hosts the split's right range 6 [m, ..), where n/r
	// is 2 since, and not range 5, whose state the crashed delete removed.
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.AdvertiseRaft = "f-addr"
	cfg.QuiesceAfter = 0
	s, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	s.id = "f"
	if s.store, err = fsm.OpenWithInterval(filepath.Join(dir, "state.db"), time.Hour); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.store.Close() })
	if s.logs, err = raftlog.Open(filepath.Join(dir, "raft"), raftlog.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.logs.Close() })
	s.raftNet = newTestTransport(t)
	right := &pb.RangeDescriptor{RangeId: 6, Table: "t", TableId: 7, Start: "m", Generation: 2, Replicas: []*pb.Replica{{ServerId: "f"}}}
	if err := s.store.CreateRange(right, false); err != nil {
		t.Fatal(err)
	}
	rr, _ := s.store.OpenRange(6, logger)
	write(rr, 1, "n", 2)
	if err := s.store.Flush(); err != nil {
		t.Fatal(err)
	}

	// Range 5, [.., m) since the split, moved back here.
	left := &pb.RangeDescriptor{RangeId: 5, Table: "t", TableId: 7, End: "m", Generation: 4,
		Replicas: []*pb.Replica{{ServerId: "f"}, {ServerId: "g"}}}
	if err := s.createReplica(left, false, false, nil, joinFloor{term: 1, index: 10}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if sl := s.slotOf(5); sl != nil {
			if rep := sl.open(); rep != nil {
				rep.close()
			}
		}
	}()
	b, err := rr.Get("n", "r")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := edm.UnmarshalBinary(b); err != nil || len(e.Properties) != 1 || e.Properties[0].Value.Int != 2 {
		t.Fatalf("range 6's n/r after range 5 was created again: %+v, %v; want V=2", e, err)
	}
	if sl := s.slotOf(5); sl == nil || sl.group.AppliedIndex() != 0 {
		t.Fatalf("range 5 created again from a leftover snapshot: applied %d", sl.group.AppliedIndex())
	}
}
