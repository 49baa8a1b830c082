package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/edm"
	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// These tests store a group of several spans directly, without the split
// that makes one (SPLIT_SPAN, splitspan_test.go): group 5 serves range 5,
// [a, m), and range 9, [m, y), of table 7.

var twoSpans = []*pb.RangeDescriptor{
	{RangeId: 5, GroupId: 5, TableId: 7, Start: "a", End: "m", Generation: 3, Replicas: []*pb.Replica{{ServerId: "s1"}}},
	{RangeId: 9, GroupId: 5, TableId: 7, Start: "m", End: "y", Generation: 3, Replicas: []*pb.Replica{{ServerId: "s1"}}},
}

// openGroupStore stores descs in a new file at dir and opens group 5.
func openGroupStore(t *testing.T, dir string, descs []*pb.RangeDescriptor) (*Store, *Group) {
	t.Helper()
	return groupStoreOf(t, descs, func() (*Store, error) { return Open(filepath.Join(dir, "state.db")) })
}

// groupStoreOf stores descs in the file open opens and opens group 5.
func groupStoreOf(t *testing.T, descs []*pb.RangeDescriptor, open func() (*Store, error)) (*Store, *Group) {
	t.Helper()
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, d := range descs {
		if err := s.CreateRange(d, true); err != nil {
			t.Fatal(err)
		}
	}
	g, err := s.OpenGroup(5, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s, g
}

// groupApplier proposes entries to a group, as its leader would.
type groupApplier struct {
	t     *testing.T
	g     *Group
	index uint64
	clock int64
	// logs are the entries applied, for a replay.
	logs []*raft.Log
}

func (a *groupApplier) entry(data []byte) *Result {
	a.t.Helper()
	return a.entries(data)[0]
}

// entries applies data as consecutive entries of one batch, then commits.
func (a *groupApplier) entries(data ...[]byte) []*Result {
	a.t.Helper()
	var logs []*raft.Log
	for _, d := range data {
		a.index++
		logs = append(logs, &raft.Log{Index: a.index, Term: 1, Type: raft.LogCommand, Data: d})
	}
	a.logs = append(a.logs, logs...)
	res := a.g.ApplyBatch(logs)
	if err := a.g.store.Flush(); err != nil {
		a.t.Fatal(err)
	}
	out := make([]*Result, len(res))
	for i, r := range res {
		out[i], _ = r.(*Result)
	}
	return out
}

// writeBatch is the WRITE_BATCH entry of writes, each naming its span.
func (a *groupApplier) writeBatch(writes ...*pb.WriteCommand) []byte {
	a.t.Helper()
	for _, w := range writes {
		a.clock += 1000
		w.ProposedUnixNano = a.clock
	}
	data, err := EncodeWriteBatch(writes)
	if err != nil {
		a.t.Fatal(err)
	}
	return data
}

// batch applies writes as one WRITE_BATCH entry; each names its span.
func (a *groupApplier) batch(writes ...*pb.WriteCommand) *Result {
	a.t.Helper()
	return a.entry(a.writeBatch(writes...))
}

func insertTo(span uint64, pk string) *pb.WriteCommand {
	return &pb.WriteCommand{RangeId: span, Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, pk, "r", edm.MarshalBinary(&edm.Entity{}))}}
}

