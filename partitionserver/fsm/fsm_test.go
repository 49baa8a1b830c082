package fsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"tablestore/internal/edm"
	"tablestore/internal/failpoint"
	"tablestore/internal/keys"
	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

func openTestRange(t testing.TB, desc *pb.RangeDescriptor) (*Store, *Range) {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateRange(desc, true); err != nil {
		t.Fatal(err)
	}
	r, err := s.OpenRange(desc.GetRangeId(), logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}

func entityBytes(t *testing.T, props map[string]edm.Value) []byte {
	t.Helper()
	e := &edm.Entity{}
	for n, v := range props {
		e.Properties = append(e.Properties, edm.Property{Name: n, Value: v})
	}
	return edm.MarshalBinary(e)
}

type applier struct {
	t     *testing.T
	r     *Range
	index uint64
	clock int64
}

func (a *applier) apply(ops ...*pb.EntityOp) *Result {
	a.t.Helper()
	a.index++
	a.clock += 1000
	data, err := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: a.clock, Ops: ops})
	if err != nil {
		a.t.Fatal(err)
	}
	res := a.r.ApplyBatch([]*raft.Log{{Index: a.index, Term: 1, Type: raft.LogCommand, Data: data}})
	// Readers see applied commands once the group commit ran.
	if err := a.r.store.Flush(); err != nil {
		a.t.Fatal(err)
	}
	r, _ := res[0].(*Result)
	return r
}

func op(kind pb.OpKind, pk, rk string, ent []byte) *pb.EntityOp {
	return &pb.EntityOp{Kind: kind, PartitionKey: pk, RowKey: rk, Entity: ent}
}

func TestWriteSemantics(t *testing.T) {
	_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	a := &applier{t: t, r: r, clock: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()}
	v1 := entityBytes(t, map[string]edm.Value{"A": {Type: edm.TypeInt32, Int: 1}})
	v2 := entityBytes(t, map[string]edm.Value{"B": {Type: edm.TypeString, Str: "x"}})

	steps := []struct {
		name    string
		op      *pb.EntityOp
		wantErr error
	}{
		{"insert", op(pb.OpKind_OP_KIND_INSERT, "p", "r", v1), nil},
		{"insert again conflicts", op(pb.OpKind_OP_KIND_INSERT, "p", "r", v1), ErrEntityExists},
		{"replace missing", op(pb.OpKind_OP_KIND_REPLACE, "p", "zz", v1), ErrEntityNotFound},
		{"merge missing", op(pb.OpKind_OP_KIND_MERGE, "p", "zz", v1), ErrEntityNotFound},
		{"delete missing", op(pb.OpKind_OP_KIND_DELETE, "p", "zz", nil), ErrEntityNotFound},
		{"merge adds B", op(pb.OpKind_OP_KIND_MERGE, "p", "r", v2), nil},
		{"upsert-replace creates", op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, "p", "s", v2), nil},
		{"upsert-merge creates", op(pb.OpKind_OP_KIND_INSERT_OR_MERGE, "p", "t", v1), nil},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			res := a.apply(st.op)
			if !errors.Is(res.Err, st.wantErr) || (st.wantErr == nil && res.Err != nil) {
				t.Fatalf("err = %v, want %v", res.Err, st.wantErr)
			}
		})
	}
	b, err := r.Get("p", "r")
	if err != nil {
		t.Fatal(err)
	}
	e, err := edm.UnmarshalBinary(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Get("A"); !ok {
		t.Error("merge lost property A")
	}
	if v, ok := e.Get("B"); !ok || v.Str != "x" {
		t.Error("merge did not add property B")
	}
	if st := r.State(); st.GetEntityCount() != 3 {
		t.Errorf("entity count = %d, want 3", st.GetEntityCount())
	}
}

