package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// Tests of ADD_SPAN (docs/range-groups.md, stage 7, step 2): a new table's
// first range stored as a span of group 5.

// newTable is the first range, id, of a new table (table id+100), as a
// master would propose it: generation 1 and replicas of its own guess
// (stale: not the group's).
func newTable(id uint64) *pb.RangeDescriptor {
	return &pb.RangeDescriptor{RangeId: id, GroupId: 5, Table: fmt.Sprintf("t%d", id+100), TableId: id + 100, Generation: 1,
		Replicas: []*pb.Replica{{ServerId: "s9"}}}
}

func addSpanEntry(t *testing.T, span uint64, d *pb.RangeDescriptor, floor uint64) []byte {
	t.Helper()
	data, err := EncodeFor(span, pb.CommandKind_COMMAND_KIND_ADD_SPAN, &pb.AddSpanCommand{Range: d, Floor: floor})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestAddSpan: the add stores the span as the group's (its name, the
// namesake's replicas, generation 2), writes to both tables in one batch
// (the add's own included) land in their tables, and the span survives a
// snapshot, a restart that replays the entry, and a membership change.
func TestAddSpan(t *testing.T) {
	cases := []struct {
		name  string
		descs []*pb.RangeDescriptor
		spans []uint64 // after the add
	}{
		{"namesake names no group", oneSpan(0), []uint64{5, 20}},
		{"namesake names the group", oneSpan(5), []uint64{5, 20}},
		{"group of two spans", twoSpans, []uint64{5, 9, 20}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, g := openGroupStore(t, dir, tc.descs)
			h := &spanHooks{}
			g.SetHooks(h)
			a := &groupApplier{t: t, g: g, clock: 1_000_000}
			if res := a.batch(insertTo(5, "b")); res.Batch[0].Err != nil {
				t.Fatal(res.Batch[0].Err)
			}
			r5, _ := g.Span(5)
			namesake := r5.Descriptor()
			epoch := func() uint64 {
				s.wmu.Lock()
				defer s.wmu.Unlock()
				return s.tablePrune(120).epoch
			}
			was := epoch()

			// The add, then writes to both tables in the same batch: the
			// same PartitionKey in each is two entities.
			res := a.entries(addSpanEntry(t, 0, newTable(20), 20),
				a.writeBatch(insertTo(20, "b"), insertTo(5, "c"), insertTo(20, "c"), insertTo(5, "b")))
			if res[0].Err != nil {
				t.Fatal(res[0].Err)
			}
			want := &pb.RangeDescriptor{RangeId: 20, GroupId: 5, Table: "t120", TableId: 120, Generation: 2, Replicas: namesake.GetReplicas()}
			if !proto.Equal(res[0].Range, want) {
				t.Fatalf("add answered %v, want %v", res[0].Range, want)
			}
			for i, w := range []error{nil, nil, nil, ErrEntityExists} {
				if got := res[1].Batch[i].Err; !errors.Is(got, w) || (w == nil && got != nil) {
					t.Errorf("write %d of the add's batch: %v, want %v", i, got, w)
				}
			}
			if epoch() == was {
				t.Error("the add left table 120's prune cursors valid")
			}
			if got := spanIDsOf(g); !slices.Equal(got, tc.spans) {
				t.Fatalf("spans %v, want %v", got, tc.spans)
			}
			if calls, created := h.calls(); len(calls) != 1 || calls[0] != fmt.Sprintf("5:%v", tc.spans) || created != 0 {
				t.Errorf("hooks told %v, %d created; want SpansChanged 5:%v only", calls, created, tc.spans)
			}
			// The namesake names its group now, at its generation, and
			// keeps the add.
			wantNames := proto.Clone(namesake).(*pb.RangeDescriptor)
			wantNames.GroupId = 5
			if st := r5.State(); !proto.Equal(st.GetRange(), wantNames) || st.GetAddFloor() != 20 || !slices.Equal(st.GetAddedRangeIds(), []uint64{20}) {
				t.Errorf("namesake after the add: %v", st)
			}
			r20, ok := g.Span(20)
			if !ok {
				t.Fatal("no span 20")
			}
			if sum := r20.Summary(); !proto.Equal(sum.Range, want) || sum.AppliedIndex != a.index || !sum.Bootstrap || sum.EntityCount != 2 {
				t.Errorf("span 20: %+v", sum)
			}

			check := func(g *Group, when string) {
				t.Helper()
				for _, c := range []struct {
					span uint64
					n    int
				}{{5, 2}, {20, 2}} {
					r, ok := g.Span(c.span)
					if !ok {
						t.Fatalf("%s: no span %d", when, c.span)
					}
					got, err := r.Scan(ScanOptions{})
					if err != nil || len(got.Entities) != c.n {
						t.Errorf("%s: range %d scans %d entities (%v), want %d", when, c.span, len(got.Entities), err, c.n)
					}
					for _, pk := range []string{"b", "c"} {
						if _, err := r.Get(pk, "r"); err != nil {
							t.Errorf("%s: range %d Get(%s): %v", when, c.span, pk, err)
						}
					}
				}
				if r, _ := g.Span(20); !proto.Equal(r.Descriptor(), want) {
					t.Errorf("%s: span 20 is %v", when, r.Descriptor())
				}
			}
			check(g, "applied")

			// A snapshot carries the added span (and the namesake's
			// record of the add) to a replica that never applied it.
			out := snapshotOf(t, g)
			s2, g2 := openGroupStore(t, t.TempDir(), tc.descs)
			h2 := &spanHooks{}
			g2.SetHooks(h2)
			if err := g2.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
				t.Fatal(err)
			}
			if got := spanIDsOf(g2); !slices.Equal(got, tc.spans) {
				t.Fatalf("restored spans %v, want %v", got, tc.spans)
			}
			if calls, _ := h2.calls(); len(calls) != 1 || calls[0] != fmt.Sprintf("5:%v", tc.spans) {
				t.Errorf("restore told %v", calls)
			}
			check(g2, "restored")
			if !sameStates(fileStates(t, s), fileStates(t, s2)) {
				t.Errorf("restored records %v, want %v", fileStates(t, s2), fileStates(t, s))
			}

			// A replica that lost the entries (a crash before the group
			// commit) replays them to the same records.
			s3, g3 := openGroupStore(t, t.TempDir(), tc.descs)
			g3.ApplyBatch(a.logs)
			if err := s3.Flush(); err != nil {
				t.Fatal(err)
			}
			check(g3, "replayed")
			if !sameStates(fileStates(t, s), fileStates(t, s3)) {
				t.Errorf("replayed records %v, want %v", fileStates(t, s3), fileStates(t, s))
			}
			// A restart with the entries applied skips them, and opens
			// the group with the added span.
			g = replayUnchanged(t, s, dir, a.logs)
			check(g, "reopened")
			a.g = g

			// A membership change rewrites the added span too.
			set, _ := Encode(pb.CommandKind_COMMAND_KIND_SET_REPLICAS, &pb.SetReplicasCommand{Replicas: []*pb.Replica{{ServerId: "s1"}, {ServerId: "s3"}}})
			if res := a.entry(set); res.Err != nil {
				t.Fatal(res.Err)
			}
			for _, r := range g.Spans() {
				if d := r.Descriptor(); len(d.GetReplicas()) != 2 || d.GetReplicas()[1].GetServerId() != "s3" {
					t.Errorf("range %d after set replicas: %v", r.ID(), d)
				}
			}
			if r, _ := g.Span(20); r.Descriptor().GetGeneration() != 3 {
				t.Errorf("span 20 after set replicas: generation %d, want 3", r.Descriptor().GetGeneration())
			}
		})
	}
}

