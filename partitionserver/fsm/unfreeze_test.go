package fsm

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// TestUnfreezeUndoesOnlyItsFreeze: an unfreeze undoes the freeze at its
// index and nothing else (a stale or repeated one is a no-op on every
// replica), and a merge at a freeze that was undone does not take over
// the right range's keys.
func TestUnfreezeUndoesOnlyItsFreeze(t *testing.T) {
	s, left, right, _, _, freezeIndex := mergeFixture(t) // right frozen at index 3
	index := uint64(3)
	applyCmd := func(data []byte) *Result {
		t.Helper()
		index++
		res := right.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: data}})[0].(*Result)
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		return res
	}
	unfreeze := func(at uint64) *Result {
		t.Helper()
		data := mustEncode(t, pb.CommandKind_COMMAND_KIND_UNFREEZE, &pb.UnfreezeCommand{FreezeIndex: at})
		return applyCmd(data)
	}
	freeze := func() *Result {
		t.Helper()
		data := mustEncode(t, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
		return applyCmd(data)
	}
	frozenAt := func() uint64 {
		st := right.State()
		if st.GetFrozen() != right.Frozen() || st.GetFrozen() != (st.GetFrozenIndex() != 0) {
			t.Fatalf("inconsistent frozen state %+v", st)
		}
		return st.GetFrozenIndex()
	}

	steps := []struct {
		name       string
		do         func() *Result
		wantFrozen uint64 // 0: serving
	}{
		{"an unfreeze of another index is a no-op", func() *Result { return unfreeze(freezeIndex - 1) }, freezeIndex},
		{"an unfreeze of a later index is a no-op", func() *Result { return unfreeze(freezeIndex + 7) }, freezeIndex},
		{"the unfreeze of the freeze undoes it", func() *Result { return unfreeze(freezeIndex) }, 0},
		{"a repeated unfreeze is a no-op", func() *Result { return unfreeze(freezeIndex) }, 0},
		{"a new freeze freezes at its own index", freeze, 8},
		{"a late unfreeze of the first freeze leaves the new one", func() *Result { return unfreeze(freezeIndex) }, 8},
		{"a repeated freeze keeps its index", freeze, 8},
		{"the new freeze's unfreeze undoes it", func() *Result { return unfreeze(8) }, 0},
	}
	for _, st := range steps {
		res := st.do()
		if res.Err != nil {
			t.Fatalf("%s: %v", st.name, res.Err)
		}
		if got := frozenAt(); got != st.wantFrozen || res.Index != st.wantFrozen {
			t.Fatalf("%s: frozen at %d (result %d), want %d", st.name, got, res.Index, st.wantFrozen)
		}
	}
	if res := unfreeze(0); !errors.Is(res.Err, ErrBadCommand) {
		t.Fatalf("unfreeze without an index = %+v, want ErrBadCommand", res)
	}

	// Unfrozen, the range serves again: reads and writes.
	if _, err := right.Get("x", "r"); err != nil {
		t.Fatalf("read after the unfreeze: %v", err)
	}
	ra := &applier{t: t, r: right, index: index, clock: 20_000_000}
	if res := ra.apply(op(pb.OpKind_OP_KIND_INSERT, "z", "r", entityBytes(t, nil))); res.Err != nil {
		t.Fatalf("write after the unfreeze: %v", res.Err)
	}

	// A merge at the undone freeze must not take over the keys (the
	// master never sends one: it records ABORT before any unfreeze); the
	// replica stops rather than diverge, before touching anything.
	merge := mustEncode(t, pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: right.Descriptor(), RightFreezeIndex: freezeIndex})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a merge at an undone freeze applied")
			}
		}()
		left.ApplyBatch([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: merge}})
	}()
}