func TestIfMatch(t *testing.T) {
	_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	a := &applier{t: t, r: r, clock: 1_000_000_000}
	v := entityBytes(t, map[string]edm.Value{"A": {Type: edm.TypeInt32, Int: 1}})
	ins := a.apply(op(pb.OpKind_OP_KIND_INSERT, "p", "r", v))
	if ins.Err != nil {
		t.Fatal(ins.Err)
	}
	cases := []struct {
		name    string
		any     bool
		etag    int64
		wantErr error
	}{
		{"stale etag", false, ins.TimestampUnixNano - 100, ErrConditionFailed},
		{"star", true, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := op(pb.OpKind_OP_KIND_REPLACE, "p", "r", v)
			o.IfMatchAny, o.IfMatchUnixNano = c.any, c.etag
			if res := a.apply(o); !errors.Is(res.Err, c.wantErr) || (c.wantErr == nil && res.Err != nil) {
				t.Fatalf("err = %v, want %v", res.Err, c.wantErr)
			}
		})
	}
	b, _ := r.Get("p", "r")
	e, _ := edm.UnmarshalBinary(b)
	o := op(pb.OpKind_OP_KIND_DELETE, "p", "r", nil)
	o.IfMatchUnixNano = e.Timestamp.UnixNano()
	if res := a.apply(o); res.Err != nil {
		t.Fatalf("delete with current etag: %v", res.Err)
	}
}

func TestBatchIsAtomic(t *testing.T) {
	_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	a := &applier{t: t, r: r, clock: 1_000_000_000}
	v := entityBytes(t, nil)
	if res := a.apply(op(pb.OpKind_OP_KIND_INSERT, "p", "exists", v)); res.Err != nil {
		t.Fatal(res.Err)
	}
	res := a.apply(
		op(pb.OpKind_OP_KIND_INSERT, "p", "a", v),
		op(pb.OpKind_OP_KIND_INSERT, "p", "b", v),
		op(pb.OpKind_OP_KIND_INSERT, "p", "exists", v),
	)
	var oe *OpError
	if !errors.As(res.Err, &oe) || oe.Index != 2 || !errors.Is(res.Err, ErrEntityExists) {
		t.Fatalf("err = %v, want operation 2 already exists", res.Err)
	}
	for _, rk := range []string{"a", "b"} {
		if _, err := r.Get("p", rk); !errors.Is(err, ErrEntityNotFound) {
			t.Errorf("entity %s written by a failed batch", rk)
		}
	}
	// Insert then delete of one key inside a batch is consistent.
	res = a.apply(op(pb.OpKind_OP_KIND_INSERT, "p", "c", v), op(pb.OpKind_OP_KIND_DELETE, "p", "c", nil))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if st := r.State(); st.GetEntityCount() != 1 {
		t.Errorf("entity count = %d, want 1", st.GetEntityCount())
	}
}

func TestTimestampsIncrease(t *testing.T) {
	_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	a := &applier{t: t, r: r, clock: 5_000_000_000}
	v := entityBytes(t, nil)
	var last int64
	for i := 0; i < 20; i++ {
		a.clock = 5_000_000_000 // a stuck clock: the same 100 ns tick each time
		res := a.apply(op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, "p", "r", v))
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if res.TimestampUnixNano <= last || res.TimestampUnixNano%100 != 0 {
			t.Fatalf("timestamp %d after %d", res.TimestampUnixNano, last)
		}
		last = res.TimestampUnixNano
	}
}

func TestKeyOutsideRangeRefused(t *testing.T) {
	_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Start: "m", End: "t", Generation: 2})
	a := &applier{t: t, r: r, clock: 1}
	for _, pk := range []string{"a", "t", "z"} {
		if res := a.apply(op(pb.OpKind_OP_KIND_INSERT, pk, "r", entityBytes(t, nil))); !errors.Is(res.Err, ErrKeyOutOfRange) {
			t.Errorf("pk %q: err = %v, want ErrKeyOutOfRange", pk, res.Err)
		}
	}
	if res := a.apply(op(pb.OpKind_OP_KIND_INSERT, "m", "r", entityBytes(t, nil))); res.Err != nil {
		t.Errorf("pk m: %v", res.Err)
	}
}

