package fsm

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// Tests of the group split (DETACH_SPAN, docs/range-groups.md stage 4).

func detachEntry(t *testing.T, span uint64, leader string) []byte {
	t.Helper()
	data, err := EncodeFor(span, pb.CommandKind_COMMAND_KIND_DETACH_SPAN, &pb.DetachSpanCommand{PreferredLeader: leader})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// createdHooks records RangeCreated calls besides spanHooks' records.
type createdHooks struct {
	spanHooks
	created []created
}

func (h *createdHooks) RangeCreated(parent uint64, d *pb.RangeDescriptor, leader string) {
	h.spanHooks.RangeCreated(parent, d, leader)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.created = append(h.created, created{parent: parent, desc: d, preferredLeader: leader})
}

// threeSpans is group 5 split in the group into spans 5 [a, g), 11
// [g, p) and 12 [p, y), with a row in each.
func threeSpans(t *testing.T, dir string) (*Store, *Group, *groupApplier) {
	t.Helper()
	s, g := openGroupStore(t, dir, oneSpan(0))
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	for _, res := range a.entries(splitSpanEntry(t, 0, "g", 11), splitSpanEntry(t, 11, "p", 12)) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	a.batch(insertTo(5, "b"), insertTo(11, "h"), insertTo(12, "q"))
	return s, g, a
}

// TestDetachSpan: a span born in the group leaves it in one entry: its
// record names no group (its own), generation + 1, bootstrap, applied 0,
// with its rows and counts; writes to it later in the batch fail
// RANGE_NOT_FOUND while the group's other spans serve; the hooks hear the
// group's spans and the new group's birth (parent: the namesake, leader as
// asked); the namesake records the birth; the span opens as a group of its
// own with its rows; a snapshot of the group leaves it out; a replay after
// a restart changes nothing.
func TestDetachSpan(t *testing.T) {
	dir := t.TempDir()
	s, g, a := threeSpans(t, dir)
	h := &createdHooks{}
	g.SetHooks(h)
	res := a.entries(a.writeBatch(insertTo(11, "i")), detachEntry(t, 11, "s2"), a.writeBatch(insertTo(11, "j"), insertTo(12, "r"), insertTo(5, "c")))
	if res[0].Batch[0].Err != nil || res[1].Err != nil {
		t.Fatalf("write, detach: %v, %v", res[0].Batch[0].Err, res[1].Err)
	}
	moved := res[1].Range
	if moved.GetRangeId() != 11 || moved.GetGroupId() != 0 || moved.GetGeneration() != 6 || moved.GetStart() != "g" || moved.GetEnd() != "p" || len(moved.GetReplicas()) != 2 {
		t.Fatalf("detached span %v", moved)
	}
	if w := res[2].Batch; !errors.Is(w[0].Err, ErrRangeNotFound) || w[1].Err != nil || w[2].Err != nil {
		t.Fatalf("writes after the detach: %v, %v, %v", w[0].Err, w[1].Err, w[2].Err)
	}
	if got := spanIDsOf(g); !slices.Equal(got, []uint64{5, 12}) {
		t.Fatalf("group 5's spans after the detach: %v", got)
	}
	if calls, _ := h.calls(); len(calls) == 0 || calls[len(calls)-1] != "5:[5 12]" {
		t.Errorf("SpansChanged %v", calls)
	}
	if len(h.created) != 1 || h.created[0].parent != 5 || h.created[0].preferredLeader != "s2" || h.created[0].desc.GetRangeId() != 11 {
		t.Fatalf("RangeCreated %v", h.created)
	}
	st := fileStates(t, s)
	if r := st[11]; r.GetRange().GetGroupId() != 0 || !r.GetBootstrap() || r.GetEntityCount() != 2 || r.GetRange().GetGeneration() != 6 {
		t.Fatalf("record of the detached span: %v", r)
	}
	if b := st[5].GetRecentSplits(); len(b) == 0 || b[len(b)-1].GetRight().GetRangeId() != 11 || b[len(b)-1].GetIndex() != a.index-1 {
		t.Fatalf("the namesake's births: %v", b)
	}
	if st[12].GetRange().GetGroupId() != 5 {
		t.Fatalf("span 12 left the group: %v", st[12])
	}
	r11, err := s.OpenRange(11, logging.Discard())
	if err != nil || r11.Group().ID() != 11 {
		t.Fatalf("open the detached span: %v", err)
	}
	for _, pk := range []string{"h", "i"} {
		if _, err := r11.Get(pk, "r"); err != nil {
			t.Errorf("get %s from the detached span: %v", pk, err)
		}
	}
	if r11.State().GetAppliedIndex() != 0 {
		t.Errorf("the new group starts at applied index %d", r11.State().GetAppliedIndex())
	}
	// Its own group writes it from its first entry on.
	own := &groupApplier{t: t, g: r11.Group(), clock: a.clock}
	if res := own.batch(insertTo(0, "k")); res.Batch[0].Err != nil {
		t.Fatal(res.Batch[0].Err)
	}
	if g2 := replayUnchanged(t, s, dir, a.logs); !slices.Equal(spanIDsOf(g2), []uint64{5, 12}) {
		t.Fatalf("group 5 reopened with spans %v", spanIDsOf(g2))
	}
}

// TestDetachSpanRefusals: the namesake, a group's only span and a frozen
// span stay; nothing changes.
func TestDetachSpanRefusals(t *testing.T) {
	s, _, a := threeSpans(t, t.TempDir())
	freeze, _ := EncodeFor(12, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
	if res := a.entry(freeze); res.Err != nil {
		t.Fatal(res.Err)
	}
	before := fileStates(t, s)
	for _, tc := range []struct {
		name string
		span uint64
		want error
	}{
		{"the namesake", 0, ErrSpanStays},
		{"the namesake by id", 5, ErrSpanStays},
		{"frozen", 12, ErrRangeFrozen},
		{"not a span of the group", 77, ErrRangeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res := a.entry(detachEntry(t, tc.span, "")); !errors.Is(res.Err, tc.want) {
				t.Fatalf("detach: %v, want %v", res.Err, tc.want)
			}
		})
	}
	if after := fileStates(t, s); !sameStates(before, after) {
		t.Fatalf("refused detaches changed the file: %v, was %v", after, before)
	}
	// A group whose only span is not its namesake (the namesake merged
	// away): the span is alone already.
	_, lone := openGroupStore(t, t.TempDir(), []*pb.RangeDescriptor{{RangeId: 9, GroupId: 5, TableId: 7, Start: "a", End: "y", Generation: 3}})
	if res := (&groupApplier{t: t, g: lone, clock: 1}).entry(detachEntry(t, 9, "")); !errors.Is(res.Err, ErrSpanStays) {
		t.Fatalf("detach of the only span: %v", res.Err)
	}
}

// birthHooks records every SplitsMissed call as group -> births.
type birthHooks struct {
	mergeHooks
	groups []uint64
	births []*pb.SplitBirth
}

func (h *birthHooks) SplitsMissed(group, _ uint64, missed []*pb.SplitBirth) {
	for range missed {
		h.groups = append(h.groups, group)
	}
	h.births = append(h.births, missed...)
}

// TestDetachSpanMissedBySnapshot: a replica of the group that missed a
// detach and a split of a span that is not the namesake restores a
// snapshot taken after both: the detached span's record, which still
// named the group there, and its rows go with the group's old spans, and
// the records of the births (the namesake's of the detach, span 12's of
// its split) tell the server to create both new groups, naming the group
// whose log they were entries of (SplitsMissed: the floor and birth mark
// are read from that log), not the span.
func TestDetachSpanMissedBySnapshot(t *testing.T) {
	_, g, a := threeSpans(t, t.TempDir())
	behind := slices.Clone(a.logs)
	split, _ := EncodeFor(12, pb.CommandKind_COMMAND_KIND_SPLIT, &pb.SplitCommand{SplitKey: "t", NewRangeId: 13})
	for _, res := range a.entries(detachEntry(t, 11, ""), split) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	a.batch(insertTo(12, "s"))
	out := snapshotOf(t, g)

	s2, g2 := openGroupStore(t, t.TempDir(), oneSpan(0))
	h := &birthHooks{}
	g2.SetHooks(h)
	g2.ApplyBatch(behind)
	if err := s2.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := g2.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
		t.Fatal(err)
	}
	if got := spanIDsOf(g2); !slices.Equal(got, []uint64{5, 12}) {
		t.Fatalf("restored spans %v", got)
	}
	if st := fileStates(t, s2); st[11] != nil {
		t.Fatalf("the detached span's old record survived the restore: %v", st[11])
	}
	var born []uint64
	for _, b := range h.births {
		born = append(born, b.GetRight().GetRangeId())
	}
	if slices.Sort(born); !slices.Equal(born, []uint64{11, 13}) || !slices.Equal(h.groups, []uint64{5, 5}) {
		t.Fatalf("SplitsMissed told groups %v of births %v", h.groups, born)
	}
}

