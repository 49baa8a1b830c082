package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/failpoint"
	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// Tests of the in-group split (SPLIT_SPAN, docs/range-groups.md stage 3).

func splitSpanEntry(t *testing.T, span uint64, key string, newID uint64) []byte {
	t.Helper()
	data, err := EncodeFor(span, pb.CommandKind_COMMAND_KIND_SPLIT_SPAN, &pb.SplitSpanCommand{SplitKey: key, NewRangeId: newID})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// oneSpan is group 5 as one range of table 7, [a, y); its record names
// group (0: none).
func oneSpan(group uint64) []*pb.RangeDescriptor {
	return []*pb.RangeDescriptor{{RangeId: 5, GroupId: group, TableId: 7, Start: "a", End: "y", Generation: 3,
		Replicas: []*pb.Replica{{ServerId: "s1"}, {ServerId: "s2"}}}}
}

// spanHooks records SpansChanged calls as "group:[spans]" and counts
// RangeCreated calls.
type spanHooks struct {
	mu      sync.Mutex
	changes []string
	created int
}

func (h *spanHooks) RangeCreated(uint64, *pb.RangeDescriptor, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.created++
}

func (h *spanHooks) RangeMerged(uint64, uint64) {}

func (h *spanHooks) SpansChanged(group uint64, spans []uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, fmt.Sprintf("%d:%v", group, spans))
}

func (h *spanHooks) calls() ([]string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.changes), h.created
}

// refusedUnchanged applies an entry (apply) that the group must refuse
// with want, and fails unless the refusal left the file, the group's
// spans and the hooks as they were.
func refusedUnchanged(t *testing.T, s *Store, g *Group, h *spanHooks, kind string, want error, apply func() *Result) {
	t.Helper()
	before, spans := fileStates(t, s), spanIDsOf(g)
	calls, _ := h.calls()
	if res := apply(); !errors.Is(res.Err, want) {
		t.Fatalf("%s: %v, want %v", kind, res.Err, want)
	}
	if !sameStates(before, fileStates(t, s)) {
		t.Errorf("a refused %s changed the file: %v, was %v", kind, fileStates(t, s), before)
	}
	if got := spanIDsOf(g); !slices.Equal(got, spans) {
		t.Errorf("spans %v, were %v", got, spans)
	}
	if got, created := h.calls(); !slices.Equal(got, calls) || created != 0 {
		t.Errorf("hooks told %v (%d created), were %v", got, created, calls)
	}
}

// fileStates is the file's range records by range id without their
// applied index (every entry moves it): what a refused or repeated split
// must leave as it was.
func fileStates(t *testing.T, s *Store) map[uint64]*pb.RangeState {
	t.Helper()
	sts, err := s.RangeStates()
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]*pb.RangeState{}
	for _, st := range sts {
		st.AppliedIndex = 0
		out[st.GetRange().GetRangeId()] = st
	}
	return out
}

func sameStates(a, b map[uint64]*pb.RangeState) bool {
	if len(a) != len(b) {
		return false
	}
	for id, st := range a {
		if !proto.Equal(st, b[id]) {
			return false
		}
	}
	return true
}

// recount is what the file holds in d's span.
func recount(t *testing.T, s *Store, d *pb.RangeDescriptor) (n, size uint64) {
	t.Helper()
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		n, size, err = countSpan(tx, d)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, size
}