func TestGroupOpensItsSpans(t *testing.T) {
	s, g := openGroupStore(t, t.TempDir(), append(twoSpans, &pb.RangeDescriptor{RangeId: 6, TableId: 7, Start: "z"}))
	if got := spanIDsOf(g); !slices.Equal(got, []uint64{5, 9}) {
		t.Fatalf("group 5 spans %v, want [5 9]", got)
	}
	// A range opened by itself comes with its whole group.
	r, err := s.OpenRange(9, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if r.Group().ID() != 5 || !slices.Equal(spanIDsOf(r.Group()), []uint64{5, 9}) {
		t.Fatalf("range 9 opened in group %d with spans %v", r.Group().ID(), spanIDsOf(r.Group()))
	}
	// A range whose record names no group is its own group's only span.
	r6, err := s.OpenRange(6, logging.Discard())
	if err != nil || r6.Group().ID() != 6 || len(r6.Group().Spans()) != 1 {
		t.Fatalf("range 6: %v", err)
	}
	if _, err := s.OpenGroup(77, logging.Discard()); !errors.Is(err, ErrRangeNotFound) {
		t.Fatalf("OpenGroup of no span: %v", err)
	}
}

func spanIDsOf(g *Group) []uint64 {
	var ids []uint64
	for _, r := range g.Spans() {
		ids = append(ids, r.ID())
	}
	return ids
}

func TestGroupWritesAddressSpans(t *testing.T) {
	_, g := openGroupStore(t, t.TempDir(), twoSpans)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	res := a.batch(insertTo(5, "b"), insertTo(9, "q"), insertTo(9, "c"), insertTo(77, "q"), insertTo(0, "d"))
	for i, want := range []error{nil, nil, ErrKeyOutOfRange, ErrRangeNotFound, nil} {
		if got := res.Batch[i].Err; !errors.Is(got, want) || (want == nil && got != nil) {
			t.Errorf("write %d: %v, want %v", i, got, want)
		}
	}
	left, _ := g.Span(5)
	right, _ := g.Span(9)
	for _, c := range []struct {
		r       *Range
		pk      string
		present bool
		count   uint64
	}{{left, "b", true, 2}, {left, "d", true, 2}, {right, "q", true, 1}} {
		if _, err := c.r.Get(c.pk, "r"); (err == nil) != c.present {
			t.Errorf("range %d: Get(%s): %v", c.r.ID(), c.pk, err)
		}
		if n := c.r.State().GetEntityCount(); n != c.count {
			t.Errorf("range %d counts %d entities, want %d", c.r.ID(), n, c.count)
		}
	}
	// Every span's record carries the group's applied index, and each
	// span keeps its own clock.
	for _, r := range g.Spans() {
		if s := r.Summary(); s.AppliedIndex != 1 {
			t.Errorf("range %d applied %d, want 1", r.ID(), s.AppliedIndex)
		}
	}
	if left.State().GetLastTimestampUnixNano() == right.State().GetLastTimestampUnixNano() {
		t.Error("spans share one clock")
	}
	// A single write addressed by its envelope.
	data, _ := EncodeFor(9, pb.CommandKind_COMMAND_KIND_WRITE, insertTo(0, "x"))
	if res := a.entry(data); res.Err != nil {
		t.Fatal(res.Err)
	}
	if _, err := right.Get("x", "r"); err != nil {
		t.Fatal(err)
	}
	// A span-addressed command naming no span of the group is refused
	// without effect.
	data, _ = EncodeFor(77, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
	if res := a.entry(data); !errors.Is(res.Err, ErrRangeNotFound) {
		t.Fatalf("freeze of range 77 in group 5: %v", res.Err)
	}
}

// TestGroupReplaySkipsApplied: after a restart the group skips entries any
// span's record says were applied, and applies the rest once.
func TestGroupReplaySkipsApplied(t *testing.T) {
	dir := t.TempDir()
	s, g := openGroupStore(t, dir, twoSpans)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	var logs []*raft.Log
	for i, pk := range []string{"b", "q", "c", "r"} {
		span := uint64(5)
		if pk >= "m" {
			span = 9
		}
		w := insertTo(span, pk)
		w.ProposedUnixNano = int64(i+1) * 1000
		data, _ := EncodeWriteBatch([]*pb.WriteCommand{w})
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data})
	}
	a.g.ApplyBatch(logs[:2])
	s2, g2 := reopenGroup(t, s, dir)
	g2.ApplyBatch(logs) // 1 and 2 again, 3 and 4 new
	if err := s2.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, r := range g2.Spans() {
		if st := r.Summary(); st.EntityCount != 2 || st.AppliedIndex != 4 {
			t.Errorf("range %d: %d entities applied to %d, want 2 at 4", r.ID(), st.EntityCount, st.AppliedIndex)
		}
	}
}