func TestReplayedEntriesAreSkipped(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	desc := &pb.RangeDescriptor{RangeId: 3, TableId: 1, Generation: 1}
	if err := s.CreateRange(desc, true); err != nil {
		t.Fatal(err)
	}
	r, _ := s.OpenRange(3, logging.Discard())
	a := &applier{t: t, r: r, clock: 1_000_000}
	a.apply(op(pb.OpKind_OP_KIND_INSERT, "p", "r", entityBytes(t, nil)))
	s.Close()

	s, err = Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, _ = s.OpenRange(3, logging.Discard())
	if r.AppliedIndex() != 1 {
		t.Fatalf("applied index after reopen = %d", r.AppliedIndex())
	}
	// Raft replays entry 1 after a restart: it must not fail or change data.
	a = &applier{t: t, r: r, clock: 1_000_000}
	if res := a.apply(op(pb.OpKind_OP_KIND_INSERT, "p", "r", entityBytes(t, nil))); res != nil {
		t.Fatalf("replayed entry produced %+v", res)
	}
}

type sink struct {
	bytes.Buffer
}

// snapshotOf persists a snapshot of f and returns its bytes.
func snapshotOf(t *testing.T, f raft.FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var out sink
	if err := snap.Persist(&out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { return nil }
func (s *sink) Close() error  { return nil }

func TestSnapshotRestore(t *testing.T) {
	desc := &pb.RangeDescriptor{RangeId: 1, TableId: 9, Start: "b", End: "y", Generation: 1}
	_, r := openTestRange(t, desc)
	a := &applier{t: t, r: r, clock: 1_000_000}
	for i := 0; i < 50; i++ {
		v := entityBytes(t, map[string]edm.Value{"I": {Type: edm.TypeInt32, Int: int64(i)}})
		if res := a.apply(op(pb.OpKind_OP_KIND_INSERT, fmt.Sprintf("p%02d", i%5), fmt.Sprintf("r%02d", i), v)); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	snap, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var out sink
	if err := snap.Persist(&out); err != nil {
		t.Fatal(err)
	}
	snap.Release()

	// Restore into a replica on another server whose file also holds a
	// neighbouring range of the same table, which must survive.
	s2, r2 := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 9, Start: "b", End: "y", Generation: 1})
	if err := s2.CreateRange(&pb.RangeDescriptor{RangeId: 2, TableId: 9, Start: "y", Generation: 1}, true); err != nil {
		t.Fatal(err)
	}
	n, _ := s2.OpenRange(2, logging.Discard())
	na := &applier{t: t, r: n, clock: 1}
	na.apply(op(pb.OpKind_OP_KIND_INSERT, "z", "keep", entityBytes(t, nil)))

	if err := r2.Restore(io.NopCloser(&out.Buffer)); err != nil {
		t.Fatal(err)
	}
	if r2.AppliedIndex() != 50 || r2.State().GetEntityCount() != 50 {
		t.Fatalf("restored applied=%d count=%d", r2.AppliedIndex(), r2.State().GetEntityCount())
	}
	res, err := r2.Scan(ScanOptions{})
	if err != nil || len(res.Entities) != 50 {
		t.Fatalf("scan after restore: %d entities, %v", len(res.Entities), err)
	}
	if _, err := n.Get("z", "keep"); err != nil {
		t.Fatalf("neighbour range lost its entity: %v", err)
	}
}

func TestScanPagesInKeyOrder(t *testing.T) {
	_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 9, Generation: 1})
	a := &applier{t: t, r: r, clock: 1_000_000}
	for i := 0; i < 30; i++ {
		a.apply(op(pb.OpKind_OP_KIND_INSERT, fmt.Sprintf("p%d", i%3), fmt.Sprintf("r%02d", i), entityBytes(t, nil)))
	}
	var got []string
	var start []byte
	var startPK string
	for page := 0; page < 10; page++ {
		res, err := r.Scan(ScanOptions{Start: start, StartPK: startPK, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range res.Entities {
			e, _ := edm.UnmarshalBinary(b)
			got = append(got, e.PartitionKey+"/"+e.RowKey)
		}
		if res.Next == nil {
			break
		}
		start = res.Next
		e, _, _ := keys.Decode(res.Next)
		startPK = e
	}
	if len(got) != 30 {
		t.Fatalf("got %d entities", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i-1] >= got[i] {
			t.Fatalf("out of order: %s then %s", got[i-1], got[i])
		}
	}
}

func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenWithInterval(filepath.Join(dir, "state.db"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	desc := &pb.RangeDescriptor{RangeId: 1, TableId: 1, Generation: 1}
	if err := s.CreateRange(desc, true); err != nil {
		t.Fatal(err)
	}
	r, _ := s.OpenRange(1, logging.Discard())
	data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: 1000, Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "p", "r", entityBytes(t, nil))}})
	res := r.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: data}})
	if res[0].(*Result).Err != nil {
		t.Fatal(res[0].(*Result).Err)
	}
	t.Run("applied but not committed is invisible", func(t *testing.T) {
		if r.AppliedIndex() != 0 {
			t.Fatalf("applied index %d before the commit", r.AppliedIndex())
		}
		if _, err := r.Get("p", "r"); !errors.Is(err, ErrEntityNotFound) {
			t.Fatalf("uncommitted entity visible: %v", err)
		}
	})
	t.Run("a waiting reader gets the commit at once", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		go func() {
			time.Sleep(10 * time.Millisecond)
			r.Urge()
		}()
		if err := r.WaitApplied(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Get("p", "r"); err != nil {
			t.Fatalf("committed entity: %v", err)
		}
	})
	t.Run("close commits what is pending", func(t *testing.T) {
		data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: 2000, Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "p", "r2", entityBytes(t, nil))}})
		r.ApplyBatch([]*raft.Log{{Index: 2, Type: raft.LogCommand, Data: data}})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s2, err := Open(filepath.Join(dir, "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		r2, _ := s2.OpenRange(1, logging.Discard())
		if r2.AppliedIndex() != 2 {
			t.Fatalf("applied index after reopen = %d, want 2", r2.AppliedIndex())
		}
	})
}