// TestMergeRequiresTheFreezeItNames: the right range frozen again at a
// later index (after an aborted merge's unfreeze), a merge naming the
// first freeze is refused; one naming the current freeze applies.
func TestMergeRequiresTheFreezeItNames(t *testing.T) {
	s, left, right, _, _, freezeIndex := mergeFixture(t)
	for i, cmd := range []struct {
		kind pb.CommandKind
		data []byte
	}{
		{pb.CommandKind_COMMAND_KIND_UNFREEZE, mustEncode(t, pb.CommandKind_COMMAND_KIND_UNFREEZE, &pb.UnfreezeCommand{FreezeIndex: freezeIndex})},
		{pb.CommandKind_COMMAND_KIND_FREEZE, mustEncode(t, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})},
	} {
		if res := right.ApplyBatch([]*raft.Log{{Index: freezeIndex + 1 + uint64(i), Term: 1, Type: raft.LogCommand, Data: cmd.data}})[0].(*Result); res.Err != nil {
			t.Fatalf("%v: %v", cmd.kind, res.Err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	refrozen := right.State().GetFrozenIndex()
	if refrozen != freezeIndex+2 {
		t.Fatalf("frozen again at %d, want %d", refrozen, freezeIndex+2)
	}
	stale := mustEncode(t, pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: right.Descriptor(), RightFreezeIndex: freezeIndex})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a merge naming an undone freeze applied")
			}
		}()
		left.ApplyBatch([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: stale}})
	}()
	current := mustEncode(t, pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: right.Descriptor(), RightFreezeIndex: refrozen})
	if res := left.ApplyBatch([]*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand, Data: current}})[0].(*Result); res.Err != nil || res.Range.GetEnd() != "" {
		t.Fatalf("merge at the current freeze = %+v", res)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := left.Get("y", "r"); err != nil {
		t.Fatalf("merged entity: %v", err)
	}
}

