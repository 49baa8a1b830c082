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
	cases := []struct {
		name        string
		from        string
		unanswering []string
		refused     bool
	}{
		{"every replica answers", "b", nil, false},
		{"the replica the move removes does not answer", "b", []string{"b"}, false},
		{"another follower does not answer", "b", []string{"c"}, true},
		{"the leader does not answer", "b", []string{"a"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := addRefusal(abc, tc.from, set(tc.unanswering...))
			if got := errors.Is(err, ErrReplicaDown); got != tc.refused || (err != nil && !got) {
				t.Fatalf("addRefusal = %v, want refused %v", err, tc.refused)
			}
		})
	}
}
