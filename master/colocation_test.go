package master

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

func replicasOn(id uint64, servers ...string) *pb.RangeDescriptor {
	d := &pb.RangeDescriptor{RangeId: id}
	for _, s := range servers {
		d.Replicas = append(d.Replicas, &pb.Replica{ServerId: s})
	}
	return d
}

// TestColocationGap: a merge's freeze is decided COMMIT only when every
// server of the left range holds a replica of the right range's freeze
// (each left replica takes the right range over from its own server's
// replica of it); a right range on more servers is fine (its extra
// replica is retired).
func TestColocationGap(t *testing.T) {
	tests := []struct {
		name        string
		left, right *pb.RangeDescriptor
		ok          bool
	}{
		{"the same servers", replicasOn(1, "a", "b", "c"), replicasOn(2, "c", "b", "a"), true},
		{"the right range on more", replicasOn(1, "a", "b", "c"), replicasOn(2, "a", "b", "c", "d"), true},
		{"a left replica beside none", replicasOn(1, "a", "b", "c"), replicasOn(2, "a", "b", "d"), false},
		{"the right range on fewer", replicasOn(1, "a", "b", "c"), replicasOn(2, "a", "b"), false},
	}
	for _, tt := range tests {
		err := colocationGap(tt.left, tt.right)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrNotColocated)) {
			t.Errorf("%s: %v, want ok=%v or ErrNotColocated", tt.name, err, tt.ok)
		}
	}
}

// TestMergeOfAnUnclaimedNeighbourRefused: a merge checks that the right
// neighbour it finds in the map is the range its caller claimed (the
// scheduler's op, an operator's request, a resume): the map can change
// between the claim and the merge (a split reported by heartbeats), and
// the range found then may be another operation's. Refused as busy,
// before anything is asked of a partition server (this Server has none).
func TestMergeOfAnUnclaimedNeighbourRefused(t *testing.T) {
	s, apply, first, reps := mapOnlyServer(t)
	// The map after two splits: [, m) 1, [m, t) 2, [t, ) 3.
	left := &pb.RangeDescriptor{RangeId: first.GetRangeId(), Table: "t", TableId: first.GetTableId(), End: "m", Generation: 2, Replicas: reps}
	mid := &pb.RangeDescriptor{RangeId: 100, Table: "t", TableId: first.GetTableId(), Start: "m", End: "t", Generation: 3, Replicas: reps}
	last := &pb.RangeDescriptor{RangeId: 101, Table: "t", TableId: first.GetTableId(), Start: "t", Generation: 3, Replicas: reps}
	if res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{left, mid, last}}); res.err != nil {
		t.Fatal(res.err)
	}
	// Claimed 101 (its neighbour before range 100 was split off it, say).
	_, err := s.merge(context.Background(), left.GetRangeId(), 101, causePolicy, "", nil)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("merge of range %d with the claimed neighbour 101, whose neighbour is 100 now: %v, want ErrBusy", left.GetRangeId(), err)
	}
}

// mapOnlyServer is a master with a state machine and nothing else (no
// Raft, no partition servers): what an operation decides from the map
// alone. The map holds table "t" on servers a, b and c, as one range,
// first; apply applies commands to it.
func mapOnlyServer(t *testing.T) (*Server, func(pb.MasterCommandKind, proto.Message) *applyResult, *pb.RangeDescriptor, []*pb.Replica) {
	t.Helper()
	s := &Server{cfg: DefaultConfig(), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: 1}
	s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
	apply := applier(t, s.fsm)
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	if res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: reps}); res.err != nil {
		t.Fatal(res.err)
	}
	var first *pb.RangeDescriptor
	s.fsm.read(func(st *state) {
		for _, d := range st.ranges {
			first = d
		}
	})
	return s, apply, first, reps
}