func TestSplitSpanServesBothHalves(t *testing.T) {
	cases := []struct {
		name        string
		descs       []*pb.RangeDescriptor
		span        uint64 // the span the entries name (0: the group's own)
		key, lo, hi string // the split key, a key below it and one above
		spans       []uint64
	}{
		{"record names no group", oneSpan(0), 0, "m", "c", "q", []uint64{5, 11}},
		{"record names the group", oneSpan(5), 5, "m", "c", "q", []uint64{5, 11}},
		{"second span of two", twoSpans, 9, "t", "p", "v", []uint64{5, 9, 11}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, g := openGroupStore(t, dir, tc.descs)
			a := &groupApplier{t: t, g: g, clock: 1_000_000}
			if res := a.batch(insertTo(tc.span, tc.lo), insertTo(tc.span, tc.hi)); res.Batch[0].Err != nil || res.Batch[1].Err != nil {
				t.Fatal(res.Batch[0].Err, res.Batch[1].Err)
			}
			id := tc.span
			if id == 0 {
				id = 5
			}
			r, _ := g.Span(id)
			orig := r.State()

			// The split, then writes to both halves in the same batch.
			res := a.entries(splitSpanEntry(t, tc.span, tc.key, 11),
				a.writeBatch(insertTo(11, tc.hi+"2"), insertTo(tc.span, tc.lo+"2"), insertTo(tc.span, tc.hi+"3"), insertTo(11, tc.lo+"3")))
			if res[0].Err != nil {
				t.Fatal(res[0].Err)
			}
			wantLeft := proto.Clone(orig.GetRange()).(*pb.RangeDescriptor)
			wantLeft.End, wantLeft.Generation, wantLeft.GroupId = tc.key, wantLeft.Generation+1, 5
			wantRight := &pb.RangeDescriptor{RangeId: 11, GroupId: 5, TableId: 7, Start: tc.key, End: orig.GetRange().GetEnd(),
				Generation: orig.GetRange().GetGeneration() + 1, Replicas: orig.GetRange().GetReplicas()}
			if !proto.Equal(res[0].Range, wantLeft) || !proto.Equal(res[0].Right, wantRight) {
				t.Fatalf("split answered %v and %v, want %v and %v", res[0].Range, res[0].Right, wantLeft, wantRight)
			}
			for i, want := range []error{nil, nil, ErrKeyOutOfRange, ErrKeyOutOfRange} {
				if got := res[1].Batch[i].Err; !errors.Is(got, want) || (want == nil && got != nil) {
					t.Errorf("write %d of the split's batch: %v, want %v", i, got, want)
				}
			}
			// And in a later batch.
			if res := a.batch(insertTo(11, tc.hi+"4"), insertTo(tc.span, tc.lo+"4")); res.Batch[0].Err != nil || res.Batch[1].Err != nil {
				t.Fatal(res.Batch[0].Err, res.Batch[1].Err)
			}

			if got := spanIDsOf(g); !slices.Equal(got, tc.spans) {
				t.Fatalf("spans %v, want %v", got, tc.spans)
			}
			left, _ := g.Span(id)
			right, _ := g.Span(11)
			if !proto.Equal(left.Descriptor(), wantLeft) || !proto.Equal(right.Descriptor(), wantRight) {
				t.Fatalf("spans now %v and %v", left.Descriptor(), right.Descriptor())
			}
			for _, c := range []struct {
				r, other *Range
				pks      []string
			}{{left, right, []string{tc.lo, tc.lo + "2", tc.lo + "4"}}, {right, left, []string{tc.hi, tc.hi + "2", tc.hi + "4"}}} {
				for _, pk := range c.pks {
					if _, err := c.r.Get(pk, "r"); err != nil {
						t.Errorf("range %d: Get(%s): %v", c.r.ID(), pk, err)
					}
					if _, err := c.other.Get(pk, "r"); !errors.Is(err, ErrKeyOutOfRange) {
						t.Errorf("range %d: Get(%s): %v, want ErrKeyOutOfRange", c.other.ID(), pk, err)
					}
				}
			}
			for _, r := range []*Range{left, right} {
				sum := r.Summary()
				n, size := recount(t, s, sum.Range)
				if sum.EntityCount != 3 || n != 3 || sum.Bytes != size {
					t.Errorf("range %d counts %d entities, %d bytes; holds %d, %d", r.ID(), sum.EntityCount, sum.Bytes, n, size)
				}
				if sum.Bootstrap != orig.GetBootstrap() {
					t.Errorf("range %d bootstrap %v", r.ID(), sum.Bootstrap)
				}
			}
			for _, r := range g.Spans() {
				if sum := r.Summary(); sum.AppliedIndex != a.index || sum.Range.GetGroupId() != 5 {
					t.Errorf("range %d: applied %d, group %d; want %d, 5", r.ID(), sum.AppliedIndex, sum.Range.GetGroupId(), a.index)
				}
			}
			if r11, err := s.OpenRange(11, logging.Discard()); err != nil || r11.Group().ID() != 5 {
				t.Fatalf("range 11 opened alone: %v", err)
			}

			// After a restart the same log is skipped.
			want := map[uint64]Summary{}
			for _, r := range g.Spans() {
				want[r.ID()] = r.Summary()
			}
			s2, g2 := reopenGroup(t, s, dir)
			for i, res := range g2.ApplyBatch(a.logs) {
				if res != nil {
					t.Fatalf("replayed entry %d applied again: %v", i+1, res)
				}
			}
			if err := s2.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := spanIDsOf(g2); !slices.Equal(got, tc.spans) {
				t.Fatalf("reopened spans %v, want %v", got, tc.spans)
			}
			for _, r := range g2.Spans() {
				if got, w := r.Summary(), want[r.ID()]; !proto.Equal(got.Range, w.Range) || got.EntityCount != w.EntityCount ||
					got.Bytes != w.Bytes || got.AppliedIndex != w.AppliedIndex {
					t.Errorf("range %d after the replay: %+v, want %+v", r.ID(), got, w)
				}
			}
		})
	}
}

