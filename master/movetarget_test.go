package master

import (
	"errors"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestMoveTargetRefusal: an operator's move goes only to a known server
// that is up, not draining and whose disk is not full.
func TestMoveTargetRefusal(t *testing.T) {
	servers := map[string]serverView{
		"up":       {up: true},
		"down":     {},
		"draining": {up: true, draining: true},
		"gone":     {draining: true},
		"full":     {up: true, disk: &pb.DiskSpace{AvailableBytes: 100 << 20, CapacityBytes: 100 << 30, ReserveBytes: 256 << 20}},
		"low":      {up: true, disk: &pb.DiskSpace{AvailableBytes: 1 << 30, CapacityBytes: 100 << 30, ReserveBytes: 256 << 20}},
		"older":    {up: true}, // reports no disk figures
	}
	for _, tc := range []struct {
		to   string
		want error
	}{
		{"up", nil},
		{"down", ErrTargetUnfit},
		{"draining", ErrTargetUnfit},
		{"gone", ErrTargetUnfit},
		{"full", ErrTargetUnfit},
		{"low", nil}, // the operator's call
		{"older", nil},
		{"nosuch", ErrUnknownServer},
		{"", ErrBadTarget},
	} {
		t.Run(tc.to, func(t *testing.T) {
			err := moveTargetRefusal(tc.to, servers)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("moveTargetRefusal(%q) = %v, want %v", tc.to, err, tc.want)
			}
		})
	}
}

// TestMergeReplicasRefusal: an operator's merge starts only while every
// replica of both ranges is on a server that is up.
func TestMergeReplicasRefusal(t *testing.T) {
	desc := func(id uint64, servers ...string) *pb.RangeDescriptor {
		d := &pb.RangeDescriptor{RangeId: id}
		for _, s := range servers {
			d.Replicas = append(d.Replicas, &pb.Replica{ServerId: s})
		}
		return d
	}
	servers := map[string]serverView{"a": {up: true}, "b": {up: true}, "c": {up: true}, "d": {}, "e": {up: true, draining: true}}
	for _, tc := range []struct {
		name        string
		left, right *pb.RangeDescriptor
		want        error
	}{
		{"all up", desc(1, "a", "b", "c"), desc(2, "a", "b", "c"), nil},
		{"right on a draining server that is up", desc(1, "a", "b", "c"), desc(2, "a", "b", "e"), nil},
		{"left on a down server", desc(1, "a", "b", "d"), desc(2, "a", "b", "c"), ErrReplicaDown},
		{"right on a down server", desc(1, "a", "b", "c"), desc(2, "d", "b", "c"), ErrReplicaDown},
		{"right on an unknown server", desc(1, "a", "b", "c"), desc(2, "x", "b", "c"), ErrReplicaDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mergeReplicasRefusal(tc.left, tc.right, servers)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("mergeReplicasRefusal = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestAddTargetRefusal: an add goes only to a server that is not already a
// voter of the range's Raft configuration, whatever the descriptor says.
func TestAddTargetRefusal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		voters []string
		want   error
	}{
		{"not a member", []string{"a", "b", "c"}, nil},
		{"already a voter (descriptor behind)", []string{"a", "b", "d"}, ErrBusy},
		{"leader too old to say", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := addTargetRefusal(7, "d", tc.voters)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("addTargetRefusal = %v, want %v", err, tc.want)
			}
		})
	}
}