// TestAddSpanRetryAndFence: an add proposed again answers the span while
// the group serves it, and is refused once the span left (the fence);
// ids below the floor are refused, and the list of adds drops them.
func TestAddSpanRetryAndFence(t *testing.T) {
	s, g := openGroupStore(t, t.TempDir(), oneSpan(0))
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	first := a.entry(addSpanEntry(t, 0, newTable(20), 20))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	if res := a.batch(insertTo(20, "b")); res.Batch[0].Err != nil {
		t.Fatal(res.Batch[0].Err)
	}
	before := fileStates(t, s)
	// The retry, with the master's replicas changed meanwhile: the
	// span's record answers, nothing changes.
	retry := newTable(20)
	retry.Replicas = []*pb.Replica{{ServerId: "s7"}}
	if res := a.entry(addSpanEntry(t, 0, retry, 20)); res.Err != nil || !proto.Equal(res.Range, first.Range) {
		t.Fatalf("retry answered %v, %v; want %v", res.Range, res.Err, first.Range)
	}
	if !sameStates(before, fileStates(t, s)) {
		t.Fatalf("the retry changed the file: %v, was %v", fileStates(t, s), before)
	}
	// Two more adds, the second raising the floor past 20.
	if res := a.entry(addSpanEntry(t, 0, newTable(21), 20)); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := a.entry(addSpanEntry(t, 0, newTable(23), 21)); res.Err != nil {
		t.Fatal(res.Err)
	}
	r5, _ := g.Span(5)
	if st := r5.State(); st.GetAddFloor() != 21 || !slices.Equal(st.GetAddedRangeIds(), []uint64{21, 23}) {
		t.Fatalf("namesake keeps floor %d, adds %v; want 21, [21 23]", st.GetAddFloor(), st.GetAddedRangeIds())
	}
	// Below the floor: refused, even for a span the group still serves.
	if res := a.entry(addSpanEntry(t, 0, newTable(20), 20)); !errors.Is(res.Err, ErrRangeRetired) {
		t.Fatalf("add of 20 below the floor: %v", res.Err)
	}
	// Span 21 leaves the group (detached); a late add of it is refused
	// and does not take its record back.
	detach, _ := EncodeFor(21, pb.CommandKind_COMMAND_KIND_DETACH_SPAN, &pb.DetachSpanCommand{})
	if res := a.entry(detach); res.Err != nil {
		t.Fatal(res.Err)
	}
	before = fileStates(t, s)
	if res := a.entry(addSpanEntry(t, 0, newTable(21), 21)); !errors.Is(res.Err, ErrRangeRetired) {
		t.Fatalf("late add of a detached span: %v", res.Err)
	}
	if !sameStates(before, fileStates(t, s)) || before[21].GetRange().GetGroupId() != 0 {
		t.Fatalf("the late add changed the file: %v, was %v", fileStates(t, s), before)
	}
	if got := spanIDsOf(g); !slices.Equal(got, []uint64{5, 20, 23}) {
		t.Fatalf("spans %v, want [5 20 23]", got)
	}
}

