package master

import (
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

func TestSampleOf(t *testing.T) {
	m := &pb.PartitionMap{
		Servers: []*pb.ServerInfo{{ServerId: "a"}, {ServerId: "b"}},
		Ranges: []*pb.RangeDescriptor{
			{RangeId: 2, Table: "t", Start: "m"}, {RangeId: 1, Table: "t", End: "m"}, {RangeId: 3, Table: "u"},
		},
		Leaders: map[uint64]string{1: "a", 2: "b", 3: "b"},
		Loads: map[uint64]*pb.RangeLoad{1: {EntitiesPerSec: 10, MeanLatencyMs: 4}, 2: {EntitiesPerSec: 30, ThrottledPerSec: 2, MeanLatencyMs: 8},
			3: {EntitiesPerSec: 5, MeanLatencyMs: 1}},
	}
	s := sampleOf(m, time.UnixMilli(42))
	tt := s.Tables["t"]
	if s.UnixMs != 42 || tt.EntitiesPerSec != 40 || tt.ThrottledPerSec != 2 || len(tt.Ranges) != 2 || tt.Ranges[0].ID != 1 {
		t.Errorf("table t: %+v", tt)
	}
	if s.Servers["a"] != 10 || s.Servers["b"] != 35 {
		t.Errorf("servers %v", s.Servers)
	}
	// Load-weighted means: t = (10*4 + 30*8) / 40, b = (30*8 + 5*1) / 35.
	if tt.LatencyMs != 7 || s.ServerLatencyMs["a"] != 4 || s.ServerLatencyMs["b"] != 7 {
		t.Errorf("latency: table %v, servers %v", tt.LatencyMs, s.ServerLatencyMs)
	}
}

func TestHistoryRing(t *testing.T) {
	r := newHistoryRing(3)
	for i := range int64(5) {
		r.add(histSample{UnixMs: i})
	}
	tests := []struct {
		after int64
		want  []int64
	}{{-1, []int64{2, 3, 4}}, {2, []int64{3, 4}}, {4, nil}}
	for _, tc := range tests {
		got := r.after(tc.after)
		if len(got) != len(tc.want) {
			t.Fatalf("after(%d) = %v, want %v", tc.after, got, tc.want)
		}
		for i := range got {
			if got[i].UnixMs != tc.want[i] {
				t.Fatalf("after(%d) = %v, want %v", tc.after, got, tc.want)
			}
		}
	}
}
