package master

import (
	"errors"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// A range on a, b and c; a leads.
var abc = &pb.RangeDescriptor{RangeId: 1, Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}

func set(ids ...string) map[string]bool {
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

func TestRemovalChoice(t *testing.T) {
	cases := []struct {
		name        string
		busiest     string
		unanswering []string
		want        string
	}{
		{"every replica answers: the busiest", "b", nil, "b"},
		{"another replica does not answer: it goes instead", "b", []string{"c"}, "c"},
		{"the busiest does not answer either: the busiest", "b", []string{"b", "c"}, "b"},
		{"never the leader", "b", []string{"a"}, "b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := removalChoice(tc.busiest, "a", abc, set(tc.unanswering...)); got != tc.want {
				t.Fatalf("removalChoice = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAddRefusal(t *testing.T) {
	// abc at generation 8; d was removed at 8 (it was a replica at 6).
	cur := &pb.RangeDescriptor{RangeId: 1, Generation: 8, Replicas: abc.GetReplicas()}
	withD := &pb.RangeDescriptor{RangeId: 1, Generation: 6, Replicas: []*pb.Replica{{ServerId: "b"}, {ServerId: "c"}, {ServerId: "d"}}}
	olderWithoutD := &pb.RangeDescriptor{RangeId: 1, Generation: 7, Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}, {ServerId: "e"}}}
	current := func(ids ...string) map[string]*pb.RangeDescriptor {
		out := map[string]*pb.RangeDescriptor{}
		for _, id := range ids {
			out[id] = cur
		}
		return out
	}
	with := func(views map[string]*pb.RangeDescriptor, id string, v *pb.RangeDescriptor) map[string]*pb.RangeDescriptor {
		views[id] = v
		return views
	}
	cases := []struct {
		name        string
		from, to    string
		unanswering []string
		views       map[string]*pb.RangeDescriptor
		want        error
	}{
		{"every replica answers", "b", "d", nil, current("a", "b", "c"), nil},
		{"the replica the move removes does not answer", "b", "d", []string{"b"}, current("a", "c"), nil},
		{"another follower does not answer", "b", "d", []string{"c"}, current("a", "b"), ErrReplicaDown},
		{"the leader does not answer", "b", "d", []string{"a"}, current("b", "c"), ErrReplicaDown},
		// Chaos seed 243's replay (section 17): c missed d's removal.
		{"a replica still counts the server added back", "b", "d", nil, with(current("a", "b"), "c", withD), ErrStaleMember},
		{"the removed replica still counts it", "b", "d", nil, with(current("a", "c"), "b", withD), ErrStaleMember},
		{"a replica behind, without the server added", "b", "d", nil, with(current("a", "b"), "c", olderWithoutD), nil},
		{"a replica behind, another server added", "b", "f", nil, with(current("a", "b"), "c", withD), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := addRefusal(cur, tc.from, tc.to, set(tc.unanswering...), tc.views)
			if (err == nil) != (tc.want == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("addRefusal = %v, want %v", err, tc.want)
			}
		})
	}
}