func TestAddSpanRefusals(t *testing.T) {
	freeze := func(a *groupApplier) {
		data, _ := EncodeFor(5, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
		if res := a.entry(data); res.Err != nil {
			a.t.Fatal(res.Err)
		}
	}
	// Another group's entry takes range 5's record (a merge); the group's
	// next batch drops the span.
	dropFive := func(a *groupApplier) {
		if err := a.g.store.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRanges).Delete(u64(5)) }); err != nil {
			a.t.Fatal(err)
		}
		a.batch(insertTo(9, "q"))
	}
	otherGroup := newTable(20)
	otherGroup.GroupId = 6
	cases := []struct {
		name  string
		descs []*pb.RangeDescriptor
		prep  func(a *groupApplier)
		span  uint64
		d     *pb.RangeDescriptor
		floor uint64
		want  error
	}{
		{"no range", oneSpan(0), nil, 0, nil, 0, ErrBadCommand},
		{"range id 0", oneSpan(0), nil, 0, newTable(0), 0, ErrBadCommand},
		{"another group's range", oneSpan(0), nil, 0, otherGroup, 20, ErrBadCommand},
		{"floor above the id", oneSpan(0), nil, 0, newTable(20), 21, ErrBadCommand},
		{"addressed to a span not the namesake", twoSpans, nil, 9, newTable(20), 20, ErrBadCommand},
		{"namesake frozen", oneSpan(0), freeze, 0, newTable(20), 20, ErrRangeFrozen},
		{"namesake gone", twoSpans, dropFive, 0, newTable(20), 20, ErrRangeNotFound},
		{"the group's name", oneSpan(0), nil, 0, newTable(5), 5, ErrRangeExists},
		{"a span split in the group", twoSpans, nil, 0, newTable(9), 9, ErrRangeExists},
		{"no table", oneSpan(0), nil, 0, &pb.RangeDescriptor{RangeId: 20}, 20, ErrBadCommand},
		{"keys of a span of the same table", twoSpans, nil, 0, &pb.RangeDescriptor{RangeId: 20, TableId: 7, Start: "x"}, 20, ErrRangeExists},
		{"the whole table of a span", oneSpan(0), nil, 0, &pb.RangeDescriptor{RangeId: 20, TableId: 7}, 20, ErrRangeExists},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, g := openGroupStore(t, t.TempDir(), tc.descs)
			h := &spanHooks{}
			g.SetHooks(h)
			a := &groupApplier{t: t, g: g, clock: 1_000_000}
			if tc.prep != nil {
				tc.prep(a)
			}
			refusedUnchanged(t, s, g, h, "add", tc.want, func() *Result { return a.entry(addSpanEntry(t, tc.span, tc.d, tc.floor)) })
		})
	}
}

