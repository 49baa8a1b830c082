package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// Tests of ATTACH_SPAN (docs/range-groups.md, stage 8): range 30, table
// 130, the only range of a Raft group of its own in the same file as
// group 5, frozen and taken into group 5 as a span.

// attachHooks records SpansChanged (spanHooks) and RangeAttached calls.
type attachHooks struct {
	spanHooks
	amu      sync.Mutex
	attached []string
}

func (h *attachHooks) RangeAttached(group, right uint64) {
	h.amu.Lock()
	defer h.amu.Unlock()
	h.attached = append(h.attached, fmt.Sprintf("%d:%d", group, right))
}

func (h *attachHooks) attachCalls() []string {
	h.amu.Lock()
	defer h.amu.Unlock()
	return slices.Clone(h.attached)
}

// rightDesc is range 30 as created: table 130, whole, replicas of its own.
func rightDesc() *pb.RangeDescriptor {
	return &pb.RangeDescriptor{RangeId: 30, Table: "t130", TableId: 130, Generation: 4,
		Replicas: []*pb.Replica{{ServerId: "s1"}, {ServerId: "s2"}, {ServerId: "s3"}}}
}

// attachFixture opens group 5 (oneSpan(5)) and range 30 in one file at
// dir; range 30 holds rows p and x (x written with request id "req-x",
// whose result is first) and, when freeze, is frozen (index returned).
func attachFixture(t *testing.T, dir string, freeze bool) (s *Store, g *Group, right *Range, ra *groupApplier, retry []byte, first *Result, freezeIndex uint64) {
	return attachFixtureNamed(t, dir, freeze, 5)
}

// attachFixtureNamed is attachFixture with group 5's namesake's record
// naming group names (0: none, its group's only span).
func attachFixtureNamed(t *testing.T, dir string, freeze bool, names uint64) (s *Store, g *Group, right *Range, ra *groupApplier, retry []byte, first *Result, freezeIndex uint64) {
	t.Helper()
	s, g = openGroupStore(t, dir, oneSpan(names))
	if err := s.CreateRange(rightDesc(), true); err != nil {
		t.Fatal(err)
	}
	right, err := s.OpenRange(30, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ra = &groupApplier{t: t, g: right.Group(), clock: 5_000_000}
	if res := ra.batch(insertTo(30, "p")); res.Batch[0].Err != nil {
		t.Fatal(res.Batch[0].Err)
	}
	retry, _ = EncodeWrite(&pb.WriteCommand{ProposedUnixNano: 9_000_000, RequestId: []byte("req-x"), RangeId: 30,
		Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "x", "r", entityBytes(t, nil))}})
	if first = ra.entry(retry); first.Err != nil {
		t.Fatal(first.Err)
	}
	if freeze {
		data, _ := Encode(pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{Generation: 4})
		fr := ra.entry(data)
		if fr.Err != nil || !right.Frozen() {
			t.Fatalf("freeze: %+v", fr)
		}
		freezeIndex = fr.Index
	}
	return s, g, right, ra, retry, first, freezeIndex
}

