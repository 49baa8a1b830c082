package partitionserver

import (
	"slices"
	"testing"
	"time"

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
	at := func(eps float64, index, count uint64) *pb.RangeStatus {
		return with(idle(1), func(rs *pb.RangeStatus) {
			rs.Lifecycle, rs.Load.Lifecycle, rs.AppliedIndex, rs.Load.EntitiesPerSec, rs.Load.EntityCount = "active", "active", index, eps, count
		})
	}
	one := func(rs *pb.RangeStatus) []*pb.RangeStatus { return []*pb.RangeStatus{rs} }
	cases := []struct {
		name        string
		acked       []*pb.RangeStatus
		cur         []*pb.RangeStatus
		wantChanged []uint64
		wantRemoved []uint64
		// due: the acknowledged reports were sent a refresh ago.
		due bool
	}{
		{"idle and unchanged: nothing", []*pb.RangeStatus{idle(1), idle(2)}, []*pb.RangeStatus{idle(1), idle(2)}, nil, nil, false},
		{"new replica", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{idle(1), idle(2)}, []uint64{2}, nil, false},
		{"removed replica", []*pb.RangeStatus{idle(1), idle(2)}, []*pb.RangeStatus{idle(2)}, nil, []uint64{1}, false},
		{"applied index, drift: left out", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.AppliedIndex++ })}, nil, nil, false},
		{"applied index, refresh due", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.AppliedIndex++ })}, []uint64{1}, nil, true},
		{"applied index, a jump", one(at(100, 1000, 500)), one(at(100, 1000+indexDrift, 500)), []uint64{1}, nil, false},
		{"applied index, a range's first entries", one(at(100, 1, 500)), one(at(100, 2, 500)), []uint64{1}, nil, false},
		{"applied index, frozen", one(with(at(0, 1000, 500), func(rs *pb.RangeStatus) { rs.Frozen, rs.FrozenIndex = true, 999 })),
			one(with(at(0, 1001, 500), func(rs *pb.RangeStatus) { rs.Frozen, rs.FrozenIndex = true, 999 })), []uint64{1}, nil, false},
		{"applied index, backwards (a restore)", one(at(100, 1000, 500)), one(at(100, 900, 500)), []uint64{1}, nil, false},
		{"busy and steady: left out", one(at(100, 1000, 500)), one(at(100, 1100, 510)), nil, nil, false},
		{"busy and steady, refresh due", one(at(100, 1000, 500)), one(at(100, 1100, 510)), []uint64{1}, nil, true},
		{"rate within a quarter: left out", one(at(100, 1000, 500)), one(at(125, 1000, 500)), nil, nil, false},
		{"rate past a quarter", one(at(100, 1000, 500)), one(at(135, 1000, 500)), []uint64{1}, nil, false},
		{"rate falls past a quarter", one(at(100, 1000, 500)), one(at(70, 1000, 500)), []uint64{1}, nil, false},
		{"idle to a few per second: left out", one(at(0, 1000, 500)), one(at(rateFloor, 1000, 500)), nil, nil, false},
		{"idle to busy", one(at(0, 1000, 500)), one(at(rateFloor+1, 1000, 500)), []uint64{1}, nil, false},
		{"going idle from a few per second: left out", []*pb.RangeStatus{busy(1)}, []*pb.RangeStatus{idle(1)}, nil, nil, false},
		{"entity count within a sixteenth: left out", one(at(100, 1000, 1600)), one(at(100, 1000, 1700)), nil, nil, false},
		{"entity count past a sixteenth", one(at(100, 1000, 1600)), one(at(100, 1000, 1701)), []uint64{1}, nil, false},
		{"a few entities: left out", one(at(100, 1000, 0)), one(at(100, 1000, countFloor)), nil, nil, false},
		{"entities past the floor", one(at(100, 1000, 0)), one(at(100, 1000, countFloor+1)), []uint64{1}, nil, false},
		{"bytes past a sixteenth", one(with(at(100, 1000, 160), func(rs *pb.RangeStatus) { rs.Load.Bytes = 16 * sizeFloor })),
			one(with(at(100, 1000, 160), func(rs *pb.RangeStatus) { rs.Load.Bytes = 17*sizeFloor + 1 })), []uint64{1}, nil, false},
		{"bytes within the floor: left out", one(at(100, 1000, 160)), one(with(at(100, 1000, 160), func(rs *pb.RangeStatus) { rs.Load.Bytes = 100 + sizeFloor })), nil, nil, false},
		{"throttling starts", one(at(100, 1000, 500)), one(with(at(100, 1000, 500), func(rs *pb.RangeStatus) { rs.Load.ThrottledPerSec = 1 })), []uint64{1}, nil, false},
		{"server-busy refusals stop", one(with(at(100, 1000, 500), func(rs *pb.RangeStatus) { rs.Load.ServerBusyPerSec = 1 })), one(at(100, 1000, 500)), []uint64{1}, nil, false},
		{"leadership with drift", one(at(100, 1000, 500)), one(with(at(100, 1001, 500), func(rs *pb.RangeStatus) { rs.Leader = true })), []uint64{1}, nil, false},
		{"leadership", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Leader = true })}, []uint64{1}, nil, false},
		{"lifecycle", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Lifecycle = "active" })}, []uint64{1}, nil, false},
		{"frozen", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Frozen = true })}, []uint64{1}, nil, false},
		{"voters", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Voters = []string{"a"} })}, []uint64{1}, nil, false},
		{"non-voters", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Nonvoters = []string{"a"} })}, []uint64{1}, nil, false},
		{"descriptor replicas, same generation", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) {
			rs.Range = &pb.RangeDescriptor{RangeId: 1, Generation: 1, Replicas: []*pb.Replica{{ServerId: "b"}}}
		})}, []uint64{1}, nil, false},
		{"equal descriptor, another copy", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) {
			rs.Range = &pb.RangeDescriptor{RangeId: 1, Generation: 1, Replicas: []*pb.Replica{{ServerId: "a"}}}
		})}, nil, nil, false},
		{"entity count, refresh due", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Load.EntityCount++ })}, []uint64{1}, nil, true},
		{"busy, refresh due", []*pb.RangeStatus{busy(1)}, []*pb.RangeStatus{busy(1)}, []uint64{1}, nil, true},
		{"going idle, refresh due", []*pb.RangeStatus{busy(1)}, []*pb.RangeStatus{idle(1)}, []uint64{1}, nil, true},
		{"any rate counts", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Load.ServerBusyPerSec = 1 })}, []uint64{1}, nil, false},
		{"hot keys, refresh due", []*pb.RangeStatus{idle(1)}, []*pb.RangeStatus{with(idle(1), func(rs *pb.RangeStatus) { rs.Load.HotKeys = []*pb.KeyLoad{{PartitionKey: "p"}} })}, []uint64{1}, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const refresh = 2 * time.Second
			t0 := time.Unix(1000, 0)
			acked := map[uint64]ackedReport{}
			for _, rs := range c.acked {
				acked[rs.GetRangeId()] = ackedReport{rs: rs, at: t0}
			}
			now := t0.Add(refresh - time.Millisecond)
			if c.due {
				now = t0.Add(refresh)
			}
			changed, removed := reportDelta(acked, c.cur, now, refresh)
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
