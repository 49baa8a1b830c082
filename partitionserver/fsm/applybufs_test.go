package fsm

import (
	"bytes"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	pb "tablestore/proto/tablestorepb"
)

// Tests of the apply states a group keeps from one batch to the next
// (applyBufs, docs/performance.md session 37): a batch costs the spans it
// edits, and the states it leaves are what the next batch, the commit and
// readers see.

var bufSpans = []*pb.RangeDescriptor{
	{RangeId: 5, GroupId: 5, TableId: 7, Start: "a", End: "m", Generation: 3},
	{RangeId: 9, GroupId: 5, TableId: 7, Start: "m", End: "t", Generation: 3},
	{RangeId: 12, GroupId: 5, TableId: 7, Start: "t", End: "y", Generation: 3},
}

// manualGroupStore stores descs in a new file whose committer waits an
// hour (only the test's flushes commit) and opens group 5.
func manualGroupStore(t *testing.T, descs []*pb.RangeDescriptor) (*Store, *Group) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	return groupStoreOf(t, descs, func() (*Store, error) { return OpenWithInterval(path, time.Hour) })
}

// TestCommitShowsItsOwnBatch: batches 1 and 2 write span 9 and wait in
// one pending group commit, batch 3 writes span 12. Until the commit,
// readers of the committed state (Span, Summary) see none of them while
// the applied state (State) is batch 2's; when it commits, each batch's
// commit makes its own states the spans' (a step between the batches'
// callbacks sees batch 1's, not batch 2's, though batch 2 started from the
// span states batch 1 left), and the next batch starts from batch 3's.
func TestCommitShowsItsOwnBatch(t *testing.T) {
	s, g := manualGroupStore(t, bufSpans)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	apply := func(w *pb.WriteCommand) {
		t.Helper()
		a.index++
		logs := []*raft.Log{{Index: a.index, Term: 1, Type: raft.LogCommand, Data: a.writeBatch(w)}}
		if res := g.ApplyBatch(logs)[0].(*Result); res.Err != nil || res.Batch[0].Err != nil {
			t.Fatal(res.Err, res.Batch[0].Err)
		}
	}
	// seen records span 9's committed entity count when the pending
	// commit reaches this point of its callbacks.
	var seen []uint64
	mark := func() {
		t.Helper()
		err := s.apply(func(*bolt.Tx) error { return nil }, func() {
			r9, _ := g.Span(9)
			seen = append(seen, r9.Summary().EntityCount)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	apply(insertTo(9, "n"))
	mark()
	apply(insertTo(9, "o"))
	mark()
	apply(insertTo(12, "u"))
	r9, _ := g.Span(9)
	if sum, st := r9.Summary(), r9.State(); sum.EntityCount != 0 || st.GetEntityCount() != 2 {
		t.Fatalf("before the commit range 9 reads %d entities committed, %d applied; want 0 and 2", sum.EntityCount, st.GetEntityCount())
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []uint64{1, 2}) {
		t.Fatalf("range 9's committed entities after batch 1's and batch 2's commits %v, want [1 2]", seen)
	}
	a.index++
	data := a.writeBatch(insertTo(9, "p"), insertTo(12, "v"), insertTo(5, "b"))
	g.ApplyBatch([]*raft.Log{{Index: a.index, Term: 1, Type: raft.LogCommand, Data: data}})
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	st := fileStates(t, s)
	for id, want := range map[uint64]uint64{5: 1, 9: 3, 12: 2} {
		r, _ := g.Span(id)
		if got := r.Summary().EntityCount; got != want || st[id].GetEntityCount() != want {
			t.Errorf("range %d: %d entities committed, %d stored, want %d", id, got, st[id].GetEntityCount(), want)
		}
	}
}

// TestDroppedSpanNotWrittenBack: a span a batch edits (a write) and then
// drops (a detach moves it to a group of its own; a merge of spans deletes
// its record) is not written back with the group's spans at the batch's
// end, which would put it back in the group or resurrect it.
func TestDroppedSpanNotWrittenBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(t *testing.T) []byte
		// want checks span 9's stored record (nil: none).
		want func(st *pb.RangeState) bool
	}{
		{"detach", func(t *testing.T) []byte { return detachEntry(t, 9, "") },
			func(st *pb.RangeState) bool {
				return st != nil && st.GetRange().GetGroupId() == 0 && st.GetRange().GetGeneration() == 4 && st.GetBootstrap()
			}},
		{"merge into its left neighbour", func(t *testing.T) []byte { return mergeSpansEntry(t, 5, bufSpans[1]) },
			func(st *pb.RangeState) bool { return st == nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, g := manualGroupStore(t, bufSpans)
			a := &groupApplier{t: t, g: g, clock: 1_000_000}
			a.batch(insertTo(12, "u")) // the group's apply states are kept
			res := a.entries(a.writeBatch(insertTo(9, "n")), tc.drop(t))
			if res[0].Batch[0].Err != nil || res[1].Err != nil {
				t.Fatalf("write, drop: %v, %v", res[0].Batch[0].Err, res[1].Err)
			}
			st := fileStates(t, s)
			if !tc.want(st[9]) {
				t.Fatalf("range 9's record after the batch: %v", st[9])
			}
			if got := spanIDsOf(g); !slices.Equal(got, []uint64{5, 12}) {
				t.Fatalf("group's spans %v, want [5 12]", got)
			}
			// The next batch starts from the spans the drop left.
			if res := a.batch(insertTo(12, "v"), insertTo(5, "b")); res.Batch[0].Err != nil || res.Batch[1].Err != nil {
				t.Fatal(res.Batch[0].Err, res.Batch[1].Err)
			}
			if st := fileStates(t, s); !tc.want(st[9]) || st[12].GetEntityCount() != 2 {
				t.Fatalf("after the next batch: range 9 %v, range 12 %v", st[9], st[12])
			}
		})
	}
}

// TestRestoreRenewsApplyStates: a snapshot restored over a group whose
// spans are the same ranges replaces their states, and the next batch
// starts from the restored states, not from those the group's last batch
// left.
func TestRestoreRenewsApplyStates(t *testing.T) {
	_, ahead := manualGroupStore(t, twoSpans)
	a := &groupApplier{t: t, g: ahead}
	for _, pk := range []string{"n", "o", "p"} {
		a.batch(insertTo(9, pk))
	}
	out := snapshotOf(t, ahead)

	s, g := manualGroupStore(t, twoSpans)
	b := &groupApplier{t: t, g: g}
	b.batch(insertTo(9, "q")) // applied 1, range 9 holds 1 entity
	if err := g.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
		t.Fatal(err)
	}
	b.index = 3
	if res := b.batch(insertTo(9, "r")); res.Batch[0].Err != nil {
		t.Fatal(res.Batch[0].Err)
	}
	r9, _ := g.Span(9)
	if got, stored := r9.Summary().EntityCount, fileStates(t, s)[9].GetEntityCount(); got != 4 || stored != 4 {
		t.Fatalf("range 9 after the restore and a write: %d entities (%d stored), want 4", got, stored)
	}
}
