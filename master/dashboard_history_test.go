package master

import (
	"encoding/json"
	"fmt"
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

// TestSampleBounded: one sample, and so the history the page loads (600 of
// them), stays small however many tables are busy and however many ranges a
// table has. Unbounded, 1,000 busy tables made a 68 MB history whose drawing
// froze the page, and so did one table of 100 ranges (60,000 cells).
func TestSampleBounded(t *testing.T) {
	m := &pb.PartitionMap{Leaders: map[uint64]string{}, Loads: map[uint64]*pb.RangeLoad{}}
	id := uint64(0)
	add := func(table, start, end string, eps float64) {
		id++
		m.Ranges = append(m.Ranges, &pb.RangeDescriptor{RangeId: id, Table: table, Start: start, End: end})
		m.Loads[id] = &pb.RangeLoad{EntitiesPerSec: eps}
	}
	for i := range 1000 {
		add(fmt.Sprintf("t%04d", i), "", "", float64(1+i%7))
	}
	// The busiest table, of 1,000 ranges, and one refusing requests.
	for i := range 1000 {
		start, end := fmt.Sprintf("k%04d", i), fmt.Sprintf("k%04d", i+1)
		if i == 0 {
			start = ""
		}
		if i == 999 {
			end = ""
		}
		add("big", start, end, 10)
	}
	add("refused", "", "", 0)
	m.Loads[id].ThrottledPerSec = 500

	s := sampleOf(m, time.UnixMilli(1))
	b, _ := json.Marshal(s)
	if len(b) > 32<<10 {
		t.Errorf("one sample is %d bytes (%d tables)", len(b), len(s.Tables))
	}
	if len(s.Tables) != historyTables {
		t.Errorf("%d tables kept, want %d", len(s.Tables), historyTables)
	}
	for _, name := range []string{"big", "refused"} {
		if s.Tables[name] == nil {
			t.Errorf("table %s (among the busiest) left out", name)
		}
	}
	big := s.Tables["big"]
	if big == nil {
		return
	}
	if big.RangeCount != 1000 || len(big.Ranges) > historyRangeCells {
		t.Errorf("big: %d ranges counted, %d cells", big.RangeCount, len(big.Ranges))
	}
	// The cells tile the key space in order, carry all the load and count
	// every range.
	var sum float64
	n := 0
	for i, r := range big.Ranges {
		if (i == 0) != (r.Start == "") || (i == len(big.Ranges)-1) != (r.End == "") || (i > 0 && big.Ranges[i-1].End != r.Start) {
			t.Fatalf("cell %d [%q, %q) does not follow the previous one", i, r.Start, r.End)
		}
		sum += r.EntitiesPerSec
		n += max(r.Ranges, 1)
	}
	if sum != 10000 || n != 1000 {
		t.Errorf("cells sum %v entities/s over %d ranges, want 10000 over 1000", sum, n)
	}
}