func TestSplitSpanRefusals(t *testing.T) {
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
	cases := []struct {
		name  string
		descs []*pb.RangeDescriptor
		prep  func(a *groupApplier)
		span  uint64
		key   string
		newID uint64
		want  error
	}{
		{"no new range id", oneSpan(0), nil, 0, "m", 0, ErrBadCommand},
		{"key empty", oneSpan(0), nil, 0, "", 11, ErrBadSplitKey},
		{"key below the start", oneSpan(0), nil, 0, "0", 11, ErrBadSplitKey},
		{"key at the start", oneSpan(0), nil, 0, "a", 11, ErrBadSplitKey},
		{"key at the end", oneSpan(0), nil, 0, "y", 11, ErrBadSplitKey},
		{"key past the end", oneSpan(0), nil, 0, "z", 11, ErrBadSplitKey},
		{"frozen", oneSpan(0), freeze, 0, "m", 11, ErrRangeFrozen},
		{"new id is the span", oneSpan(0), nil, 0, "m", 5, ErrRangeExists},
		{"new id is another span of the group", twoSpans, nil, 5, "c", 9, ErrRangeExists},
		{"new id is the group's name, its span gone", twoSpans, dropFive, 9, "t", 5, ErrRangeExists},
		{"span not the group's", twoSpans, nil, 77, "c", 11, ErrRangeNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, g := openGroupStore(t, t.TempDir(), tc.descs)
			h := &spanHooks{}
			g.SetHooks(h)
			a := &groupApplier{t: t, g: g, clock: 1_000_000}
			for _, d := range tc.descs {
				if res := a.batch(insertTo(d.GetRangeId(), d.GetStart()+"x")); res.Batch[0].Err != nil {
					t.Fatal(res.Batch[0].Err)
				}
			}
			if tc.prep != nil {
				tc.prep(a)
			}
			refusedUnchanged(t, s, g, h, "split", tc.want, func() *Result { return a.entry(splitSpanEntry(t, tc.span, tc.key, tc.newID)) })
		})
	}
}

