package fsm

import (
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestSetReplicasAnswersEverySpan: a membership change of a group of two
// spans answers the descriptor of each span after it (Result.Spans), each
// at its new generation, so the master records the whole group at once
// instead of waiting for heartbeats to bring the siblings' generation.
func TestSetReplicasAnswersEverySpan(t *testing.T) {
	_, g := openGroupStore(t, t.TempDir(), twoSpans)
	a := &groupApplier{t: t, g: g, clock: 1}
	set, _ := Encode(pb.CommandKind_COMMAND_KIND_SET_REPLICAS, &pb.SetReplicasCommand{Replicas: []*pb.Replica{{ServerId: "s1"}, {ServerId: "s4"}}})
	res := a.entry(set)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(res.Spans) != 2 {
		t.Fatalf("spans answered: %v", res.Spans)
	}
	for i, want := range []uint64{5, 9} {
		d := res.Spans[i]
		r, _ := g.Span(want)
		if d.GetRangeId() != want || d.GetGeneration() != r.Descriptor().GetGeneration() || len(d.GetReplicas()) != 2 || d.GetReplicas()[1].GetServerId() != "s4" {
			t.Errorf("span %d answered %v, stored %v", want, d, r.Descriptor())
		}
	}
	if res.Range.GetRangeId() != 5 {
		t.Errorf("range answered: %v", res.Range)
	}
}
