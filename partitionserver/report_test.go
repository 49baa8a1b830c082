package partitionserver

import (
	"slices"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

func TestReportDelta(t *testing.T) {
	desc := &pb.RangeDescriptor{RangeId: 1, Generation: 1, Replicas: []*pb.Replica{{ServerId: "a"}}}
	idle := func(id uint64) *pb.RangeStatus {
		return &pb.RangeStatus{RangeId: id, Generation: 1, AppliedIndex: 10, Range: desc, Lifecycle: "quiet",
			Load: &pb.RangeLoad{EntityCount: 3, Bytes: 100, Lifecycle: "quiet"}}
	}
	with := func(rs *pb.RangeStatus, f func(*pb.RangeStatus)) *pb.RangeStatus {
		f(rs)
		return rs
	}
	busy := func(id uint64) *pb.RangeStatus {
		return with(idle(id), func(rs *pb.RangeStatus) { rs.Load.EntitiesPerSec = 5 })
	}
	cases := []struct {
		name        string
		acked       []*pb.RangeStatus
		cur         []*pb.RangeStatus
		wantChanged []uint64
		wantRemoved []uint64
	}{
		{"idle and unchanged: nothing", []*pb.RangeStatus{idle(1), idle(2)}, []*pb.RangeStatus{idle(1), idle(2)}, nil, nil},
		{"new replica", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{idle(1), idle(2)}, []uint64{2}, nil},
		{"removed replica", []*pb.RangeStatus{idle(1), idle(2)}, []*pb.RangeStatus{idle(2)}, nil, []uint64{1}},
		{"applied index", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.AppliedIndex++ })}, []uint64{1}, nil},
		{"leadership", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Leader = true })}, []uint64{1}, nil},
		{"lifecycle", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Lifecycle = "active" })}, []uint64{1}, nil},
		{"frozen", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Frozen = true })}, []uint64{1}, nil},
		{"voters", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Voters = []string{"a"} })}, []uint64{1}, nil},
		{"non-voters", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Nonvoters = []string{"a"} })}, []uint64{1}, nil},
		{"descriptor replicas, same generation", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) {
			rs.Range = &pb.RangeDescriptor{RangeId: 1, Generation: 1, Replicas: []*pb.Replica{{ServerId: "b"}}}
		})}, []uint64{1}, nil},
		{"equal descriptor, another copy", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) {
			rs.Range = &pb.RangeDescriptor{RangeId: 1, Generation: 1, Replicas: []*pb.Replica{{ServerId: "a"}}}
		})}, nil, nil},
		{"entity count", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Load.EntityCount++ })}, []uint64{1}, nil},
		{"busy is always reported", []*pb.RangeStatus{busy(1)}, []*pb.RangeStatus{busy(1)}, []uint64{1}, nil},
		{"going idle is reported", []*pb.RangeStatus{busy(1)}, []*pb.RangeStatus{idle(1)}, []uint64{1}, nil},
		{"any rate counts", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Load.ServerBusyPerSec = 1 })}, []uint64{1}, nil},
		{"hot keys count", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Load.HotKeys = []*pb.KeyLoad{{PartitionKey: "p"}} })}, []uint64{1}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			acked := map[uint64]*pb.RangeStatus{}
			for _, rs := range c.acked {
				acked[rs.GetRangeId()] = rs
			}
			changed, removed := reportDelta(acked, c.cur)
			var ids []uint64
			for _, rs := range changed {
				ids = append(ids, rs.GetRangeId())
			}
			if !slices.Equal(ids, c.wantChanged) || !slices.Equal(removed, c.wantRemoved) {
				t.Fatalf("changed %v removed %v, want %v %v", ids, removed, c.wantChanged, c.wantRemoved)
			}
		})
	}
}
