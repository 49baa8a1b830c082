package fsm

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"tablestore/internal/edm"
	pb "tablestore/proto/tablestorepb"
)

// TestWriteBatchAppliesEachWriteOnItsOwn: the writes a leader coalesced into
// one entry each succeed or fail alone, keep their request ids and get
// distinct increasing Timestamps.
func TestWriteBatchAppliesEachWriteOnItsOwn(t *testing.T) {
	_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1, End: "m"})
	a := &applier{t: t, r: r, clock: 1_000_000}
	if res := a.apply(op(pb.OpKind_OP_KIND_INSERT, "a", "exists", entityBytes(t, nil))); res.Err != nil {
		t.Fatal(res.Err)
	}
	ins := func(pk, rk, id string) *pb.WriteCommand {
		return &pb.WriteCommand{ProposedUnixNano: 2_000_000, RequestId: []byte(id),
			Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, pk, rk, entityBytes(t, nil))}}
	}
	writes := []*pb.WriteCommand{
		ins("a", "1", "id-1"),
		ins("a", "exists", "id-2"), // conflicts with stored data
		ins("z", "1", "id-3"),      // outside the range
		ins("a", "2", "id-4"),
		ins("a", "1", "id-1"), // the first write again, same request id: its result
		{ProposedUnixNano: 2_000_000, RequestId: []byte("id-6"), Ops: []*pb.EntityOp{ // all or nothing
			op(pb.OpKind_OP_KIND_INSERT, "a", "3", entityBytes(t, nil)),
			op(pb.OpKind_OP_KIND_INSERT, "a", "exists", entityBytes(t, nil)),
		}},
		ins("a", "1", "id-7"),         // inserted by the first write of the batch
		{ProposedUnixNano: 2_000_000}, // malformed: no operation
	}
	data, err := EncodeWriteBatch(writes)
	if err != nil {
		t.Fatal(err)
	}
	a.index++
	out := r.ApplyBatch([]*raft.Log{{Index: a.index, Term: 1, Type: raft.LogCommand, Data: data}})
	if err := r.store.Flush(); err != nil {
		t.Fatal(err)
	}
	res := out[0].(*Result)
	if res.Err != nil || len(res.Batch) != len(writes) {
		t.Fatalf("batch result = %+v, want %d results", res, len(writes))
	}
	want := []error{nil, ErrEntityExists, ErrKeyOutOfRange, nil, nil, ErrEntityExists, ErrEntityExists, ErrBadCommand}
	for i, w := range want {
		got := res.Batch[i].Err
		if (w == nil) != (got == nil) || (w != nil && !errors.Is(got, w)) {
			t.Errorf("write %d: err = %v, want %v", i, got, w)
		}
	}
	if res.Batch[0].TimestampUnixNano == 0 || res.Batch[3].TimestampUnixNano <= res.Batch[0].TimestampUnixNano {
		t.Errorf("timestamps %d, %d: want distinct and increasing", res.Batch[0].TimestampUnixNano, res.Batch[3].TimestampUnixNano)
	}
	if res.Batch[4].TimestampUnixNano != res.Batch[0].TimestampUnixNano {
		t.Errorf("retried write got %d, want the first result %d", res.Batch[4].TimestampUnixNano, res.Batch[0].TimestampUnixNano)
	}
	for rk, present := range map[string]bool{"1": true, "2": true, "3": false} {
		b, err := r.Get("a", rk)
		if (err == nil && b != nil) != present {
			t.Errorf("row %q: present = %v (err %v), want %v", rk, b != nil, err, present)
		}
	}
	if got := r.State().GetEntityCount(); got != 3 {
		t.Errorf("entity count = %d, want 3", got)
	}
}

