package master

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// TestUndoRemoval: a failed add's delete names no removal for a range
// alone in its Raft group (unguarded, as before), and for a range whose
// group serves others the group and the generation one past the
// descriptor the replica was created at, so the server deletes its whole
// copy of the group (a joiner restored every span from the snapshot, and
// refuses to delete one span alone).
func TestUndoRemoval(t *testing.T) {
	for _, c := range []struct {
		name   string
		d      *pb.RangeDescriptor
		shared bool
		want   *pb.RangeDescriptor
	}{
		{"alone", &pb.RangeDescriptor{RangeId: 4, Generation: 7}, false, nil},
		{"namesake of a shared group", &pb.RangeDescriptor{RangeId: 4, GroupId: 4, Generation: 7}, true,
			&pb.RangeDescriptor{RangeId: 4, GroupId: 4, Generation: 8}},
		{"namesake whose record names no group", &pb.RangeDescriptor{RangeId: 4, Generation: 7}, true,
			&pb.RangeDescriptor{RangeId: 4, GroupId: 4, Generation: 8}},
		{"span born in the group", &pb.RangeDescriptor{RangeId: 9, GroupId: 4, Generation: 3}, true,
			&pb.RangeDescriptor{RangeId: 9, GroupId: 4, Generation: 4}},
	} {
		if got := undoRemoval(c.d, c.shared); !proto.Equal(got, c.want) {
			t.Errorf("%s: undoRemoval = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestChangedSpans: a membership change's answer records every span of
// the group it lists, or the range alone from a server that lists none.
func TestChangedSpans(t *testing.T) {
	r := &pb.RangeDescriptor{RangeId: 4, Generation: 8}
	spans := []*pb.RangeDescriptor{r, {RangeId: 9, GroupId: 4, Generation: 4}}
	if got := changedSpans(&pb.ChangeReplicasResponse{Range: r, Spans: spans}); len(got) != 2 || got[1].GetRangeId() != 9 {
		t.Errorf("with spans: %v", got)
	}
	if got := changedSpans(&pb.ChangeReplicasResponse{Range: r}); len(got) != 1 || got[0] != r {
		t.Errorf("without spans: %v", got)
	}
}
