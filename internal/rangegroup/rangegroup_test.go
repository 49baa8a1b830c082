package rangegroup

import (
	"testing"

	pb "tablestore/proto/tablestorepb"
)

func TestGroupOf(t *testing.T) {
	for _, c := range []struct {
		name string
		d    *pb.RangeDescriptor
		want uint64
	}{
		{"group id 0 is the range itself", &pb.RangeDescriptor{RangeId: 7}, 7},
		{"a span of another range's group", &pb.RangeDescriptor{RangeId: 9, GroupId: 7}, 7},
		{"the namesake span naming its group", &pb.RangeDescriptor{RangeId: 7, GroupId: 7}, 7},
		{"a group whose namesake range is gone", &pb.RangeDescriptor{RangeId: 12, GroupId: 3}, 3},
		{"nil descriptor", nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := GroupOf(c.d); got != c.want {
				t.Errorf("GroupOf(%v) = %d, want %d", c.d, got, c.want)
			}
		})
	}
}
