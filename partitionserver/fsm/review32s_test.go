package fsm

import (
	"bytes"
	"io"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestReviewS32TableDeletedFreezeKeptByRestore: range 5 of group 5 is
// frozen because its table was deleted (not for a merge). Y deletes its
// replica of 5 (the master's delete) and snapshots group 5 (range 9
// only). X, caught up by that snapshot, must not keep range 5's record
// (no merge will ever take it over): kept outside the group's spans, the
// master's later delete of range 5 on X finds no span of 5 and a live
// group named 5 (removeReplica returns nil).
func TestReviewS32TableDeletedFreezeKeptByRestore(t *testing.T) {
	freeze, _ := EncodeFor(5, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{TableDeleted: true})
	y := newReviewReplica(t)
	if res := y.a5.entry(freeze); res.Err != nil {
		t.Fatal(res.Err)
	}
	if err := y.s.DeleteRange(3, 0); err != nil { // the table's other range
		t.Fatal(err)
	}
	if err := y.s.DeleteRange(5, 0); err != nil {
		t.Fatal(err)
	}
	snap := snapshotOf(t, y.g5)

	x := newReviewReplica(t)
	if res := x.a5.entry(freeze); res.Err != nil {
		t.Fatal(res.Err)
	}
	if err := x.s.DeleteRange(3, 0); err != nil {
		t.Fatal(err)
	}
	if err := x.g5.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	_, inGroup := x.g5.Span(5)
	if ok, _ := x.s.HasRange(5); ok {
		t.Errorf("range 5 (table-deleted freeze, absent from the snapshot) still stored on X after restore; in the group's spans: %v", inGroup)
	}
}