func TestGroupSnapshotRestore(t *testing.T) {
	_, g := openGroupStore(t, t.TempDir(), twoSpans)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	for i := range 20 {
		pk := fmt.Sprintf("%c%02d", 'b'+byte(i%20), i)
		span := uint64(5)
		if pk >= "m" {
			span = 9
		}
		if res := a.batch(insertTo(span, pk)); res.Batch[0].Err != nil {
			t.Fatal(res.Batch[0].Err)
		}
	}
	out := snapshotOf(t, g)
	if !bytes.HasPrefix(out, []byte(groupSnapshotMagic)) {
		t.Fatalf("a group of two spans wrote magic %q", out[:8])
	}
	if st, err := snapshotState(bytes.NewReader(out)); err != nil || st.GetAppliedIndex() != 20 {
		t.Fatalf("header: %v, %v", st, err)
	}

	// The replica restoring it holds group 5 as one span over the whole
	// table (it missed the split), stale rows in it, and the table's
	// range 6 of another group, whose rows stay.
	s2, g2 := openGroupStore(t, t.TempDir(), []*pb.RangeDescriptor{
		{RangeId: 5, GroupId: 5, TableId: 7, Start: "a", End: "zz", Generation: 2},
		{RangeId: 6, TableId: 7, Start: "zz", Generation: 1},
	})
	stale := &groupApplier{t: t, g: g2, clock: 1}
	stale.batch(insertTo(5, "stale"))
	r6, _ := s2.OpenRange(6, logging.Discard())
	(&groupApplier{t: t, g: r6.Group(), clock: 1}).batch(insertTo(6, "zzz"))
	old5, _ := g2.Span(5)
	if err := g2.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
		t.Fatal(err)
	}
	if got := spanIDsOf(g2); !slices.Equal(got, []uint64{5, 9}) || g2.AppliedIndex() != 20 {
		t.Fatalf("restored spans %v at %d", got, g2.AppliedIndex())
	}
	if r5, _ := g2.Span(5); r5 != old5 || r5.Descriptor().GetEnd() != "m" {
		t.Fatalf("range 5 after restore: %v (same object %v)", r5.Descriptor(), r5 == old5)
	}
	for _, r := range g2.Spans() {
		want, _ := g.Span(r.ID())
		got, err := r.Scan(ScanOptions{})
		exp, _ := want.Scan(ScanOptions{})
		if err != nil || len(got.Entities) != len(exp.Entities) || r.State().GetEntityCount() != want.State().GetEntityCount() {
			t.Errorf("range %d restored %d entities (%v), want %d", r.ID(), len(got.Entities), err, len(exp.Entities))
		}
	}
	if _, err := old5.Get("stale", "r"); !errors.Is(err, ErrEntityNotFound) && !errors.Is(err, ErrKeyOutOfRange) {
		t.Errorf("stale row survived the restore: %v", err)
	}
	r9, _ := g2.Span(9)
	if _, err := r9.Get("stale", "r"); !errors.Is(err, ErrEntityNotFound) {
		t.Errorf("stale row survived the restore: %v", err)
	}
	if _, err := r6.Get("zzz", "r"); err != nil {
		t.Errorf("another group's row lost: %v", err)
	}

	// A snapshot of another group is refused, and one of a group that is
	// one range keeps the one-range format older servers install.
	if err := r6.Restore(io.NopCloser(bytes.NewReader(out))); !errors.Is(err, ErrCorruptSnapshot) {
		t.Fatalf("group 5's snapshot restored into group 6: %v", err)
	}
	if legacy := snapshotOf(t, r6); !bytes.HasPrefix(legacy, []byte(snapshotMagic)) {
		t.Fatalf("a one-range group wrote magic %q", legacy[:8])
	}
}