func mustEncode(t *testing.T, kind pb.CommandKind, m proto.Message) []byte {
	t.Helper()
	data, err := Encode(kind, m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestDeleteOfAnAbortedFreeze: a replica of the right range that applied
// the freeze and was removed from the range before the unfreeze stays
// frozen for good. Its left neighbour here will never merge it when the
// master recorded that freeze's merge as aborted, so the delete that
// names the freeze as aborted removes it; without that, or naming only
// earlier freezes, it is kept (the merge may yet apply).
func TestDeleteOfAnAbortedFreeze(t *testing.T) {
	tests := []struct {
		name           string
		abortedThrough func(freezeIndex uint64) uint64
		kept           bool
	}{
		{"no decision known", func(uint64) uint64 { return 0 }, true},
		{"only an earlier freeze aborted", func(f uint64) uint64 { return f - 1 }, true},
		{"this freeze aborted", func(f uint64) uint64 { return f }, false},
		{"a later freeze decided", func(f uint64) uint64 { return f + 5 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, left, right, _, _, freezeIndex := mergeFixture(t)
			through := tt.abortedThrough(freezeIndex)
			if err := s.CheckDelete(2, through); errors.Is(err, ErrMergePending) != tt.kept {
				t.Fatalf("CheckDelete(aborted through %d), frozen at %d = %v, want kept=%v", through, freezeIndex, err, tt.kept)
			}
			err := s.DeleteRange(2, through)
			if tt.kept {
				if !errors.Is(err, ErrMergePending) {
					t.Fatalf("DeleteRange(aborted through %d), frozen at %d = %v, want ErrMergePending", through, freezeIndex, err)
				}
				if st := right.State(); !st.GetFrozen() || st.GetEntityCount() != 2 {
					t.Fatalf("a kept replica changed: %+v", st)
				}
				return
			}
			if err != nil {
				t.Fatalf("DeleteRange(aborted through %d), frozen at %d = %v", through, freezeIndex, err)
			}
			if _, err := s.OpenRange(2, logging.Discard()); !errors.Is(err, ErrRangeNotFound) {
				t.Fatalf("deleted replica still stored: %v", err)
			}
			if left.Descriptor().GetEnd() != "m" {
				t.Fatalf("the left range changed: %v", left.Descriptor())
			}
		})
	}
}

// TestMergeRefusedWhileTheLeftRangeIsFrozen: a left range frozen for its
// own merge into its left neighbour (a deposed master's freeze racing a
// new master's merge) refuses to widen over its right neighbour, with a
// result, not a panic (its own replicated state: every replica alike),
// and leaves both ranges as they were; unfrozen, the merge applies.
func TestMergeRefusedWhileTheLeftRangeIsFrozen(t *testing.T) {
	s, left, right, _, _, freezeIndex := mergeFixture(t)
	apply := func(r *Range, index uint64, kind pb.CommandKind, m proto.Message) *Result {
		t.Helper()
		res := r.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: mustEncode(t, kind, m)}})[0].(*Result)
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		return res
	}
	leftFreeze := apply(left, 1, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
	if !left.Frozen() {
		t.Fatalf("left freeze = %+v", leftFreeze)
	}
	merge := &pb.MergeCommand{Right: right.Descriptor(), RightFreezeIndex: freezeIndex}
	res := apply(left, 2, pb.CommandKind_COMMAND_KIND_MERGE, merge)
	if !errors.Is(res.Err, ErrRangeFrozen) {
		t.Fatalf("merge into a frozen left range = %+v, want ErrRangeFrozen", res)
	}
	if end := left.Descriptor().GetEnd(); end != "m" {
		t.Fatalf("refused merge widened the left range to end %q", end)
	}
	if st := right.State(); !st.GetFrozen() || st.GetFrozenIndex() != freezeIndex {
		t.Fatalf("refused merge changed the right range: %+v", st)
	}
	if res := apply(left, 3, pb.CommandKind_COMMAND_KIND_UNFREEZE, &pb.UnfreezeCommand{FreezeIndex: leftFreeze.Index}); res.Err != nil || left.Frozen() {
		t.Fatalf("left unfreeze = %+v", res)
	}
	if res := apply(left, 4, pb.CommandKind_COMMAND_KIND_MERGE, merge); res.Err != nil || res.Range.GetEnd() != "" {
		t.Fatalf("merge into the unfrozen left range = %+v", res)
	}
}

// TestSetReplicasRefusedWhileFrozen: a frozen range's descriptor does not
// change: the merge reads the right range's generation from each server's
// replica once it holds the freeze, and a membership record applied after
// the freeze on some servers and not yet on others would give the merged
// range different generations. After the freeze is undone it applies.
func TestSetReplicasRefusedWhileFrozen(t *testing.T) {
	s, _, right, _, _, freezeIndex := mergeFixture(t)
	index := uint64(3)
	apply := func(kind pb.CommandKind, m proto.Message) *Result {
		t.Helper()
		index++
		res := right.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: mustEncode(t, kind, m)}})[0].(*Result)
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		return res
	}
	before := right.State().GetRange()
	set := &pb.SetReplicasCommand{Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "d"}}}
	if res := apply(pb.CommandKind_COMMAND_KIND_SET_REPLICAS, set); !errors.Is(res.Err, ErrRangeFrozen) {
		t.Fatalf("set replicas on a frozen range: %+v, want ErrRangeFrozen", res)
	}
	if got := right.State().GetRange(); !proto.Equal(got, before) {
		t.Fatalf("descriptor changed while frozen: %v, was %v", got, before)
	}
	apply(pb.CommandKind_COMMAND_KIND_UNFREEZE, &pb.UnfreezeCommand{FreezeIndex: freezeIndex})
	res := apply(pb.CommandKind_COMMAND_KIND_SET_REPLICAS, set)
	if res.Err != nil || res.Range.GetGeneration() != before.GetGeneration()+1 || len(res.Range.GetReplicas()) != 3 {
		t.Fatalf("set replicas after the unfreeze: %+v", res)
	}
}
