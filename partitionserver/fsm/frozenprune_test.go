package fsm

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	pb "tablestore/proto/tablestorepb"
)

// TestFrozenRangeKeepsItsRequestRecords: a merge takes over the frozen
// right range's request records as each server's replica of it left them,
// and a replica may apply entries past the freeze (a QUIESCE marker, a
// configuration) that another has not when the merge applies there (the
// merge needs only the freeze applied, and stops the right range's group).
// Had such an entry pruned the right range's records on one server only,
// the merged range's replicas would hold different records, and a retry
// of an expired write would apply again on one replica and not on another.
func TestFrozenRangeKeepsItsRequestRecords(t *testing.T) {
	left := &pb.RangeDescriptor{RangeId: 1, TableId: 7, End: "m", Generation: 1}
	right := &pb.RangeDescriptor{RangeId: 2, TableId: 7, Start: "m", Generation: 1}
	ahead := newWorld(t, false, left, right)
	behind := newWorld(t, false, left, right)
	both := []*world{ahead, behind}
	now := int64(1_700_000_000_000_000_000)
	ent := entityBytesOf(nil)
	retry := encoded(EncodeWrite(&pb.WriteCommand{ProposedUnixNano: now, RequestId: []byte("old-request"),
		Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, "x", "r", ent)}}))
	later := encoded(EncodeWrite(&pb.WriteCommand{ProposedUnixNano: now + int64(11*time.Minute),
		Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, "y", "r", ent)}}))
	freeze := encoded(Encode(pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{}))
	for _, w := range both {
		w.entry(2, 0, raft.LogCommand, retry)
		w.entry(2, 0, raft.LogCommand, later) // the record is now past the TTL by the range's clock
		w.entry(2, pruneEvery-1, raft.LogCommand, freeze)
		w.flush()
	}
	freezeIndex := ahead.index[2]
	// One server's replica of the right range applies an entry past the
	// freeze, at an index where replicas prune.
	quiesce := encoded(EncodeQuiesce())
	ahead.entry(2, pruneEvery, raft.LogCommand, quiesce)
	ahead.flush()
	merge := encoded(Encode(pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: right, RightFreezeIndex: freezeIndex}))
	for _, w := range both {
		if res := w.entry(1, 0, raft.LogCommand, merge); res.Err != nil {
			t.Fatal(res.Err)
		}
		w.flush()
	}
	for _, b := range [][]byte{bucketRequests, bucketRequestsByTime} {
		if got, want := dumpBucket(t, ahead.s, b), dumpBucket(t, behind.s, b); got != want {
			t.Fatalf("%s differ between the merged range's replicas: %s", b, firstDiff(got, want))
		}
	}
	// The retry answers alike on both.
	var ts []int64
	for _, w := range both {
		ts = append(ts, w.entry(1, 0, raft.LogCommand, retry).TimestampUnixNano)
	}
	if ts[0] != ts[1] {
		t.Fatalf("the retried write got timestamps %d and %d on the two replicas", ts[0], ts[1])
	}
}
