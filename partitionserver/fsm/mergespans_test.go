package fsm

import (
	"errors"
	"slices"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

func mergeSpansEntry(t *testing.T, left uint64, right *pb.RangeDescriptor) []byte {
	t.Helper()
	data, err := EncodeFor(left, pb.CommandKind_COMMAND_KIND_MERGE_SPANS, &pb.MergeSpansCommand{Right: right})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestMergeSpans: a span split off in the group merges back in one entry:
// the left span widens with both halves' rows and counts, the right
// span's record goes, writes to the right range then fail RANGE_NOT_FOUND
// while the left serves its keys, the hooks hear the group's spans, a
// repeat answers the merge, and a replay after a restart changes nothing.
func TestMergeSpans(t *testing.T) {
	dir := t.TempDir()
	s, g := openGroupStore(t, dir, oneSpan(0))
	h := &spanHooks{}
	g.SetHooks(h)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	if res := a.entry(splitSpanEntry(t, 0, "m", 11)); res.Err != nil {
		t.Fatal(res.Err)
	}
	a.batch(insertTo(5, "b"), insertTo(11, "q"), insertTo(11, "r"))
	r11, _ := g.Span(11)
	right := r11.Descriptor()
	// The merge and writes to both ranges in one batch: the writes after
	// it go to the left span, or fail for the right one.
	res := a.entries(a.writeBatch(insertTo(11, "s")), mergeSpansEntry(t, 5, right), a.writeBatch(insertTo(5, "t"), insertTo(11, "u")))
	if res[0].Batch[0].Err != nil || res[1].Err != nil {
		t.Fatalf("write, merge: %v, %v", res[0].Batch[0].Err, res[1].Err)
	}
	if m := res[1].Range; m.GetStart() != "a" || m.GetEnd() != "y" || m.GetGeneration() != 5 || m.GetRangeId() != 5 {
		t.Fatalf("merged span %v", m)
	}
	if w := res[2].Batch; w[0].Err != nil || !errors.Is(w[1].Err, ErrRangeNotFound) {
		t.Fatalf("writes after the merge: %v, %v", w[0].Err, w[1].Err)
	}
	if got := spanIDsOf(g); !slices.Equal(got, []uint64{5}) || !r11.Frozen() {
		t.Fatalf("spans after the merge %v, range 11 frozen %v", got, r11.Frozen())
	}
	st := fileStates(t, s)
	if len(st) != 1 || st[5].GetEntityCount() != 5 {
		t.Fatalf("file after the merge: %v", st)
	}
	if n, _ := recount(t, s, st[5].GetRange()); n != 5 {
		t.Fatalf("the merged span holds %d rows, counts %d", n, st[5].GetEntityCount())
	}
	r5, _ := g.Span(5)
	for _, pk := range []string{"b", "q", "r", "s", "t"} {
		if _, err := r5.Get(pk, "r"); err != nil {
			t.Errorf("get %s from the merged span: %v", pk, err)
		}
	}
	if calls, _ := h.calls(); !slices.Equal(calls, []string{"5:[5 11]", "5:[5]"}) {
		t.Errorf("SpansChanged %v", calls)
	}
	if res := a.entry(mergeSpansEntry(t, 5, right)); res.Err != nil || res.Range.GetEnd() != "y" {
		t.Fatalf("repeat of the merge: %v, %v", res.Range, res.Err)
	}
	replayUnchanged(t, s, dir, a.logs)
}

// TestMergeSpansRefusals: a merge of spans that are not neighbours in the
// group, or with either frozen, changes nothing.
func TestMergeSpansRefusals(t *testing.T) {
	_, g := openGroupStore(t, t.TempDir(), oneSpan(0))
	a := &groupApplier{t: t, g: g, clock: 1}
	a.entries(splitSpanEntry(t, 0, "g", 11), splitSpanEntry(t, 11, "p", 12))
	spans := map[uint64]*pb.RangeDescriptor{}
	for _, r := range g.Spans() {
		spans[r.ID()] = r.Descriptor()
	}
	other := &pb.RangeDescriptor{RangeId: 77, TableId: 7, Start: "g", End: "p"}
	for _, tc := range []struct {
		name  string
		left  uint64
		right *pb.RangeDescriptor
		want  error
	}{
		{"not adjacent", 5, spans[12], ErrNotAdjacent},
		{"itself", 11, spans[11], ErrNotAdjacent},
		{"right of it on the left", 11, spans[5], ErrNotAdjacent},
		{"not a span of the group", 5, other, ErrNotAdjacent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res := a.entry(mergeSpansEntry(t, tc.left, tc.right)); !errors.Is(res.Err, tc.want) {
				t.Fatalf("merge: %v, want %v", res.Err, tc.want)
			}
			if got := spanIDsOf(g); !slices.Equal(got, []uint64{5, 11, 12}) {
				t.Fatalf("spans %v", got)
			}
		})
	}
	freeze, _ := EncodeFor(11, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
	if res := a.entry(freeze); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, pair := range [][2]uint64{{5, 11}, {11, 12}} {
		if res := a.entry(mergeSpansEntry(t, pair[0], spans[pair[1]])); !errors.Is(res.Err, ErrRangeFrozen) {
			t.Fatalf("merge of %v with range 11 frozen: %v", pair, res.Err)
		}
	}
	if got := spanIDsOf(g); !slices.Equal(got, []uint64{5, 11, 12}) {
		t.Fatalf("spans %v", got)
	}
}
