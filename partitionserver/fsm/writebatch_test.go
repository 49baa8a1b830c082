package fsm

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

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