func TestRetriedWriteAppliesOnce(t *testing.T) {
	_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	a := &applier{t: t, r: r, clock: 1_000_000}
	id := []byte("request-0000001")
	applyWithID := func() *Result {
		a.index++
		a.clock += 1000
		data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: a.clock, RequestId: id,
			Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "p", "r", entityBytes(t, nil))}})
		res := r.ApplyBatch([]*raft.Log{{Index: a.index, Type: raft.LogCommand, Data: data}})
		r.store.Flush()
		return res[0].(*Result)
	}
	first := applyWithID()
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	again := applyWithID()
	if again.Err != nil || again.TimestampUnixNano != first.TimestampUnixNano {
		t.Fatalf("retry = %+v, want the first result %d", again, first.TimestampUnixNano)
	}
	t.Run("a snapshot carries the request records", func(t *testing.T) {
		snap, _ := r.Snapshot()
		var out sink
		if err := snap.Persist(&out); err != nil {
			t.Fatal(err)
		}
		snap.Release()
		_, r2 := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
		if err := r2.Restore(io.NopCloser(&out.Buffer)); err != nil {
			t.Fatal(err)
		}
		a2 := &applier{t: t, r: r2, index: a.index, clock: a.clock}
		a2.index++
		data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: a.clock + 5000, RequestId: id,
			Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "p", "r", entityBytes(t, nil))}})
		res := r2.ApplyBatch([]*raft.Log{{Index: a2.index, Type: raft.LogCommand, Data: data}})
		if got := res[0].(*Result); got.Err != nil || got.TimestampUnixNano != first.TimestampUnixNano {
			t.Fatalf("retry on the restored replica = %+v", got)
		}
	})
}

// mergeHooks records the ranges merges retire.
type mergeHooks struct{ merged []uint64 }

func (h *mergeHooks) RangeCreated(uint64, *pb.RangeDescriptor, string) {}
func (h *mergeHooks) RangeMerged(_, right uint64)                      { h.merged = append(h.merged, right) }