// TestSplitSpanRepeat: a split proposed again after it applied answers its
// result and changes nothing, as a split does (splitAlready).
func TestSplitSpanRepeat(t *testing.T) {
	s, g := openGroupStore(t, t.TempDir(), oneSpan(0))
	h := &spanHooks{}
	g.SetHooks(h)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	if res := a.batch(insertTo(0, "c"), insertTo(0, "q"), insertTo(0, "r")); res.Batch[2].Err != nil {
		t.Fatal(res.Batch[2].Err)
	}
	r5, _ := g.Span(5)
	orig := r5.State()
	epoch := func() uint64 {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		return s.tablePrune(7).epoch
	}
	was := epoch()
	first := a.entry(splitSpanEntry(t, 0, "m", 11))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	// Both spans' prune cursors start over.
	if epoch() == was {
		t.Error("the split left the table's prune cursors valid")
	}
	// The new span: the parent's clock, its counts moved, born at the
	// split's index, no birth recorded (no group to create).
	r11, _ := g.Span(11)
	ls, rs := r5.State(), r11.State()
	if rs.GetLastTimestampUnixNano() != orig.GetLastTimestampUnixNano() || ls.GetLastTimestampUnixNano() != orig.GetLastTimestampUnixNano() {
		t.Errorf("clocks %d and %d, parent's %d", ls.GetLastTimestampUnixNano(), rs.GetLastTimestampUnixNano(), orig.GetLastTimestampUnixNano())
	}
	if ls.GetEntityCount() != 1 || rs.GetEntityCount() != 2 || ls.GetBytes()+rs.GetBytes() != orig.GetBytes() || ls.GetBytes() == 0 {
		t.Errorf("counts %d/%d and %d/%d, parent's %d/%d", ls.GetEntityCount(), ls.GetBytes(), rs.GetEntityCount(), rs.GetBytes(), orig.GetEntityCount(), orig.GetBytes())
	}
	if rs.GetAppliedIndex() != a.index || !rs.GetBootstrap() || len(rs.GetRecentSplits())+len(ls.GetRecentSplits()) != 0 {
		t.Errorf("new span's state %v, left's splits %v", rs, ls.GetRecentSplits())
	}
	freeze, _ := EncodeFor(5, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
	for _, step := range []struct {
		name string
		prep []byte
	}{{"at once", nil}, {"after the left span froze", freeze}} {
		if step.prep != nil {
			if res := a.entry(step.prep); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		before := fileStates(t, s)
		calls, _ := h.calls()
		again := a.entry(splitSpanEntry(t, 0, "m", 11))
		if again.Err != nil || !proto.Equal(again.Range, first.Range) || !proto.Equal(again.Right, first.Right) {
			t.Errorf("%s: repeat answered %v, %v, %v; want %v, %v", step.name, again.Err, again.Range, again.Right, first.Range, first.Right)
		}
		if !sameStates(before, fileStates(t, s)) {
			t.Errorf("%s: the repeat changed the file", step.name)
		}
		if got, created := h.calls(); !slices.Equal(got, calls) || created != 0 || !slices.Equal(spanIDsOf(g), []uint64{5, 11}) {
			t.Errorf("%s: hooks %v (%d created), spans %v", step.name, got, created, spanIDsOf(g))
		}
	}
}

// TestSplitSpanHooks: the server is told a group's spans changed once the
// change is in the file, and not before; the new span is shown from then
// on; no group is created.
func TestSplitSpanHooks(t *testing.T) {
	s, g := openGroupStore(t, t.TempDir(), oneSpan(0))
	h := &spanHooks{}
	g.SetHooks(h)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	a.batch(insertTo(0, "c"))

	// Hold the commit.
	release := make(chan struct{})
	failpoint.Enable("partitionserver/fsm/commit", func() error { <-release; return nil })
	held := true
	unhold := func() {
		if held {
			failpoint.Disable("partitionserver/fsm/commit")
			close(release)
			held = false
		}
	}
	t.Cleanup(unhold)
	a.index++
	res := g.ApplyBatch([]*raft.Log{{Index: a.index, Term: 1, Type: raft.LogCommand, Data: splitSpanEntry(t, 0, "m", 11)}})
	if r, _ := res[0].(*Result); r == nil || r.Err != nil {
		t.Fatalf("split: %v", res[0])
	}
	if _, ok := g.Span(11); ok || !slices.Equal(spanIDsOf(g), []uint64{5}) {
		t.Errorf("span 11 shown before its commit: spans %v", spanIDsOf(g))
	}
	if calls, _ := h.calls(); len(calls) != 0 {
		t.Errorf("told %v before the commit", calls)
	}
	unhold()
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Span(11); !ok {
		t.Fatal("span 11 not shown after its commit")
	}
	want := []string{"5:[5 11]"}
	check := func(step string) {
		t.Helper()
		if calls, created := h.calls(); !slices.Equal(calls, want) || created != 0 {
			t.Fatalf("%s: told %v (%d created), want %v", step, calls, created, want)
		}
	}
	check("split")
	a.batch(insertTo(11, "q"), insertTo(5, "d"))
	check("writes")

	// Another group's entry takes span 11's record (a merge), then span 5's.
	for _, c := range []struct {
		drop uint64
		want string
	}{{11, "5:[5]"}, {5, "5:[]"}} {
		if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRanges).Delete(u64(c.drop)) }); err != nil {
			t.Fatal(err)
		}
		a.batch(insertTo(5, "e"))
		want = append(want, c.want)
		check(fmt.Sprintf("range %d gone", c.drop))
	}
	a.batch(insertTo(5, "f"))
	check("gone group")
}

