package partitionserver

import (
	"context"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// TestChangeReplicasAnswersEverySpan: a membership change of a group of
// two spans (here one that only records the voters) answers every span's
// descriptor at its new generation, so the master records the group at
// once (docs/range-groups.md, "A group moves whole").
func TestChangeReplicasAnswersEverySpan(t *testing.T) {
	m := &heartbeatMaster{}
	s := started(t, newAgainstMaster(t, m, nil))
	_, v := leadingRangeWithWrites(t, s, 71, 1, 3)
	splitInGroup(t, v, 71, "m", 72)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := map[uint64]uint64{}
	for _, id := range []uint64{71, 72} {
		info, err := v.RangeInfo(ctx, &pb.RangeInfoRequest{RangeId: id})
		if err != nil {
			t.Fatal(err)
		}
		before[id] = info.GetStatus().GetRange().GetGeneration()
	}
	resp, err := v.ChangeReplicas(ctx, &pb.ChangeReplicasRequest{RangeId: 71})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetSpans()) != 2 {
		t.Fatalf("spans answered: %v", resp.GetSpans())
	}
	for _, d := range resp.GetSpans() {
		if d.GetGeneration() != before[d.GetRangeId()]+1 || d.GetGroupId() != 71 {
			t.Errorf("span %d answered %v (generation before %d)", d.GetRangeId(), d, before[d.GetRangeId()])
		}
	}
	if resp.GetRange().GetRangeId() != 71 {
		t.Errorf("range answered: %v", resp.GetRange())
	}
}