// mergeFixture: range 1 [.., m) and a frozen range 2 [m, ..) of table 7 in
// one file; range 2 holds x/r (written with a request id) and y/r.
func mergeFixture(t *testing.T) (s *Store, left, right *Range, retry []byte, first *Result, freezeIndex uint64) {
	t.Helper()
	s, left = openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, End: "m", Generation: 2})
	if err := s.CreateRange(&pb.RangeDescriptor{RangeId: 2, TableId: 7, Start: "m", Generation: 2}, true); err != nil {
		t.Fatal(err)
	}
	right, _ = s.OpenRange(2, logging.Discard())
	ra := &applier{t: t, r: right, clock: 1_000_000}
	retry, _ = EncodeWrite(&pb.WriteCommand{ProposedUnixNano: 9_000_000, RequestId: []byte("retry-me"),
		Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "x", "r", entityBytes(t, nil))}})
	first = right.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: retry}})[0].(*Result)
	ra.index = 1
	ra.apply(&pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "y", RowKey: "r", Entity: entityBytes(t, nil)})
	freeze, _ := Encode(pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
	fr := right.ApplyBatch([]*raft.Log{{Index: 3, Type: raft.LogCommand, Data: freeze}})[0].(*Result)
	s.Flush()
	if fr.Index != 3 || !right.Frozen() {
		t.Fatalf("freeze = %+v", fr)
	}
	return s, left, right, retry, first, fr.Index
}

func TestMergeTakesOverRowsInPlace(t *testing.T) {
	s, left, right, retry, first, freezeIndex := mergeFixture(t)
	hooks := &mergeHooks{}
	left.SetHooks(hooks)
	if _, err := right.Get("x", "r"); !errors.Is(err, ErrRangeFrozen) {
		t.Fatalf("read of a frozen range = %v, want ErrRangeFrozen", err)
	}
	rightState := right.State()
	merge, _ := Encode(pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: rightState.GetRange(), RightFreezeIndex: freezeIndex})
	res := left.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: merge}})[0].(*Result)
	s.Flush()
	if res.Err != nil || res.Range.GetEnd() != "" || res.Range.GetGeneration() != 3 {
		t.Fatalf("merge = %+v", res)
	}
	if len(merge) > 200 {
		t.Errorf("merge entry is %d bytes; it must not carry rows", len(merge))
	}
	for _, pk := range []string{"x", "y"} {
		if _, err := left.Get(pk, "r"); err != nil {
			t.Fatalf("merged entity %s: %v", pk, err)
		}
	}
	st := left.State()
	if st.GetEntityCount() != 2 || st.GetLastTimestampUnixNano() < rightState.GetLastTimestampUnixNano() {
		t.Fatalf("merged state = %+v, right was %+v", st, rightState)
	}
	if len(hooks.merged) != 1 || hooks.merged[0] != 2 {
		t.Fatalf("RangeMerged calls = %v", hooks.merged)
	}
	// The right range is over: its state is gone and a late batch of its
	// group does not bring it back.
	noop, _ := Encode(pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{})
	if got := right.ApplyBatch([]*raft.Log{{Index: 4, Type: raft.LogCommand, Data: noop}})[0].(*Result); !errors.Is(got.Err, ErrRangeNotFound) {
		t.Fatalf("apply on the merged-away range = %+v", got)
	}
	s.Flush()
	if _, err := s.OpenRange(2, logging.Discard()); !errors.Is(err, ErrRangeNotFound) {
		t.Fatalf("merged-away range still stored: %v", err)
	}
	// A retry of a write the right range applied answers its first result.
	again := left.ApplyBatch([]*raft.Log{{Index: 2, Type: raft.LogCommand, Data: retry}})[0].(*Result)
	if again.Err != nil || again.TimestampUnixNano != first.TimestampUnixNano {
		t.Fatalf("retry after the merge = %+v, want the first result %d", again, first.TimestampUnixNano)
	}
	// A repeated merge proposal is a no-op.
	if res := left.ApplyBatch([]*raft.Log{{Index: 3, Type: raft.LogCommand, Data: merge}})[0].(*Result); res.Err != nil || res.Range.GetGeneration() != 3 {
		t.Fatalf("repeated merge = %+v", res)
	}
	// The left range's snapshot now carries the merged keys and records.
	snap, err := left.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var out sink
	if err := snap.Persist(&out); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	_, r2 := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	if err := r2.Restore(io.NopCloser(&out.Buffer)); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Get("y", "r"); err != nil {
		t.Fatalf("restored merged entity: %v", err)
	}
}

