package fsm

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	pb "tablestore/proto/tablestorepb"
)

// TestRecordOfABehindProposerOutlivesThePrune: a leader whose clock is
// behind the range's log clock (an earlier leader's ran ahead: Timestamps
// keep moving past its proposals) still gets its writes remembered for the
// whole TTL. Its records used to be kept by its own proposal time, below
// the prune horizon (the log clock minus the TTL) as soon as they were
// written: the next prune, up to 1,024 entries later, forgot them, and a
// retry of an insert whose answer was lost (a leader change) applied again
// and answered 409 for a write that had succeeded.
func TestRecordOfABehindProposerOutlivesThePrune(t *testing.T) {
	_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	index := uint64(0)
	apply := func(typ raft.LogType, data []byte) *Result {
		t.Helper()
		index++
		res, _ := r.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: typ, Data: data}})[0].(*Result)
		if err := r.store.Flush(); err != nil {
			t.Fatal(err)
		}
		return res
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC).UnixNano()
	insert := func(proposed int64, id, rk string) *Result {
		t.Helper()
		return apply(raft.LogCommand, encoded(EncodeWrite(&pb.WriteCommand{ProposedUnixNano: proposed, RequestId: []byte(id),
			Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "p", rk, entityBytes(t, nil))}})))
	}
	// The old leader's clock ran 20 minutes ahead.
	if res := insert(now+int64(20*time.Minute), "ahead", "a"); res.Err != nil {
		t.Fatal(res.Err)
	}
	// The new leader's clock is right: its write is stamped past the
	// log clock, and its record must survive the next prune.
	first := insert(now, "retried", "b")
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	for index%pruneEvery != pruneEvery-1 {
		index++
	}
	apply(raft.LogNoop, nil) // the prune's entry
	if index%pruneEvery != 0 {
		t.Fatalf("index %d is not a prune's", index)
	}
	again := insert(now+int64(time.Second), "retried", "b")
	if again.Err != nil || again.TimestampUnixNano != first.TimestampUnixNano {
		t.Fatalf("retry after the prune = ts %d err %v, want the first answer ts %d", again.TimestampUnixNano, again.Err, first.TimestampUnixNano)
	}
}