func attachEntry(t *testing.T, right *pb.RangeDescriptor, freeze uint64) []byte {
	t.Helper()
	data, err := EncodeFor(5, pb.CommandKind_COMMAND_KIND_ATTACH_SPAN, &pb.AttachSpanCommand{Right: right, RightFreezeIndex: freeze})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestAttachSpan: the attach rewrites range 30's record to name group 5
// (generation + 1, the group's replicas, unfrozen, its counters and clock
// kept), serves its rows and request records through the group from the
// entry on (a write in the same batch included), tells the hooks, ends
// range 30's own group (a late batch of it applies nothing), answers a
// repeat, and survives a snapshot and a replay (a restart opens the span
// through the namesake too, whose record names the group from the entry
// on).
func TestAttachSpan(t *testing.T) {
	for _, names := range []uint64{0, 5} {
		t.Run(fmt.Sprintf("namesake names group %d", names), func(t *testing.T) { testAttachSpan(t, names) })
	}
}

func testAttachSpan(t *testing.T, names uint64) {
	dir := t.TempDir()
	s, g, right, ra, retry, first, freeze := attachFixtureNamed(t, dir, true, names)
	h := &attachHooks{}
	g.SetHooks(h)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	was := right.State()
	r5, _ := g.Span(5)
	namesake := r5.Descriptor()
	epoch := func() uint64 {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		return s.tablePrune(130).epoch
	}
	before := epoch()
	frozen := snapshotOf(t, right.Group())

	res := a.entries(attachEntry(t, right.Descriptor(), freeze), a.writeBatch(insertTo(30, "q")))
	if res[0].Err != nil || res[1].Batch[0].Err != nil {
		t.Fatalf("attach: %v, write after it: %v", res[0].Err, res[1].Batch[0].Err)
	}
	want := proto.Clone(rightDesc()).(*pb.RangeDescriptor)
	want.GroupId, want.Generation, want.Replicas = 5, 5, namesake.GetReplicas()
	if !proto.Equal(res[0].Range, want) {
		t.Fatalf("attach answered %v, want %v", res[0].Range, want)
	}
	if got := spanIDsOf(g); !slices.Equal(got, []uint64{5, 30}) {
		t.Fatalf("group 5 spans %v, want [5 30]", got)
	}
	if calls, _ := h.calls(); !slices.Equal(calls, []string{"5:[5 30]"}) {
		t.Errorf("SpansChanged calls %v", calls)
	}
	if got := h.attachCalls(); !slices.Equal(got, []string{"5:30"}) {
		t.Errorf("RangeAttached calls %v, want [5:30]", got)
	}
	if epoch() == before {
		t.Error("the attach left table 130's prune cursors valid")
	}
	r30, ok := g.Span(30)
	if !ok {
		t.Fatal("group 5 does not serve range 30")
	}
	st := r30.State()
	if st.GetFrozen() || st.GetFrozenIndex() != 0 || st.GetEntityCount() != was.GetEntityCount()+1 ||
		st.GetLastTimestampUnixNano() <= was.GetLastTimestampUnixNano() || !proto.Equal(st.GetRange(), want) {
		t.Errorf("span 30 after the attach: %v (its own group's was %v)", st, was)
	}
	for _, pk := range []string{"p", "x", "q"} {
		if _, err := r30.Get(pk, "r"); err != nil {
			t.Errorf("Get(%s) through group 5: %v", pk, err)
		}
	}
	// The request record came along: a retry answers its first result.
	if again := a.entry(retry); again.Err != nil || again.TimestampUnixNano != first.TimestampUnixNano {
		t.Errorf("retry through group 5 = %+v, want the first result %d", again, first.TimestampUnixNano)
	}

	// Range 30's own group is over: a late batch applies nothing and
	// does not take the record back.
	data, _ := Encode(pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
	if got := ra.entry(data); !errors.Is(got.Err, ErrRangeNotFound) {
		t.Fatalf("batch of range 30's own group after the attach: %+v", got)
	}
	if !right.Frozen() {
		t.Error("range 30's old replica serves again")
	}
	if rs, _ := s.RangeState(30); rs.GetRange().GetGroupId() != 5 || rs.GetFrozen() {
		t.Fatalf("record of range 30 after its own group's batch: %v", rs)
	}
	// And its old snapshot, restored into it (its group still running
	// here a moment), leaves the record group 5's.
	if err := ra.g.Restore(io.NopCloser(bytes.NewReader(frozen))); !errors.Is(err, ErrRangeNotFound) {
		t.Errorf("restore of range 30's own snapshot after the attach: %v", err)
	}
	if rs, _ := s.RangeState(30); rs.GetRange().GetGroupId() != 5 || rs.GetFrozen() {
		t.Fatalf("record of range 30 after its own group's restore: %v", rs)
	}

	// A repeat answers the span and changes nothing.
	states := fileStates(t, s)
	if again := a.entry(attachEntry(t, right.Descriptor(), freeze)); again.Err != nil || !proto.Equal(again.Range, want) {
		t.Fatalf("repeat answered %v, %v", again.Range, again.Err)
	}
	if !sameStates(states, fileStates(t, s)) || len(h.attachCalls()) != 1 {
		t.Fatalf("the repeat changed the file or told the hooks again: %v", h.attachCalls())
	}

	// A snapshot carries the span: to a replica that never applied the
	// attach (range 30 frozen in its own group there, which ends) and to
	// a new one.
	out := snapshotOf(t, g)
	for _, missed := range []bool{true, false} {
		t.Run(fmt.Sprintf("restore, replica held range 30: %v", missed), func(t *testing.T) {
			var g2 *Group
			if missed {
				_, g2, _, _, _, _, _ = attachFixture(t, t.TempDir(), true)
			} else {
				_, g2 = openGroupStore(t, t.TempDir(), oneSpan(5))
			}
			h2 := &attachHooks{}
			g2.SetHooks(h2)
			if err := g2.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
				t.Fatal(err)
			}
			if got := spanIDsOf(g2); !slices.Equal(got, []uint64{5, 30}) {
				t.Fatalf("restored spans %v", got)
			}
			r, _ := g2.Span(30)
			if !proto.Equal(r.Descriptor(), want) || r.State().GetEntityCount() != 3 {
				t.Errorf("restored span 30: %v", r.State())
			}
			for _, pk := range []string{"p", "x", "q"} {
				if _, err := r.Get(pk, "r"); err != nil {
					t.Errorf("restored Get(%s): %v", pk, err)
				}
			}
			wantHook := []string(nil)
			if missed {
				wantHook = []string{"5:30"}
			}
			if got := h2.attachCalls(); !slices.Equal(got, wantHook) {
				t.Errorf("RangeAttached on restore: %v, want %v", got, wantHook)
			}
		})
	}

	// A restart replays every entry: nothing applies twice.
	g3 := replayUnchanged(t, s, dir, a.logs)
	if got := spanIDsOf(g3); !slices.Equal(got, []uint64{5, 30}) {
		t.Fatalf("spans after the replay %v", got)
	}
	if r, _ := g3.Span(30); r.State().GetEntityCount() != 3 {
		t.Errorf("span 30 after the replay: %v", r.State())
	}
	r5again, err := g3.store.OpenRange(5, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	wantNames := proto.Clone(namesake).(*pb.RangeDescriptor)
	wantNames.GroupId = 5
	if got := spanIDsOf(r5again.Group()); !slices.Equal(got, []uint64{5, 30}) || !proto.Equal(r5again.Descriptor(), wantNames) {
		t.Errorf("group opened through its namesake after a restart: spans %v, namesake %v", got, r5again.Descriptor())
	}
}

// TestAttachSpanRefusals: refused from the group's state and the command
// alone, identically on every replica, whatever range 30's replica here
// is (not frozen at all in these cases: the file is never read), and
// leaving the file, the spans and the hooks as they were.
func TestAttachSpanRefusals(t *testing.T) {
	s, g, right, _, _, _, _ := attachFixture(t, t.TempDir(), false)
	h := &attachHooks{}
	g.SetHooks(h)
	a := &groupApplier{t: t, g: g, clock: 1_000_000}
	// Range 40 of table 130, [m, ..), is a span of the group.
	add := &pb.RangeDescriptor{RangeId: 40, GroupId: 5, Table: "t130", TableId: 130, Start: "m", Generation: 1}
	if res := a.entry(addSpanEntry(t, 0, add, 40)); res.Err != nil {
		t.Fatal(res.Err)
	}
	h.spanHooks = spanHooks{}
	d := right.Descriptor()
	named := func(f func(d *pb.RangeDescriptor)) *pb.RangeDescriptor {
		c := proto.Clone(d).(*pb.RangeDescriptor)
		f(c)
		return c
	}
	for _, c := range []struct {
		name   string
		right  *pb.RangeDescriptor
		freeze uint64
		want   error
	}{
		{"overlaps a span of the group", d, 2, ErrRangeExists},
		{"names another group", named(func(d *pb.RangeDescriptor) { d.GroupId = 9; d.End = "m" }), 2, ErrNotOwnGroup},
		{"no freeze index", named(func(d *pb.RangeDescriptor) { d.End = "m" }), 0, ErrBadCommand},
		{"the group's own id", named(func(d *pb.RangeDescriptor) { d.RangeId = 5 }), 2, ErrBadCommand},
		{"no table", named(func(d *pb.RangeDescriptor) { d.TableId = 0 }), 2, ErrBadCommand},
	} {
		t.Run(c.name, func(t *testing.T) {
			refusedUnchanged(t, s, g, &h.spanHooks, "attach", c.want, func() *Result { return a.entry(attachEntry(t, c.right, c.freeze)) })
			if got := h.attachCalls(); len(got) != 0 {
				t.Errorf("RangeAttached told %v", got)
			}
		})
	}
}

// TestAttachSpanPanicsOnAnUnfrozenRight: range 30's replica here not
// frozen at exactly the command's index over the command's span stops
// the apply (applyMerge's reasoning: a refusal read from another log
// would fork the group).
func TestAttachSpanPanicsOnAnUnfrozenRight(t *testing.T) {
	for _, c := range []struct {
		name   string
		freeze bool
		index  func(fr uint64) uint64
		right  func(d *pb.RangeDescriptor)
	}{
		{"not frozen", false, func(uint64) uint64 { return 2 }, nil},
		{"frozen at another index", true, func(fr uint64) uint64 { return fr - 1 }, nil},
		{"another span", true, func(fr uint64) uint64 { return fr }, func(d *pb.RangeDescriptor) { d.End = "m" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, g, right, _, _, _, fr := attachFixture(t, t.TempDir(), c.freeze)
			d := right.Descriptor()
			if c.right != nil {
				d = proto.Clone(d).(*pb.RangeDescriptor)
				c.right(d)
			}
			data := attachEntry(t, d, c.index(fr))
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				g.ApplyBatch([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: data}})
				return false
			}()
			if !panicked {
				t.Fatal("the attach applied (or refused) without range 30 frozen at its index")
			}
		})
	}
}