// TestGroupMembershipAndMerge: a membership change rewrites every span
// and is refused while any is frozen; a merge of two spans of one group is
// not the cross-group merge and is refused.
func TestGroupMembershipAndMerge(t *testing.T) {
	_, g := openGroupStore(t, t.TempDir(), twoSpans)
	a := &groupApplier{t: t, g: g, clock: 1}
	set, _ := Encode(pb.CommandKind_COMMAND_KIND_SET_REPLICAS, &pb.SetReplicasCommand{Replicas: []*pb.Replica{{ServerId: "s1"}, {ServerId: "s2"}}})
	if res := a.entry(set); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, r := range g.Spans() {
		if d := r.Descriptor(); len(d.GetReplicas()) != 2 || d.GetGeneration() != 4 {
			t.Errorf("range %d after set replicas: %v", r.ID(), d)
		}
	}
	merge, _ := Encode(pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: twoSpans[1], RightFreezeIndex: 1})
	if res := a.entry(merge); !errors.Is(res.Err, ErrBadCommand) {
		t.Fatalf("merge of a span of the same group: %v", res.Err)
	}
	freeze, _ := EncodeFor(9, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
	if res := a.entry(freeze); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := a.entry(set); !errors.Is(res.Err, ErrRangeFrozen) {
		t.Fatalf("set replicas with range 9 frozen: %v", res.Err)
	}
	if r5, _ := g.Span(5); r5.Frozen() {
		t.Fatal("freezing range 9 froze range 5")
	}
}

// TestGroupMembershipWithoutItsNamesake: a group whose namesake span was
// merged away still records its membership changes (a SET_REPLICAS that
// names no span is the group's).
func TestGroupMembershipWithoutItsNamesake(t *testing.T) {
	s, g := openGroupStore(t, t.TempDir(), twoSpans)
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRanges).Delete(u64(5)) }); err != nil {
		t.Fatal(err)
	}
	a := &groupApplier{t: t, g: g, clock: 1}
	set, _ := Encode(pb.CommandKind_COMMAND_KIND_SET_REPLICAS, &pb.SetReplicasCommand{Replicas: []*pb.Replica{{ServerId: "s2"}}})
	res := a.entry(set)
	if res.Err != nil || res.Range.GetRangeId() != 9 {
		t.Fatalf("set replicas: %v, %v", res.Range, res.Err)
	}
	if r9, _ := g.Span(9); r9.Descriptor().GetReplicas()[0].GetServerId() != "s2" {
		t.Fatalf("range 9 after set replicas: %v", r9.Descriptor())
	}
}

// TestGroupSpanMergedAway: another group's entry deletes one span's record
// (a merge took it over); the group goes on serving the other.
func TestGroupSpanMergedAway(t *testing.T) {
	s, g := openGroupStore(t, t.TempDir(), twoSpans)
	a := &groupApplier{t: t, g: g, clock: 1}
	r9, _ := g.Span(9)
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRanges).Delete(u64(9)) }); err != nil {
		t.Fatal(err)
	}
	res := a.batch(insertTo(9, "q"), insertTo(5, "b"))
	if !errors.Is(res.Batch[0].Err, ErrRangeNotFound) || res.Batch[1].Err != nil {
		t.Fatalf("after range 9 went: %v, %v", res.Batch[0].Err, res.Batch[1].Err)
	}
	if !r9.Frozen() || !slices.Equal(spanIDsOf(g), []uint64{5}) {
		t.Fatalf("range 9 frozen %v, spans %v", r9.Frozen(), spanIDsOf(g))
	}
	if ok, _ := s.HasRange(9); ok {
		t.Fatal("the group wrote range 9's state back")
	}
	// Then the last span: the group is over.
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRanges).Delete(u64(5)) }); err != nil {
		t.Fatal(err)
	}
	if res := a.batch(insertTo(5, "c")); !errors.Is(res.Err, ErrRangeNotFound) {
		t.Fatalf("write to a group with no span: %v", res.Err)
	}
}

