package partitionserver

import (
	"fmt"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

func TestLoadSample(t *testing.T) {
	uniform := make([]*pb.KeyLoad, 200)
	for i := range uniform {
		uniform[i] = &pb.KeyLoad{PartitionKey: fmt.Sprintf("p%04d", i), EntitiesPerSec: 10}
	}
	oneHot := append([]*pb.KeyLoad(nil), uniform...)
	oneHot[57] = &pb.KeyLoad{PartitionKey: "p0057", EntitiesPerSec: 50000}
	cases := []struct {
		name       string
		keys       []*pb.KeyLoad
		n          int
		wantLen    int
		heavy      string  // key expected to carry weight ≥ share of the total
		heavyShare float64 //
	}{
		{"few keys are kept as they are", uniform[:5], 16, 5, "", 0},
		{"uniform load gives even steps", uniform, 16, 16, "", 0},
		{"a hot key appears once with its weight", oneHot, 16, 0, "p0057", 0.9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := loadSample(c.keys, c.n)
			if c.wantLen > 0 && len(got) != c.wantLen {
				t.Fatalf("len = %d, want %d", len(got), c.wantLen)
			}
			total, in := 0.0, 0.0
			for _, k := range c.keys {
				total += k.GetEntitiesPerSec()
			}
			for i, k := range got {
				in += k.GetEntitiesPerSec()
				if i > 0 && got[i-1].GetPartitionKey() >= k.GetPartitionKey() {
					t.Fatalf("sample not in key order: %v", got)
				}
				if k.GetPartitionKey() == c.heavy && k.GetEntitiesPerSec() < c.heavyShare*total {
					t.Fatalf("hot key weight %.0f of %.0f", k.GetEntitiesPerSec(), total)
				}
			}
			if in < total*0.999 || in > total*1.001 {
				t.Fatalf("sample carries %.0f of %.0f", in, total)
			}
		})
	}
}

func TestThrottle(t *testing.T) {
	now := time.Unix(1000, 0)
	th := newThrottle(100)
	cases := []struct {
		name  string
		after time.Duration
		n     int
		ok    bool
	}{
		{"a burst up to the rate passes", 0, 100, true},
		{"beyond it is refused", 0, 1, false},
		{"tokens come back with time", 500 * time.Millisecond, 40, true},
		{"but not more than earned", 0, 20, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			now = now.Add(c.after)
			ok, wait := th.allow("pk", c.n, now)
			if ok != c.ok || (!ok && wait <= 0) {
				t.Fatalf("allow = %v, %v; want %v", ok, wait, c.ok)
			}
		})
	}
	if ok, _ := th.allow("other", 100, now); !ok {
		t.Fatal("another partition shares the budget")
	}
	if ok, _ := (*throttle)(nil).allow("pk", 1e9, now); !ok {
		t.Fatal("a nil (disabled) throttle refused")
	}
}

func TestKeyMeterService(t *testing.T) {
	m := newKeyMeter()
	t0 := m.serviceStart
	if lat, busy := m.rollService(t0.Add(time.Second)); lat != 0 || busy != 0 {
		t.Fatalf("empty window: %v ms, %v busy/s", lat, busy)
	}
	m.served(2 * time.Millisecond)
	m.served(4 * time.Millisecond)
	for range 6 {
		m.refusedBusy()
	}
	if lat, busy := m.rollService(t0.Add(3 * time.Second)); lat != 3 || busy != 3 {
		t.Fatalf("mean of 2 and 4 ms, 6 refused in 2 s: %v ms, %v busy/s", lat, busy)
	}
	if lat, busy := m.rollService(t0.Add(4 * time.Second)); lat != 0 || busy != 0 {
		t.Fatalf("the window did not start over: %v ms, %v busy/s", lat, busy)
	}
}
