package master

import (
	"testing"

	pb "tablestore/proto/tablestorepb"
)

func TestRemovalChoice(t *testing.T) {
	// After the new voter d joined a range on a, b and c; a leads.
	d := &pb.RangeDescriptor{RangeId: 1, Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}, {ServerId: "d"}}}
	cases := []struct {
		name        string
		from        string
		unanswering []string
		want        string
	}{
		{"every replica answers: the chosen one", "b", nil, "b"},
		{"another replica does not answer: it goes instead", "b", []string{"c"}, "c"},
		{"the chosen one does not answer either: the chosen one", "b", []string{"b", "c"}, "b"},
		{"never the leader", "b", []string{"a"}, "b"},
		{"never the new voter, still taking its snapshot", "b", []string{"d"}, "b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			un := map[string]bool{}
			for _, s := range tc.unanswering {
				un[s] = true
			}
			if got := removalChoice(tc.from, "d", "a", d, un); got != tc.want {
				t.Fatalf("removalChoice = %q, want %q", got, tc.want)
			}
		})
	}
}