// TestRecordGroup: the group id read from an encoded state without
// decoding it is the generated code's.
func TestRecordGroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		st := &pb.RangeState{AppliedIndex: rng.Uint64(), Bootstrap: rng.IntN(2) == 0,
			Range: &pb.RangeDescriptor{RangeId: rng.Uint64(), TableId: rng.Uint64(), Start: "s", End: "e",
				GroupId: uint64(rng.IntN(3)) * rng.Uint64(), Replicas: []*pb.Replica{{ServerId: "x"}}},
			RecentSplits: []*pb.SplitBirth{{Index: 3, Right: &pb.RangeDescriptor{RangeId: 4, GroupId: rng.Uint64()}}}}
		b, _ := proto.Marshal(st)
		g, err := recordGroup(b)
		if err != nil || g != st.GetRange().GetGroupId() {
			t.Fatalf("recordGroup = %d, %v; want %d", g, err, st.GetRange().GetGroupId())
		}
	}
	if _, err := recordGroup([]byte{0x0a, 0x05, 0x40}); err == nil {
		t.Fatal("truncated record read")
	}
}

// replayUnchanged reopens group 5's file, replays logs over it (a
// restart: every entry applied before), and fails unless the file's
// records are as they were. It returns the reopened group.
func replayUnchanged(t *testing.T, s *Store, dir string, logs []*raft.Log) *Group {
	t.Helper()
	before := fileStates(t, s)
	s2, g2 := reopenGroup(t, s, dir)
	g2.ApplyBatch(logs)
	if err := s2.Flush(); err != nil {
		t.Fatal(err)
	}
	if after := fileStates(t, s2); !sameStates(before, after) {
		t.Fatalf("replay changed the file: %v, was %v", after, before)
	}
	return g2
}

// reopenGroup closes s (a crash would lose only what the log replays),
// opens its file at dir again and group 5 in it; the new store closes with
// the test.
func reopenGroup(t *testing.T, s *Store, dir string) (*Store, *Group) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	g2, err := s2.OpenGroup(5, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s2, g2
}

// TestGroupOfTwoTables: a group's spans may be ranges of different tables
// (docs/range-groups.md, stage 7, whose create is not built): each span's
// rows stay in its own table's bucket, the same PartitionKey in both
// tables is two entities, one batch writes both, and a snapshot carries
// both tables' rows to a replica that held only one of the spans.
func TestGroupOfTwoTables(t *testing.T) {
	twoTables := []*pb.RangeDescriptor{
		{RangeId: 5, GroupId: 5, TableId: 7, Start: "", End: "", Generation: 1, Replicas: []*pb.Replica{{ServerId: "s1"}}},
		{RangeId: 9, GroupId: 5, TableId: 8, Start: "", End: "", Generation: 1, Replicas: []*pb.Replica{{ServerId: "s1"}}},
	}
	_, g := openGroupStore(t, t.TempDir(), twoTables)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	res := a.batch(insertTo(5, "b"), insertTo(9, "b"), insertTo(9, "c"), insertTo(5, "b"))
	for i, want := range []error{nil, nil, nil, ErrEntityExists} {
		if got := res.Batch[i].Err; !errors.Is(got, want) || (want == nil && got != nil) {
			t.Errorf("write %d: %v, want %v", i, got, want)
		}
	}
	check := func(g *Group, when string) {
		t.Helper()
		for _, c := range []struct {
			span  uint64
			pks   []string
			count uint64
		}{{5, []string{"b"}, 1}, {9, []string{"b", "c"}, 2}} {
			r, ok := g.Span(c.span)
			if !ok {
				t.Fatalf("%s: no span %d", when, c.span)
			}
			got, err := r.Scan(ScanOptions{})
			if err != nil || len(got.Entities) != len(c.pks) || r.State().GetEntityCount() != c.count {
				t.Errorf("%s: range %d (table %d) scans %d entities (%v), counts %d; want %d", when, c.span,
					r.Descriptor().GetTableId(), len(got.Entities), err, r.State().GetEntityCount(), c.count)
			}
			for _, pk := range c.pks {
				if _, err := r.Get(pk, "r"); err != nil {
					t.Errorf("%s: range %d Get(%s): %v", when, c.span, pk, err)
				}
			}
		}
	}
	check(g, "applied")
	out := snapshotOf(t, g)
	_, g2 := openGroupStore(t, t.TempDir(), twoTables[:1])
	if err := g2.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
		t.Fatal(err)
	}
	if got := spanIDsOf(g2); !slices.Equal(got, []uint64{5, 9}) {
		t.Fatalf("restored spans %v, want [5 9]", got)
	}
	check(g2, "restored")
}