func TestDeleteWaitsForPendingMerge(t *testing.T) {
	s, left, right, _, _, freezeIndex := mergeFixture(t)
	if err := s.DeleteRange(2, 0); !errors.Is(err, ErrMergePending) {
		t.Fatalf("delete of a frozen range whose neighbour has not merged = %v", err)
	}
	merge, _ := Encode(pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: right.Descriptor(), RightFreezeIndex: freezeIndex})
	left.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: merge}})
	s.Flush()
	if err := s.DeleteRange(2, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := left.Get("x", "r"); err != nil {
		t.Fatalf("deleting the merged-away range removed its rows: %v", err)
	}
}

// A replica that missed the merge entry and receives the merged range's
// snapshot drops its stale copy of the right range.
func TestRestoreDropsSubsumedRange(t *testing.T) {
	s, left, right, _, _, freezeIndex := mergeFixture(t)
	merge, _ := Encode(pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: right.Descriptor(), RightFreezeIndex: freezeIndex})
	left.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: merge}})
	a := &applier{t: t, r: left, index: 1, clock: 50_000_000}
	a.apply(op(pb.OpKind_OP_KIND_DELETE, "y", "r", nil))
	snap, err := left.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var out sink
	if err := snap.Persist(&out); err != nil {
		t.Fatal(err)
	}
	snap.Release()

	s2, behind, _, _, _, _ := mergeFixture(t)
	hooks := &mergeHooks{}
	behind.SetHooks(hooks)
	if err := behind.Restore(io.NopCloser(&out.Buffer)); err != nil {
		t.Fatal(err)
	}
	if len(hooks.merged) != 1 || hooks.merged[0] != 2 {
		t.Fatalf("RangeMerged calls = %v", hooks.merged)
	}
	if _, err := s2.OpenRange(2, logging.Discard()); !errors.Is(err, ErrRangeNotFound) {
		t.Fatalf("subsumed range still stored: %v", err)
	}
	if _, err := behind.Get("y", "r"); !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("entity deleted after the merge came back: %v", err)
	}
	_ = s
}

// A file written when request records were keyed by range is migrated.
func TestRequestRecordsMigrated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateRange(&pb.RangeDescriptor{RangeId: 5, TableId: 9, Generation: 1}, true); err != nil {
		t.Fatal(err)
	}
	r, _ := s.OpenRange(5, logging.Discard())
	data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: 1_000_000, RequestId: []byte("old-id"),
		Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "p", "r", entityBytes(t, nil))}})
	first := r.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: data}})[0].(*Result)
	s.Flush()
	// Rewrite the record in the old layout.
	err = s.db.Update(func(tx *bolt.Tx) error {
		v := append([]byte(nil), tx.Bucket(bucketRequests).Get(requestKey(9, []byte("old-id")))...)
		if err := tx.Bucket(bucketRequests).Delete(requestKey(9, []byte("old-id"))); err != nil {
			return err
		}
		old, err := tx.CreateBucket(bucketRangeRequests)
		if err != nil {
			return err
		}
		if err := old.Put(requestKey(5, []byte("old-id")), v); err != nil {
			return err
		}
		return old.Put(requestKey(77, []byte("gone")), v) // a range no longer stored
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, _ = s.OpenRange(5, logging.Discard())
	again := r.ApplyBatch([]*raft.Log{{Index: 2, Type: raft.LogCommand, Data: data}})[0].(*Result)
	if again.Err != nil || again.TimestampUnixNano != first.TimestampUnixNano {
		t.Fatalf("retry after migration = %+v, want %d", again, first.TimestampUnixNano)
	}
	s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketRangeRequests) != nil {
			t.Error("old request bucket kept")
		}
		return nil
	})
}