// TestSplitSpanRestoreOnReplicaThatMissedIt: a replica whose group is
// still one range (group_id 0) installs the two-span snapshot: both spans,
// their rows, and the hook told; installing it again tells nothing.
func TestSplitSpanRestoreOnReplicaThatMissedIt(t *testing.T) {
	whole := []*pb.RangeDescriptor{{RangeId: 5, TableId: 7, Generation: 3, Replicas: []*pb.Replica{{ServerId: "s1"}}}}
	_, g := openGroupStore(t, t.TempDir(), whole)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	before := a.writeBatch(insertTo(0, "c"), insertTo(0, "q"))
	a.entry(before)
	if res := a.entries(splitSpanEntry(t, 0, "m", 11), a.writeBatch(insertTo(11, "r"), insertTo(5, "d"))); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	out := snapshotOf(t, g)
	if !bytes.HasPrefix(out, []byte(groupSnapshotMagic)) {
		t.Fatalf("two spans wrote magic %q", out[:8])
	}

	s2, g2 := openGroupStore(t, t.TempDir(), whole)
	h := &spanHooks{}
	g2.SetHooks(h)
	a2 := &groupApplier{t: t, g: g2, clock: 1_000_000}
	a2.entry(before)
	a2.batch(insertTo(0, "stale"))
	for range 2 {
		if err := g2.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
			t.Fatal(err)
		}
	}
	if calls, created := h.calls(); !slices.Equal(calls, []string{"5:[5 11]"}) || created != 0 {
		t.Errorf("restores told %v (%d created)", calls, created)
	}
	if got := spanIDsOf(g2); !slices.Equal(got, []uint64{5, 11}) || g2.AppliedIndex() != a.index {
		t.Fatalf("restored spans %v at %d", got, g2.AppliedIndex())
	}
	for _, r := range g2.Spans() {
		w, _ := g.Span(r.ID())
		got, err := r.Scan(ScanOptions{})
		exp, _ := w.Scan(ScanOptions{})
		if err != nil || len(got.Entities) != 2 || len(exp.Entities) != 2 || !proto.Equal(r.State(), w.State()) {
			t.Errorf("range %d restored %d entities (%v), state %v; want %d, %v", r.ID(), len(got.Entities), err, r.State(), len(exp.Entities), w.State())
		}
	}
	for _, st := range fileStates(t, s2) {
		if st.GetRange().GetGroupId() != 5 {
			t.Errorf("record of range %d names group %d", st.GetRange().GetRangeId(), st.GetRange().GetGroupId())
		}
	}
	r5, _ := g2.Span(5)
	if _, err := r5.Get("stale", "r"); !errors.Is(err, ErrKeyOutOfRange) {
		t.Errorf("stale row: %v", err)
	}
	r11, _ := g2.Span(11)
	if _, err := r11.Get("stale", "r"); !errors.Is(err, ErrEntityNotFound) {
		t.Errorf("stale row survived the restore: %v", err)
	}
	// The replica serves both spans from there on.
	a2.index = g2.AppliedIndex()
	if res := a2.batch(insertTo(11, "s"), insertTo(5, "e")); res.Batch[0].Err != nil || res.Batch[1].Err != nil {
		t.Fatal(res.Batch[0].Err, res.Batch[1].Err)
	}
}

// TestSplitSpanReplacesRecordStoredAhead: a record of the new range id
// stored here by mistake (its own group, opened) is replaced: the split
// applies here as on replicas that never held it, and the group that
// held it drops it instead of writing its state back.
func TestSplitSpanReplacesRecordStoredAhead(t *testing.T) {
	ahead := &pb.RangeDescriptor{RangeId: 11, TableId: 7, Start: "m", End: "y", Generation: 1}
	s, g := openGroupStore(t, t.TempDir(), append(oneSpan(0), ahead))
	r11, err := s.OpenRange(11, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	h11 := &spanHooks{}
	r11.SetHooks(h11)
	a11 := &groupApplier{t: t, g: r11.Group(), clock: 1}
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	a.batch(insertTo(0, "q"))
	res := a.entry(splitSpanEntry(t, 0, "m", 11))
	if res.Err != nil || res.Right.GetGroupId() != 5 {
		t.Fatalf("split over a record stored ahead: %v, %v", res.Err, res.Right)
	}
	if res := a11.batch(insertTo(11, "r")); !errors.Is(res.Err, ErrRangeNotFound) {
		t.Fatalf("group 11 after its record went to group 5: %v", res.Err)
	}
	if calls, _ := h11.calls(); !slices.Equal(calls, []string{"11:[]"}) || !r11.Frozen() {
		t.Errorf("group 11 told %v, frozen %v", calls, r11.Frozen())
	}
	if st := fileStates(t, s)[11]; st.GetRange().GetGroupId() != 5 || st.GetEntityCount() != 1 {
		t.Fatalf("record of range 11: %v", st)
	}
	right, _ := g.Span(11)
	if _, err := right.Get("q", "r"); err != nil {
		t.Fatal(err)
	}
	if _, err := right.Get("r", "r"); !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("group 11 wrote after losing its span: %v", err)
	}
	// Nor does group 11 read it: the record names group 5, whose log
	// this group's replica does not follow (invariant 4).
	if _, err := r11.Get("q", "r"); !errors.Is(err, ErrRangeNotFound) {
		t.Fatalf("group 11 read a range group 5 serves: %v", err)
	}
	if _, err := r11.Scan(ScanOptions{}); !errors.Is(err, ErrRangeNotFound) {
		t.Fatalf("group 11 scanned a range group 5 serves: %v", err)
	}
}