// TestAttachSpanWaitsForTheFreeze: an attach whose right replica here has
// not yet applied the freeze waits for it (waitMerges), as a merge does,
// rather than stop on a replica that is only behind.
func TestAttachSpanWaitsForTheFreeze(t *testing.T) {
	_, g, right, ra, _, _, _ := attachFixture(t, t.TempDir(), false)
	data := attachEntry(t, right.Descriptor(), ra.index+1) // the freeze to come
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		res := g.ApplyBatch([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: data}})
		if r := res[0].(*Result); r.Err != nil {
			done <- r.Err
		}
	}()
	// Give the attach the time to find the replica behind (a build that
	// does not wait stops here); with the wait either order passes.
	select {
	case p := <-done:
		t.Fatalf("the attach ended before range 30 froze: %v", p)
	case <-time.After(50 * time.Millisecond):
	}
	freeze, _ := Encode(pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{Generation: 4})
	if fr := ra.entry(freeze); fr.Err != nil {
		t.Fatal(fr.Err)
	}
	select {
	case p := <-done:
		if p != nil {
			t.Fatalf("attach after the freeze: %v", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the attach still waits after range 30 froze")
	}
	if err := g.store.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Span(30); !ok {
		t.Fatal("group 5 does not serve range 30")
	}
}