// TestWriteOpsOnOneKey: the operations of one write that touch the same key
// see each other's effects, whether the write finds its pending values by a
// scan (few operations) or through a map (more than pendingIndexAbove), and
// a failing operation leaves nothing of the write behind.
func TestWriteOpsOnOneKey(t *testing.T) {
	v1 := entityBytes(t, map[string]edm.Value{"A": {Type: edm.TypeInt32, Int: 1}})
	v2 := entityBytes(t, map[string]edm.Value{"B": {Type: edm.TypeString, Str: "x"}})
	ins := func(rk string, v []byte) *pb.EntityOp { return op(pb.OpKind_OP_KIND_INSERT, "p", rk, v) }
	many := func(n int, more ...*pb.EntityOp) []*pb.EntityOp {
		var ops []*pb.EntityOp
		for i := range n {
			ops = append(ops, ins(fmt.Sprintf("r%02d", i), v1))
		}
		return append(ops, more...)
	}
	cases := []struct {
		name    string
		ops     []*pb.EntityOp
		errAt   int // -1: none
		wantErr error
		stored  map[string][]string // row key -> property names
	}{
		{"insert then merge", []*pb.EntityOp{ins("r", v1), op(pb.OpKind_OP_KIND_MERGE, "p", "r", v2)}, -1, nil,
			map[string][]string{"r": {"A", "B"}}},
		{"insert then delete", []*pb.EntityOp{ins("r", v1), op(pb.OpKind_OP_KIND_DELETE, "p", "r", nil), ins("s", v2)}, -1, nil,
			map[string][]string{"s": {"B"}}},
		{"insert twice", []*pb.EntityOp{ins("r", v1), ins("r", v2)}, 1, ErrEntityExists, nil},
		{"many, merge and delete among them", many(10, op(pb.OpKind_OP_KIND_MERGE, "p", "r03", v2), op(pb.OpKind_OP_KIND_DELETE, "p", "r05", nil),
			op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, "p", "r07", v2)), -1, nil,
			map[string][]string{"r00": {"A"}, "r01": {"A"}, "r02": {"A"}, "r03": {"A", "B"}, "r04": {"A"}, "r06": {"A"},
				"r07": {"B"}, "r08": {"A"}, "r09": {"A"}}},
		{"many, one inserted twice", many(10, ins("r04", v2)), 10, ErrEntityExists, nil},
		{"many, one out of the range", many(10, op(pb.OpKind_OP_KIND_INSERT, "zz", "r", v1)), 10, ErrKeyOutOfRange, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, End: "q", Generation: 1})
			a := &applier{t: t, r: r, clock: 1_000_000_000}
			res := a.apply(tc.ops...)
			var oe *OpError
			switch {
			case tc.errAt < 0 && res.Err != nil:
				t.Fatalf("err = %v", res.Err)
			case tc.errAt >= 0 && (!errors.As(res.Err, &oe) || oe.Index != tc.errAt || !errors.Is(res.Err, tc.wantErr)):
				t.Fatalf("err = %v, want operation %d: %v", res.Err, tc.errAt, tc.wantErr)
			}
			var size uint64
			for rk, names := range tc.stored {
				b, err := r.Get("p", rk)
				if err != nil {
					t.Fatalf("%s: %v", rk, err)
				}
				size += uint64(len(b))
				e, err := edm.UnmarshalBinary(b)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, p := range e.Properties {
					got = append(got, p.Name)
				}
				if !slices.Equal(got, names) || e.RowKey != rk || e.Timestamp.UnixNano() != res.TimestampUnixNano {
					t.Errorf("%s: properties %v, row key %q, Timestamp %d; want %v, %q, %d", rk, got, e.RowKey, e.Timestamp.UnixNano(), names, rk, res.TimestampUnixNano)
				}
			}
			st := r.State()
			if st.GetEntityCount() != uint64(len(tc.stored)) || st.GetBytes() != size {
				t.Errorf("state: %d entities, %d bytes; want %d, %d", st.GetEntityCount(), st.GetBytes(), len(tc.stored), size)
			}
			if tc.errAt >= 0 && st.GetLastTimestampUnixNano() != 0 {
				t.Errorf("a failed write consumed a timestamp: %d", st.GetLastTimestampUnixNano())
			}
		})
	}
}
