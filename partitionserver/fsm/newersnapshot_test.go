package fsm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"tablestore/internal/edm"
	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// storeSnapshot persists a snapshot of r into snaps with the given meta
// index, as raft does for its own snapshots and for a leader's it installs.
func storeSnapshot(t *testing.T, r *Range, snaps raft.SnapshotStore, index uint64) {
	t.Helper()
	snap, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreNewerSnapshot: a follower crashed after raft stored a
// leader's snapshot and before the state file committed its restore. raft
// (NoSnapshotRestoreOnStart) takes the stored snapshot as applied and
// never replays the entries before it, so the file must catch up from the
// snapshot before raft starts; a snapshot the range took itself, whose meta
// index passes its state's by entries the state machine never saw, is not
// restored again.
func TestRestoreNewerSnapshot(t *testing.T) {
	desc := &pb.RangeDescriptor{RangeId: 1, TableId: 9, Generation: 1}
	_, leader := openTestRange(t, desc)
	la := &applier{t: t, r: leader, clock: 1_000_000}
	for i := range 20 {
		v := entityBytes(t, map[string]edm.Value{"I": {Type: edm.TypeInt32, Int: int64(i)}})
		if res := la.apply(op(pb.OpKind_OP_KIND_INSERT, "p", fmt.Sprintf("r%02d", i), v)); res.Err != nil {
			t.Fatal(res.Err)
		}
	}

	dir := t.TempDir()
	fs, err := Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	if err := fs.CreateRange(desc, true); err != nil {
		t.Fatal(err)
	}
	follower, _ := fs.OpenRange(1, logging.Discard())
	fa := &applier{t: t, r: follower, clock: 1_000_000}
	fa.apply(op(pb.OpKind_OP_KIND_INSERT, "p", "r00", entityBytes(t, nil)))
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// The leader's snapshot, stored; the crash came before its restore.
	storeSnapshot(t, leader, snaps, 22)

	// Restarted: the range opens from the file.
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	if fs, err = Open(filepath.Join(dir, "state.db")); err != nil {
		t.Fatal(err)
	}
	follower, _ = fs.OpenRange(1, logging.Discard())
	if follower.AppliedIndex() != 1 {
		t.Fatalf("applied index after the crash = %d, want 1", follower.AppliedIndex())
	}
	restored, err := follower.RestoreNewerSnapshot(snaps, "")
	if err != nil || !restored {
		t.Fatalf("RestoreNewerSnapshot = %v, %v; want a restore", restored, err)
	}
	if follower.AppliedIndex() != 20 || follower.State().GetEntityCount() != 20 {
		t.Fatalf("after the restore: applied %d, %d entities; want 20, 20", follower.AppliedIndex(), follower.State().GetEntityCount())
	}
	want, _ := leader.Scan(ScanOptions{})
	got, err := follower.Scan(ScanOptions{})
	if err != nil || fmt.Sprint(got.Entities) != fmt.Sprint(want.Entities) {
		t.Fatalf("follower's entities differ from the leader's (%v)", err)
	}
	// Again (a second restart): the file holds the snapshot now.
	if restored, err := follower.RestoreNewerSnapshot(snaps, ""); err != nil || restored {
		t.Fatalf("second RestoreNewerSnapshot = %v, %v; want none", restored, err)
	}

	// The leader's own snapshot, meta index past its state's applied index
	// (barriers after the last write): nothing to restore.
	lsnaps, err := raft.NewFileSnapshotStore(t.TempDir(), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	storeSnapshot(t, leader, lsnaps, 25)
	if restored, err := leader.RestoreNewerSnapshot(lsnaps, ""); err != nil || restored {
		t.Fatalf("RestoreNewerSnapshot of the range's own snapshot = %v, %v; want none", restored, err)
	}
	// No snapshot at all.
	empty, _ := raft.NewFileSnapshotStore(t.TempDir(), 2, io.Discard)
	if restored, err := leader.RestoreNewerSnapshot(empty, ""); err != nil || restored {
		t.Fatalf("RestoreNewerSnapshot without snapshots = %v, %v", restored, err)
	}
}

// TestRestoreNewerSnapshotUnreadableHeader: the newest snapshot's meta
// index passes the state file's and its header cannot be read. raft would
// take it as applied and never replay what the file lacks, so the open
// fails instead of going on unchecked (it did, logging the error).
func TestRestoreNewerSnapshotUnreadableHeader(t *testing.T) {
	desc := &pb.RangeDescriptor{RangeId: 1, TableId: 9, Generation: 1}
	_, r := openTestRange(t, desc)
	a := &applier{t: t, r: r, clock: 1_000_000}
	if res := a.apply(op(pb.OpKind_OP_KIND_INSERT, "p", "r", entityBytes(t, nil))); res.Err != nil {
		t.Fatal(res.Err)
	}
	dir := t.TempDir()
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	storeSnapshot(t, r, snaps, r.AppliedIndex()+5)
	list, err := snaps.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("snapshots: %v, %v", list, err)
	}
	path := filepath.Join(dir, "snapshots", list[0].ID, "state.bin")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("garbage!"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Read from the file (as replicas do: damage, ErrCorruptSnapshot)
	// and through raft's store (its CRC check refuses it).
	if restored, err := r.RestoreNewerSnapshot(snaps, dir); !errors.Is(err, ErrCorruptSnapshot) || restored {
		t.Fatalf("RestoreNewerSnapshot = %v, %v; want ErrCorruptSnapshot", restored, err)
	}
	if restored, err := r.RestoreNewerSnapshot(snaps, ""); err == nil || restored {
		t.Fatalf("through raft's store: RestoreNewerSnapshot = %v, %v; want an error", restored, err)
	}
	// Its state file gone (the meta still lists it): damage too, so the
	// replica is marked broken and replaced rather than retried forever.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if restored, err := r.RestoreNewerSnapshot(snaps, dir); !errors.Is(err, ErrCorruptSnapshot) || restored {
		t.Fatalf("state.bin gone: RestoreNewerSnapshot = %v, %v; want ErrCorruptSnapshot", restored, err)
	}
}