func TestSplitAppliesEvenIfTheNewRangeWasPrecreated(t *testing.T) {
	s, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	a := &applier{t: t, r: r, clock: 1_000_000}
	a.apply(op(pb.OpKind_OP_KIND_INSERT, "z", "r", entityBytes(t, nil)))
	// A replica of the right-hand range recorded before this replica applied
	// the split (as a heartbeat used to do).
	if err := s.CreateRange(&pb.RangeDescriptor{RangeId: 2, TableId: 7, Start: "m", Generation: 2}, false); err != nil {
		t.Fatal(err)
	}
	data, _ := Encode(pb.CommandKind_COMMAND_KIND_SPLIT, &pb.SplitCommand{SplitKey: "m", NewRangeId: 2})
	a.index++
	res := r.ApplyBatch([]*raft.Log{{Index: a.index, Type: raft.LogCommand, Data: data}})[0].(*Result)
	s.Flush()
	if res.Err != nil || res.Range.GetEnd() != "m" {
		t.Fatalf("split = %+v; it must apply on every replica alike", res)
	}
	right, _ := s.OpenRange(2, logging.Discard())
	if st := right.State(); st.GetEntityCount() != 1 || !st.GetBootstrap() {
		t.Fatalf("right range state = %+v", st)
	}
}

// TestFailedCommitStops: a group commit that fails outside the committer
// (here in a snapshot's flush) must not drop applied entries and go on: the
// next commit would record a later applied index over a hole.
func TestFailedCommitStops(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenWithInterval(filepath.Join(dir, "state.db"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateRange(&pb.RangeDescriptor{RangeId: 1, TableId: 1, Generation: 1}, true); err != nil {
		t.Fatal(err)
	}
	r, _ := s.OpenRange(1, logging.Discard())
	write := func(index uint64, rk string) {
		data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: int64(index) * 1000, Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "p", rk, entityBytes(t, nil))}})
		if res := r.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}}); res[0].(*Result).Err != nil {
			t.Fatal(res[0].(*Result).Err)
		}
	}
	write(1, "first")
	failpoint.Enable("partitionserver/fsm/commit", nil)
	panicked := func() (p bool) {
		defer func() { p = recover() != nil }()
		_, _ = r.Snapshot()
		return false
	}()
	failpoint.Disable("partitionserver/fsm/commit")
	if panicked {
		return
	}
	write(2, "second")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get("p", "first"); r.AppliedIndex() >= 1 && err != nil {
		t.Fatalf("applied index %d but entry 1's entity is gone (%v): a failed commit left a hole", r.AppliedIndex(), err)
	}
}

// TestObserveCommits: each commit of applied entries is timed, the
// failpoint's delay (the chaos slow disk) and SetCommitDelay's included,
// and an empty flush (nothing pending) is not a commit.
// manualCommitStore opens a store whose committer waits an hour, so that
// only the test's flushes commit, with range 1 and a function that applies
// one insert at a log index.
func manualCommitStore(t *testing.T) (*Store, func(index uint64)) {
	t.Helper()
	s, err := OpenWithInterval(filepath.Join(t.TempDir(), "state.db"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateRange(&pb.RangeDescriptor{RangeId: 1, TableId: 1, Generation: 1}, true); err != nil {
		t.Fatal(err)
	}
	r, err := s.OpenRange(1, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s, func(index uint64) {
		t.Helper()
		data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: int64(index) * 1000, Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "p", fmt.Sprint(index), entityBytes(t, nil))}})
		if res := r.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}}); res[0].(*Result).Err != nil {
			t.Fatal(res[0].(*Result).Err)
		}
	}
}

