package master

import (
	"errors"
	"testing"

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
