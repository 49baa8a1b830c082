package fsm

import (
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// TestRetriedSplitAnswersItsResult: a split proposed again after it
// applied (its first answer lost to a leader change or a timeout, the
// master's range client asking again; SplitRange's settling barrier
// applies the first entry before the second is proposed) answers the
// split's result and changes nothing. It used to answer ErrBadSplitKey
// (the key is the range's end now), so the master recorded neither half
// and placed no leader for the new range, for a split that happened.
// Boundaries: a key equal to the range's end without that split (another
// new range id, or none stored) is still refused.
func TestRetriedSplitAnswersItsResult(t *testing.T) {
	s, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}})
	a := &applier{t: t, r: r, clock: 1_000_000}
	a.apply(op(pb.OpKind_OP_KIND_INSERT, "c", "r", entityBytes(t, nil)))
	a.apply(op(pb.OpKind_OP_KIND_INSERT, "x", "r", entityBytes(t, nil)))
	split := func(key string, id uint64) *Result {
		t.Helper()
		data, err := Encode(pb.CommandKind_COMMAND_KIND_SPLIT, &pb.SplitCommand{SplitKey: key, NewRangeId: id})
		if err != nil {
			t.Fatal(err)
		}
		a.index++
		res := r.ApplyBatch([]*raft.Log{{Index: a.index, Term: 1, Type: raft.LogCommand, Data: data}})[0].(*Result)
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := split("m", 2)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	leftAfter := r.State()
	right, err := s.OpenRange(2, r.logger)
	if err != nil {
		t.Fatal(err)
	}
	rightAfter := right.State()

	again := split("m", 2)
	if again.Err != nil {
		t.Fatalf("retried split = %v, want the first split's result", again.Err)
	}
	if !proto.Equal(again.Range, first.Range) || !proto.Equal(again.Right, first.Right) {
		t.Fatalf("retried split answered %v + %v, want %v + %v", again.Range, again.Right, first.Range, first.Right)
	}
	if st := r.State(); !proto.Equal(st.GetRange(), leftAfter.GetRange()) || st.GetEntityCount() != leftAfter.GetEntityCount() {
		t.Fatalf("left range after the retry %v, was %v", st, leftAfter)
	}
	if st := right.State(); !proto.Equal(st, rightAfter) {
		t.Fatalf("right range after the retry %v, was %v", st, rightAfter)
	}

	for _, tc := range []struct {
		name string
		key  string
		id   uint64
	}{
		{"the end, another new range", "m", 3},
		{"the start", "", 3},
		{"past the end", "q", 3},
	} {
		if res := split(tc.key, tc.id); res.Err == nil {
			t.Errorf("split at %q as range %d (%s) = %v, want refused", tc.key, tc.id, tc.name, res.Range)
		}
	}
	if got := r.State().GetRange(); !proto.Equal(got, leftAfter.GetRange()) {
		t.Fatalf("left range after refused splits %v, was %v", got, leftAfter.GetRange())
	}
}
