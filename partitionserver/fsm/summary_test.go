package fsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	pb "tablestore/proto/tablestorepb"
)

// TestSummaryReportsCommittedIndex: the applied index a replica reports
// (heartbeats and RangeInfo, from Summary) is what the state file holds,
// not what the pending group commit does. The master records a merge as
// COMMIT once every replica of the right range reported its freeze
// applied; a replica that crashed before that commit restarted behind the
// freeze and quiet, and its server's replica of the left range then waited
// for it in waitMerges, when applying the merge, with nothing to open it.
func TestSummaryReportsCommittedIndex(t *testing.T) {
	s, _ := manualCommitStore(t) // the committer waits an hour
	r, err := s.OpenRange(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	write := func(index uint64) {
		data := encoded(EncodeWrite(&pb.WriteCommand{ProposedUnixNano: int64(index) * 1000,
			Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "p", fmt.Sprint(index), entityBytesOf(nil))}}))
		if res := r.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}}); res[0].(*Result).Err != nil {
			t.Fatal(res[0].(*Result).Err)
		}
	}
	write(1)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	write(2)
	if got := r.Summary(); got.AppliedIndex != 1 || got.EntityCount != 1 {
		t.Fatalf("before the commit Summary = %+v, want applied index 1 and 1 entity (the file's)", got)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := r.Summary(); got.AppliedIndex != 2 || got.EntityCount != 2 {
		t.Fatalf("after the commit Summary = %+v, want applied index 2 and 2 entities", got)
	}
}
