package fsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"tablestore/internal/edm"
	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// Review (session 32): a span frozen for a cross-group merge, in a group
// that keeps serving other spans, and a replica whose left range has not
// applied the merge yet while its copy of the right span's group catches
// up by a snapshot taken after the merge elsewhere.
//
// Table 7: range 3 ["", "m") is a group of its own (L); group 5 serves
// range 5 ["m", "t") (R, frozen and merged into 3) and range 9 ["t", "").
var reviewSpans = []*pb.RangeDescriptor{
	{RangeId: 3, TableId: 7, Start: "", End: "m", Generation: 2, Replicas: []*pb.Replica{{ServerId: "s1"}}},
	{RangeId: 5, GroupId: 5, TableId: 7, Start: "m", End: "t", Generation: 3, Replicas: []*pb.Replica{{ServerId: "s1"}}},
	{RangeId: 9, GroupId: 5, TableId: 7, Start: "t", End: "", Generation: 3, Replicas: []*pb.Replica{{ServerId: "s1"}}},
}

type reviewReplica struct {
	t      *testing.T
	s      *Store
	g5, g3 *Group
	a5, a3 *groupApplier
}

func newReviewReplica(t *testing.T) *reviewReplica {
	s, g5 := openGroupStore(t, t.TempDir(), reviewSpans)
	l, err := s.OpenRange(3, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	r := &reviewReplica{t: t, s: s, g5: g5, g3: l.Group()}
	r.a5 = &groupApplier{t: t, g: g5, clock: 1_000_000}
	r.a3 = &groupApplier{t: t, g: r.g3, clock: 1_000_000}
	return r
}

// TestReviewMergeAfterRightGroupSnapshot: on server Y the right span R
// (range 5) is written, frozen (group 5's entry 2), merged into L (range
// 3's Merge), and group 5 goes on with range 9; Y's group 5 then
// snapshots (R is no longer in it). Server X applied R's write and freeze
// (the master commits the merge only once every replica of R applied the
// freeze), but its L lags behind the Merge entry, and its group 5 is
// caught up by Y's snapshot (its log compacted past X). X's L then applies
// the same Merge entry every replica of L applies. It must merge R's rows
// (they are final at the freeze) and keep serving them.
func TestReviewMergeAfterRightGroupSnapshot(t *testing.T) {
	y := newReviewReplica(t)
	y.writeAndFreeze()
	if res := y.a5.batch(insertTo(9, "x")); res.Batch[0].Err != nil {
		t.Fatal(res.Batch[0].Err)
	}
	merge := y.mergeOf5()
	if res := y.a3.entry(merge); res.Err != nil || res.Range.GetEnd() != "t" {
		t.Fatalf("merge on Y: %v, %v", res.Range, res.Err)
	}
	if res := y.a5.batch(insertTo(9, "y")); res.Batch[0].Err != nil {
		t.Fatal(res.Batch[0].Err)
	}
	snap := snapshotOf(t, y.g5)

	x := newReviewReplica(t)
	x.writeAndFreeze()
	if err := x.g5.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	var res *Result
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("X's range 3 applying the Merge every replica of it applies, after X's group 5 restored a snapshot taken past the merge: panic: %v", p)
			}
		}()
		res = x.a3.entry(merge)
	}()
	if res.Err != nil {
		t.Fatalf("merge on X: %v", res.Err)
	}
	l, _ := x.g3.Span(3)
	if _, err := l.Get("p", "r"); err != nil {
		t.Fatal(fmt.Errorf("row p, written to range 5 before its freeze, after the merge on X: %w", err))
	}
}

// TestReviewRightGroupSnapshotAfterTheMergeHere: the other order. Y's
// group 5 snapshots after the freeze but before Y's range 3 applied the
// Merge (R, frozen, is still in Y's file, so in the snapshot). X's range
// 3 has applied the Merge and then a write to a key of R's old span; X's
// group 5 is then caught up by Y's snapshot. The restore must neither
// bring R back nor overwrite range 3's newer row with R's frozen one.
func TestReviewRightGroupSnapshotAfterTheMergeHere(t *testing.T) {
	y := newReviewReplica(t)
	y.writeAndFreeze()
	if res := y.a5.batch(insertTo(9, "x")); res.Batch[0].Err != nil {
		t.Fatal(res.Batch[0].Err)
	}
	merge := y.mergeOf5()
	snap := snapshotOf(t, y.g5)

	x := newReviewReplica(t)
	x.writeAndFreeze()
	if res := x.a3.entry(merge); res.Err != nil {
		t.Fatalf("merge on X: %v", res.Err)
	}
	newer := entityBytes(t, map[string]edm.Value{"V": {Type: edm.TypeInt32, Int: 2}})
	if res := x.a3.batch(&pb.WriteCommand{Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, "p", "r", newer)}}); res.Batch[0].Err != nil {
		t.Fatal(res.Batch[0].Err)
	}
	l, _ := x.g3.Span(3)
	want, err := l.Get("p", "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := x.g5.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if ok, _ := x.s.HasRange(5); ok {
		t.Errorf("range 5, merged into range 3 here, is stored again after group 5's restore")
	}
	got, err := l.Get("p", "r")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("row p of range 3 after group 5's restore: %x, want the row range 3 wrote after the merge, %x", got, want)
	}
}

// writeAndFreeze writes row p to range 5 and freezes it (group 5's entry 2).
func (r *reviewReplica) writeAndFreeze() {
	if res := r.a5.batch(insertTo(5, "p")); res.Batch[0].Err != nil {
		r.t.Fatal(res.Batch[0].Err)
	}
	freeze, _ := EncodeFor(5, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
	if res := r.a5.entry(freeze); res.Err != nil || res.Index != 2 {
		r.t.Fatalf("freeze: %v at %d", res.Err, res.Index)
	}
}

// mergeOf5 is range 3's Merge entry of range 5 at its freeze.
func (r *reviewReplica) mergeOf5() []byte {
	r5, _ := r.g5.Span(5)
	merge, _ := Encode(pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: r5.Descriptor(), RightFreezeIndex: 2})
	return merge
}
