package fsm

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	pb "tablestore/proto/tablestorepb"
)

// TestBatchAcrossASplit: a change set (one write of several operations,
// with the front-end's request id) racing a split of its range. Applied
// before the split, its retry under the same id after the split answers
// the first Timestamp from whichever range now holds its PartitionKey
// (the request record is the table's, found by the key), and writes
// nothing; sent to the old range (a stale map) it is refused whole at
// operation 0, as is a new change set for the moved keys. Nothing is
// half-applied on either side.
func TestBatchAcrossASplit(t *testing.T) {
	s, left := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1,
		Replicas: []*pb.Replica{{ServerId: "a"}}})
	index, clock := uint64(0), int64(1_000_000)
	apply := func(r *Range, data []byte) *Result {
		t.Helper()
		index++
		res := r.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: data}})[0].(*Result)
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		return res
	}
	batch := func(r *Range, id string, pk string) *Result {
		t.Helper()
		clock += 1000
		var ops []*pb.EntityOp
		for _, rk := range []string{"a", "b", "c"} {
			ops = append(ops, op(pb.OpKind_OP_KIND_INSERT, pk, rk, entityBytes(t, nil)))
		}
		data, err := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: clock, RequestId: []byte(id), Ops: ops})
		if err != nil {
			t.Fatal(err)
		}
		return apply(r, data)
	}
	first := batch(left, "txn-1", "q")
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	split, err := Encode(pb.CommandKind_COMMAND_KIND_SPLIT, &pb.SplitCommand{SplitKey: "m", NewRangeId: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res := apply(left, split); res.Err != nil {
		t.Fatal(res.Err)
	}
	right, err := s.OpenRange(2, left.logger)
	if err != nil {
		t.Fatal(err)
	}
	leftCount, rightCount := left.State().GetEntityCount(), right.State().GetEntityCount()
	if leftCount != 0 || rightCount != 3 {
		t.Fatalf("after the split: %d entities left, %d right, want 0 and 3", leftCount, rightCount)
	}

	var oe *OpError
	if res := batch(left, "txn-1", "q"); !errors.As(res.Err, &oe) || oe.Index != 0 || !errors.Is(res.Err, ErrKeyOutOfRange) {
		t.Fatalf("retry on the old range = %+v, want operation 0 out of range", res)
	}
	if res := batch(right, "txn-1", "q"); res.Err != nil || res.TimestampUnixNano != first.TimestampUnixNano {
		t.Fatalf("retry on the new range = %+v, want the first Timestamp %d", res, first.TimestampUnixNano)
	}
	if res := batch(left, "txn-2", "r"); !errors.As(res.Err, &oe) || oe.Index != 0 || !errors.Is(res.Err, ErrKeyOutOfRange) {
		t.Fatalf("new change set on the old range = %+v, want operation 0 out of range", res)
	}
	if l, r := left.State().GetEntityCount(), right.State().GetEntityCount(); l != leftCount || r != rightCount {
		t.Fatalf("entities %d left, %d right after the retries, want %d and %d", l, r, leftCount, rightCount)
	}
	for _, rk := range []string{"a", "b", "c"} {
		if _, err := right.Get("r", rk); !errors.Is(err, ErrEntityNotFound) {
			t.Errorf("r/%s: %v, want nothing written by the refused change set", rk, err)
		}
	}
}
