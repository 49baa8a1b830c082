package fsm

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// TestTableDeletedFreezeIsForGood: a freeze for a deleted table
// (FreezeCommand.table_deleted) refuses reads, writes and splits like a
// merge's, and nothing undoes it: not the unfreeze of its own index (a
// merge of the range aborted around the delete), not one of an earlier
// merge freeze it joined, and not a restart (it is in the range's state).
// Before, a deleted table's range served until its replicas were deleted.
func TestTableDeletedFreezeIsForGood(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mergeFrozen bool // frozen for a merge first: the delete's freeze joins it
	}{
		{"serving", false},
		{"frozen for a merge", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			s, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Close() }()
			if err := s.CreateRange(&pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1}, true); err != nil {
				t.Fatal(err)
			}
			r, err := s.OpenRange(1, logging.Discard())
			if err != nil {
				t.Fatal(err)
			}
			ra := &applier{t: t, r: r, clock: 1_000_000}
			if res := ra.apply(op(pb.OpKind_OP_KIND_INSERT, "p", "r", entityBytes(t, nil))); res.Err != nil {
				t.Fatal(res.Err)
			}
			apply := func(data []byte) *Result {
				t.Helper()
				ra.index++
				res := r.ApplyBatch([]*raft.Log{{Index: ra.index, Term: 1, Type: raft.LogCommand, Data: data}})[0].(*Result)
				if err := s.Flush(); err != nil {
					t.Fatal(err)
				}
				return res
			}
			if tc.mergeFrozen {
				apply(mustEncode(t, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{}))
			}
			fr := apply(mustEncode(t, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{TableDeleted: true}))
			if fr.Err != nil || !r.State().GetTableDeleted() || !r.Frozen() {
				t.Fatalf("freeze for the deleted table = %+v, state %+v", fr, r.State())
			}
			// Every unfreeze the master could send: of this freeze's
			// index (the earlier merge freeze's, when it joined one).
			if res := apply(mustEncode(t, pb.CommandKind_COMMAND_KIND_UNFREEZE, &pb.UnfreezeCommand{FreezeIndex: fr.Index})); res.Err != nil {
				t.Fatal(res.Err)
			}
			refused := func(when string) {
				t.Helper()
				if !r.Frozen() || !r.State().GetTableDeleted() {
					t.Fatalf("%s: the range serves again: %+v", when, r.State())
				}
				if _, err := r.Get("p", "r"); !errors.Is(err, ErrRangeFrozen) {
					t.Fatalf("%s: read = %v, want ErrRangeFrozen", when, err)
				}
				if res := ra.apply(op(pb.OpKind_OP_KIND_INSERT, "q", "r", entityBytes(t, nil))); !errors.Is(res.Err, ErrRangeFrozen) {
					t.Fatalf("%s: write = %v, want ErrRangeFrozen", when, res.Err)
				}
				split := mustEncode(t, pb.CommandKind_COMMAND_KIND_SPLIT, &pb.SplitCommand{SplitKey: "m", NewRangeId: 2})
				ra.index++
				if res := r.ApplyBatch([]*raft.Log{{Index: ra.index, Term: 1, Type: raft.LogCommand, Data: split}})[0].(*Result); !errors.Is(res.Err, ErrRangeFrozen) {
					t.Fatalf("%s: split = %v, want ErrRangeFrozen", when, res.Err)
				}
			}
			refused("after the unfreeze")
			s = reopenStore(t, s, path)
			if r, err = s.OpenRange(1, logging.Discard()); err != nil {
				t.Fatal(err)
			}
			ra.r = r
			refused("after a restart")
		})
	}
}