func TestObserveCommits(t *testing.T) {
	s, write := manualCommitStore(t)
	var mu sync.Mutex
	var seen []time.Duration
	s.ObserveCommits(func(_ time.Time, d time.Duration) {
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
	})
	write(1)
	const delay = 30 * time.Millisecond
	failpoint.Enable("partitionserver/fsm/commit", func() error { time.Sleep(delay); return nil })
	err := s.Flush()
	failpoint.Disable("partitionserver/fsm/commit")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil { // nothing pending
		t.Fatal(err)
	}
	write(2)
	s.SetCommitDelay(delay) // one store's slow disk
	err = s.Flush()
	s.SetCommitDelay(0)
	if err != nil {
		t.Fatal(err)
	}
	write(3)
	s.ObserveCommits(nil)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] < delay || seen[1] < delay {
		t.Fatalf("observed %v, want two commits of at least %v", seen, delay)
	}
}

// TestObserveApplyWaits: an apply that comes while a commit holds the
// write lock is reported with its wait, which is no longer than the commit
// took (the stall every answer of a leader waits out); an apply that finds
// the lock free reports nothing.
func TestObserveApplyWaits(t *testing.T) {
	s, write := manualCommitStore(t)
	var mu sync.Mutex
	var waits, commits []time.Duration
	s.ObserveApplyWaits(func(d time.Duration) {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
	})
	s.ObserveCommits(func(_ time.Time, d time.Duration) {
		mu.Lock()
		commits = append(commits, d)
		mu.Unlock()
	})
	write(1)
	mu.Lock()
	if len(waits) != 0 {
		t.Fatalf("an apply with the lock free reported waits %v", waits)
	}
	mu.Unlock()
	const delay = 100 * time.Millisecond
	s.SetCommitDelay(delay)
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush() }()
	// The apply below must come while the commit holds the lock.
	deadline := time.Now().Add(5 * time.Second)
	for s.wmu.TryLock() {
		s.wmu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the commit never took the lock")
		}
		time.Sleep(time.Millisecond)
	}
	write(2)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	s.SetCommitDelay(0)
	mu.Lock()
	defer mu.Unlock()
	// How much of the commit the apply waited out depends on when it ran:
	// some of it, and no more than the commit took.
	if len(commits) != 1 || commits[0] < delay || len(waits) != 1 || waits[0] <= 0 || waits[0] > commits[0] {
		t.Fatalf("commits %v, waits %v: want one commit of at least %v and one wait no longer", commits, waits, delay)
	}
}

// TestScanKeyBounds: KeyLower and KeyUpper narrow what the scan reads
// (Match is asked of no key outside them) and where a page continues.
func TestScanKeyBounds(t *testing.T) {
	_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 9, Generation: 1})
	a := &applier{t: t, r: r, clock: 1_000_000}
	for i := 0; i < 10; i++ {
		a.apply(op(pb.OpKind_OP_KIND_INSERT, "p", fmt.Sprintf("r%d", i), entityBytes(t, nil)))
	}
	asked := 0
	match := func(*edm.Entity) bool { asked++; return true }
	res, err := r.Scan(ScanOptions{KeyLower: keys.Encode("p", "r3"), KeyUpper: keys.Encode("p", "r6"), Match: match, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Entities) != 3 || res.Next != nil || asked != 3 {
		t.Fatalf("scan of [p/r3, p/r6): %d entities, next %q, %d keys matched; want 3, none, 3", len(res.Entities), res.Next, asked)
	}
	// A continuation inside the bounds starts there; one below them
	// starts at KeyLower.
	for _, tc := range []struct {
		start string
		want  int
	}{{"r5", 1}, {"r0", 3}} {
		res, err = r.Scan(ScanOptions{Start: keys.Encode("p", tc.start), StartPK: "p", KeyLower: keys.Encode("p", "r3"), KeyUpper: keys.Encode("p", "r6")})
		if err != nil || len(res.Entities) != tc.want {
			t.Fatalf("scan from p/%s: %d entities, %v; want %d", tc.start, len(res.Entities), err, tc.want)
		}
	}
}