// TestDetachSpanBesideAMergedSpan: the same detach on two replicas of a
// group whose frozen spans another group's merge took on one replica and
// not yet on the other. Frozen spans take no part in the decision, so
// both replicas apply it alike: refused when no unfrozen sibling stays;
// applied, with the birth in the same unfrozen span, when one does.
func TestDetachSpanBesideAMergedSpan(t *testing.T) {
	freeze := func(t *testing.T, span uint64) []byte {
		data, err := EncodeFor(span, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, tc := range []struct {
		name   string
		frozen []uint64 // frozen, then taken on replica b only
		want   error
	}{
		{"no unfrozen sibling stays", []uint64{0, 12}, ErrSpanStays},
		{"the namesake frozen, span 12 stays", []uint64{0}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var results []*Result
			var states []map[uint64]*pb.RangeState
			for _, taken := range []bool{false, true} {
				s, _, a := threeSpans(t, t.TempDir())
				for _, sp := range tc.frozen {
					if res := a.entry(freeze(t, sp)); res.Err != nil {
						t.Fatal(res.Err)
					}
				}
				if taken {
					err := s.update(func(tx *bolt.Tx) error {
						for _, sp := range tc.frozen {
							if err := tx.Bucket(bucketRanges).Delete(u64(max(sp, 5))); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				results = append(results, a.entry(detachEntry(t, 11, "")))
				st := fileStates(t, s)
				for _, sp := range tc.frozen {
					delete(st, max(sp, 5))
				}
				states = append(states, st)
			}
			for i, res := range results {
				if !errors.Is(res.Err, tc.want) {
					t.Fatalf("replica %d: detach %v, want %v", i, res.Err, tc.want)
				}
			}
			if !sameStates(states[0], states[1]) {
				t.Fatalf("replicas differ after the detach: %v and %v", states[0], states[1])
			}
			if tc.want == nil {
				if b := states[0][12].GetRecentSplits(); len(b) == 0 || b[len(b)-1].GetRight().GetRangeId() != 11 {
					t.Fatalf("span 12's births: %v", b)
				}
			}
		})
	}
}