// TestAddSpanReplacesAStrayRecord: a record of the id stored here ahead
// of the add (another group's, by mistake) is replaced, as on the
// replicas that do not hold it; its own group drops the span.
func TestAddSpanReplacesAStrayRecord(t *testing.T) {
	s, g := openGroupStore(t, t.TempDir(), oneSpan(0))
	stray := newTable(20)
	stray.GroupId = 0
	if err := s.CreateRange(stray, true); err != nil {
		t.Fatal(err)
	}
	r20alone, err := s.OpenGroup(20, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	res := a.entry(addSpanEntry(t, 0, newTable(20), 20))
	if res.Err != nil || res.Range.GetGroupId() != 5 || res.Range.GetGeneration() != 2 {
		t.Fatalf("add over a stray record: %v, %v", res.Range, res.Err)
	}
	// The stray group's next batch finds the record naming group 5.
	b := &groupApplier{t: t, g: r20alone, clock: 1_000_000}
	if res := b.batch(insertTo(0, "b")); !errors.Is(res.Err, ErrRangeNotFound) {
		t.Fatalf("stray group's write: %v", res.Err)
	}
	if st := fileStates(t, s)[20]; st.GetRange().GetGroupId() != 5 {
		t.Fatalf("record of 20 now %v", st)
	}
	if got := spanIDsOf(g); !slices.Equal(got, []uint64{5, 20}) {
		t.Fatalf("spans %v", got)
	}
}

// TestAddSpanCap: with a cap (max_spans) the apply counts the group's live
// spans itself (the namesake included): an add below the cap is stored,
// one at the cap is refused (ErrGroupFull) with nothing changed, a repeat
// of a span already added is answered at the cap, and a command without a
// cap (0: an older master, or a forced add) is not refused.
func TestAddSpanCap(t *testing.T) {
	add := func(t *testing.T, d *pb.RangeDescriptor, floor uint64, maxSpans uint32) []byte {
		t.Helper()
		data, err := EncodeFor(0, pb.CommandKind_COMMAND_KIND_ADD_SPAN, &pb.AddSpanCommand{Range: d, Floor: floor, MaxSpans: maxSpans})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	cases := []struct {
		name     string
		descs    []*pb.RangeDescriptor
		maxSpans uint32
		// stored: how many of the adds of 20, 21, 22 are stored before
		// the next is refused.
		stored int
	}{
		{"one span, cap 2", oneSpan(0), 2, 1},
		{"one span, cap 3", oneSpan(0), 3, 2},
		{"two spans, cap 3", twoSpans, 3, 1},
		{"two spans, cap 2: full already", twoSpans, 2, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, g := openGroupStore(t, t.TempDir(), tc.descs)
			h := &spanHooks{}
			g.SetHooks(h)
			a := &groupApplier{t: t, g: g, clock: 1_000_000}
			var first *Result
			for i := range tc.stored {
				res := a.entry(add(t, newTable(uint64(20+i)), 20, tc.maxSpans))
				if res.Err != nil {
					t.Fatalf("add %d under the cap: %v", 20+i, res.Err)
				}
				if i == 0 {
					first = res
				}
			}
			next := newTable(uint64(20 + tc.stored))
			refusedUnchanged(t, s, g, h, "add at the cap", ErrGroupFull, func() *Result { return a.entry(add(t, next, 20, tc.maxSpans)) })
			if first != nil {
				// A retry of the first add, its answer lost: answered.
				if res := a.entry(add(t, newTable(20), 20, tc.maxSpans)); res.Err != nil || !proto.Equal(res.Range, first.Range) {
					t.Fatalf("repeat at the cap answered %v, %v; want %v", res.Range, res.Err, first.Range)
				}
			}
			// Without a cap the same add is stored.
			if res := a.entry(add(t, next, 20, 0)); res.Err != nil {
				t.Fatalf("add without a cap: %v", res.Err)
			}
			if _, ok := g.Span(next.GetRangeId()); !ok {
				t.Fatalf("span %d not served after the add without a cap", next.GetRangeId())
			}
		})
	}
}