// TestBatchWritesOnlyChangedSpans: a batch writes back the spans it
// changed and the namesake, which carries the group's applied index; an
// untouched span's record keeps a lower bound. Every reader sees the
// group's index (Summary, State, a snapshot's spans), a restart opens at
// it and skips what was applied, and a snapshot restores on a replica.
func TestBatchWritesOnlyChangedSpans(t *testing.T) {
	dir := t.TempDir()
	three := []*pb.RangeDescriptor{
		{RangeId: 5, GroupId: 5, TableId: 7, Start: "a", End: "m", Generation: 3},
		{RangeId: 9, GroupId: 5, TableId: 7, Start: "m", End: "t", Generation: 3},
		{RangeId: 12, GroupId: 5, TableId: 7, Start: "t", End: "y", Generation: 3},
	}
	s, g := openGroupStore(t, dir, three)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	for _, pk := range []string{"n", "o", "p"} {
		if res := a.batch(insertTo(9, pk)); res.Err != nil || res.Batch[0].Err != nil {
			t.Fatal(res.Err, res.Batch[0].Err)
		}
	}
	stored := func(s *Store) map[uint64]uint64 {
		sts, err := s.RangeStates()
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint64]uint64{}
		for _, st := range sts {
			out[st.GetRange().GetRangeId()] = st.GetAppliedIndex()
		}
		return out
	}
	if got, want := stored(s), map[uint64]uint64{5: 3, 9: 3, 12: 0}; !maps.Equal(got, want) {
		t.Fatalf("records' applied indexes %v, want %v (the written span and the namesake)", got, want)
	}
	for _, r := range g.Spans() {
		if sum, st := r.Summary(), r.State(); sum.AppliedIndex != 3 || st.GetAppliedIndex() != 3 {
			t.Errorf("range %d reads applied %d (summary), %d (state), want the group's 3", r.ID(), sum.AppliedIndex, st.GetAppliedIndex())
		}
	}
	out := snapshotOf(t, g)
	if st, err := snapshotState(bytes.NewReader(out)); err != nil || st.GetAppliedIndex() != 3 {
		t.Fatalf("snapshot header: %v, %v", st, err)
	}
	_, g2 := openGroupStore(t, t.TempDir(), three[:1])
	if err := g2.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
		t.Fatalf("a snapshot of spans whose records were written at different batches: %v", err)
	}
	if got := spanIDsOf(g2); !slices.Equal(got, []uint64{5, 9, 12}) || g2.AppliedIndex() != 3 {
		t.Fatalf("restored spans %v at %d", got, g2.AppliedIndex())
	}

	// A restart opens the group at 3 and skips entries 1 - 3; the next
	// batch, to the untouched span, writes it and the namesake only.
	g3 := replayUnchanged(t, s, dir, a.logs)
	if g3.AppliedIndex() != 3 {
		t.Fatalf("reopened at %d, want 3", g3.AppliedIndex())
	}
	a3 := &groupApplier{t: t, g: g3, index: 3, clock: a.clock}
	if res := a3.batch(insertTo(12, "u")); res.Err != nil || res.Batch[0].Err != nil {
		t.Fatal(res.Err, res.Batch[0].Err)
	}
	if got, want := stored(g3.store), map[uint64]uint64{5: 4, 9: 3, 12: 4}; !maps.Equal(got, want) {
		t.Fatalf("after a write to range 12: %v, want %v", got, want)
	}
	r9, _ := g3.Span(9)
	if n := r9.Summary().EntityCount; n != 3 {
		t.Errorf("range 9 holds %d entities after the replay, want 3", n)
	}
}
