package master

import (
	"fmt"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func desc(id uint64, start, end string, servers ...string) *pb.RangeDescriptor {
	d := &pb.RangeDescriptor{RangeId: id, Table: "t", TableId: 1, Start: start, End: end, Generation: 1}
	for _, s := range servers {
		d.Replicas = append(d.Replicas, &pb.Replica{ServerId: s})
	}
	return d
}

func keys(kv ...any) []*pb.KeyLoad {
	var out []*pb.KeyLoad
	for i := 0; i < len(kv); i += 2 {
		out = append(out, &pb.KeyLoad{PartitionKey: kv[i].(string), EntitiesPerSec: kv[i+1].(float64)})
	}
	return out
}

func view(now time.Time, rs ...*rangeView) clusterView {
	return clusterView{
		now: now, ranges: rs, live: map[string]bool{"a": true, "b": true, "c": true},
		down: map[string]time.Time{}, busy: map[uint64]bool{}, servers: []string{"a", "b", "c"},
	}
}

func TestLoadSplitKey(t *testing.T) {
	d := desc(1, "", "")
	cases := []struct {
		name      string
		hot       []*pb.KeyLoad
		wantKey   string
		wantShare float64
		wantOK    bool
	}{
		{"even load splits in the middle", keys("a", 100.0, "b", 100.0, "c", 100.0, "d", 100.0), "b", 0.25, true},
		{"weighted median", keys("a", 10.0, "b", 10.0, "c", 10.0, "d", 300.0), "d", 300.0 / 330, true},
		{"first key heaviest still leaves it alone on the left", keys("a", 500.0, "b", 10.0, "c", 10.0), "b", 500.0 / 520, true},
		{"one key cannot be split", keys("a", 500.0), "", 1, false},
		{"no load", nil, "", 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key, share, ok := loadSplitKey(d, &pb.RangeLoad{HotKeys: c.hot})
			if key != c.wantKey || ok != c.wantOK || (ok && share != c.wantShare) {
				t.Fatalf("loadSplitKey = %q, %.3f, %v; want %q, %.3f, %v", key, share, ok, c.wantKey, c.wantShare, c.wantOK)
			}
		})
	}
	t.Run("keys outside the range are ignored", func(t *testing.T) {
		key, _, ok := loadSplitKey(desc(2, "m", "t"), &pb.RangeLoad{HotKeys: keys("a", 900.0, "n", 100.0, "p", 100.0, "z", 900.0)})
		if !ok || key != "p" {
			t.Fatalf("got %q %v, want p", key, ok)
		}
	})
}

func TestPlanSplits(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.SplitLoad, cfg.SplitWindow = 1000, 2*time.Second
	hotSpread := &pb.RangeLoad{EntitiesPerSec: 3000, HotKeys: keys("a", 1000.0, "b", 1000.0, "c", 1000.0)}
	hotOneKey := &pb.RangeLoad{EntitiesPerSec: 3000, HotKeys: keys("a", 2950.0, "b", 50.0)}
	cases := []struct {
		name     string
		load     *pb.RangeLoad
		hotFor   time.Duration
		wantOps  int
		wantKind opKind
		wantKey  string
	}{
		{"sustained load over many keys splits", hotSpread, 3 * time.Second, 1, opSplit, "b"},
		{"load not yet sustained waits", hotSpread, time.Second, 0, 0, ""},
		{"one hot key is never split", hotOneKey, time.Minute, 0, 0, ""},
		{"oversized range splits by size", &pb.RangeLoad{Bytes: cfg.SplitBytes + 1}, 0, 1, opSplit, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rv := &rangeView{desc: desc(1, "", "", "a", "b", "c"), leader: "a", load: c.load}
			if c.hotFor > 0 {
				rv.hotSince = t0.Add(-c.hotFor)
			}
			cfg := cfg
			cfg.BalanceLeaders = false
			ops := plan(cfg, view(t0, rv), 4)
			if len(ops) != c.wantOps {
				t.Fatalf("plan = %+v, want %d ops", ops, c.wantOps)
			}
			if c.wantOps > 0 && (ops[0].kind != c.wantKind || ops[0].key != c.wantKey) {
				t.Fatalf("plan = %+v, want %v at %q", ops[0], c.wantKind, c.wantKey)
			}
		})
	}
}

func TestPlanMergeCooldownNoThrash(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.MergeLoad, cfg.MergeCooldown, cfg.BalanceLeaders = 100, time.Minute, false
	cold := &pb.RangeLoad{EntitiesPerSec: 5, Bytes: 1 << 20}
	cases := []struct {
		name                string
		leftCold, rightCold time.Duration // 0: not cold
		size                uint64
		wantMerge           bool
	}{
		{"cold past the cooldown merges", 2 * time.Minute, 2 * time.Minute, 1 << 20, true},
		{"one side cold too briefly waits", 2 * time.Minute, 30 * time.Second, 1 << 20, false},
		{"a side still loaded never merges (no thrash)", 2 * time.Minute, 0, 1 << 20, false},
		{"too large combined", 2 * time.Minute, 2 * time.Minute, cfg.MergeBytes, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := &rangeView{desc: desc(1, "", "m", "a", "b", "c"), leader: "a", load: &pb.RangeLoad{EntitiesPerSec: cold.EntitiesPerSec, Bytes: c.size}}
			r := &rangeView{desc: desc(2, "m", "", "a", "b", "c"), leader: "b", load: &pb.RangeLoad{EntitiesPerSec: cold.EntitiesPerSec, Bytes: c.size}}
			if c.leftCold > 0 {
				l.coldSince = t0.Add(-c.leftCold)
			}
			if c.rightCold > 0 {
				r.coldSince = t0.Add(-c.rightCold)
			}
			ops := plan(cfg, view(t0, l, r), 4)
			got := len(ops) == 1 && ops[0].kind == opMerge && ops[0].rangeID == 1
			if got != c.wantMerge || (!c.wantMerge && len(ops) != 0) {
				t.Fatalf("plan = %+v, want merge %v", ops, c.wantMerge)
			}
		})
	}
}

func TestPlanBalancesLeaders(t *testing.T) {
	cfg := DefaultPolicyConfig()
	mk := func(id uint64, start, end, leader string, load float64) *rangeView {
		return &rangeView{desc: desc(id, start, end, "a", "b", "c"), leader: leader, load: &pb.RangeLoad{EntitiesPerSec: load}}
	}
	t.Run("load moves off the busiest server", func(t *testing.T) {
		ops := plan(cfg, view(t0, mk(1, "", "g", "a", 900), mk(2, "g", "p", "a", 800), mk(3, "p", "", "b", 100)), 4)
		if len(ops) != 1 || ops[0].kind != opTransfer || ops[0].from != "a" || ops[0].to != "c" {
			t.Fatalf("plan = %+v, want a leader moved from a to c", ops)
		}
	})
	t.Run("no balancing right after the last move", func(t *testing.T) {
		v := view(t0, mk(1, "", "g", "a", 900), mk(2, "g", "p", "a", 800), mk(3, "p", "", "b", 100))
		v.lastBalance = t0.Add(-time.Second)
		if ops := plan(cfg, v, 4); len(ops) != 0 {
			t.Fatalf("plan = %+v, want nothing during the cooldown", ops)
		}
	})
	t.Run("a move that would flip the imbalance is not made", func(t *testing.T) {
		ops := plan(cfg, view(t0, mk(1, "", "g", "a", 900), mk(2, "g", "p", "b", 500), mk(3, "p", "", "c", 450)), 4)
		if len(ops) != 0 {
			t.Fatalf("plan = %+v, want nothing (moving range 1 would only move the hot spot)", ops)
		}
	})
	t.Run("balanced cluster is left alone", func(t *testing.T) {
		ops := plan(cfg, view(t0, mk(1, "", "g", "a", 100), mk(2, "g", "p", "b", 100), mk(3, "p", "", "c", 100)), 4)
		if len(ops) != 0 {
			t.Fatalf("plan = %+v, want nothing", ops)
		}
	})
	t.Run("idle leader counts even out", func(t *testing.T) {
		ops := plan(cfg, view(t0, mk(1, "", "g", "a", 0), mk(2, "g", "p", "a", 0), mk(3, "p", "", "a", 0)), 4)
		if len(ops) != 1 || ops[0].kind != opTransfer || ops[0].from != "a" {
			t.Fatalf("plan = %+v, want a leader moved off a", ops)
		}
	})
}

func TestPlanReReplicates(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.ReplicateAfter, cfg.BalanceLeaders = 30*time.Second, false
	v := view(t0, &rangeView{desc: desc(1, "", "", "a", "b", "c"), leader: "a", load: &pb.RangeLoad{}})
	v.servers = []string{"a", "b", "c", "d"}
	v.live = map[string]bool{"a": true, "b": true, "d": true}
	t.Run("down briefly: wait", func(t *testing.T) {
		v := v
		v.busy = map[uint64]bool{}
		v.down = map[string]time.Time{"c": t0.Add(-10 * time.Second)}
		if ops := plan(cfg, v, 4); len(ops) != 0 {
			t.Fatalf("plan = %+v, want nothing yet", ops)
		}
	})
	t.Run("down past the timeout: move to the spare server", func(t *testing.T) {
		v := v
		v.busy = map[uint64]bool{}
		v.down = map[string]time.Time{"c": t0.Add(-time.Minute)}
		ops := plan(cfg, v, 4)
		if len(ops) != 1 || ops[0].kind != opMove || ops[0].from != "c" || ops[0].to != "d" {
			t.Fatalf("plan = %+v, want range 1 moved from c to d", ops)
		}
	})
}

func TestPlanRespectsSlotsAndBusy(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.BalanceLeaders = false
	hot := func(id uint64, start, end string) *rangeView {
		return &rangeView{desc: desc(id, start, end, "a", "b", "c"), leader: "a", hotSince: t0.Add(-time.Minute),
			load: &pb.RangeLoad{EntitiesPerSec: 5000, HotKeys: keys(start+"1", 2500.0, start+"2", 2500.0)}}
	}
	v := view(t0, hot(1, "a", "b"), hot(2, "b", "c"), hot(3, "c", ""))
	v.busy[2] = true
	ops := plan(cfg, v, 1)
	if len(ops) != 1 || ops[0].rangeID != 1 {
		t.Fatalf("plan = %+v, want only range 1 (one slot, range 2 busy)", ops)
	}
}

func TestPlanBalancesReplicas(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.BalanceLeaders = false
	mk := func(id uint64, start, end, leader string, servers ...string) *rangeView {
		return &rangeView{desc: desc(id, start, end, servers...), leader: leader, load: &pb.RangeLoad{}}
	}
	v := view(t0, mk(1, "", "g", "a", "a", "b", "c"), mk(2, "g", "p", "a", "a", "b", "c"), mk(3, "p", "", "b", "a", "b", "c"))
	v.servers = []string{"a", "b", "c", "d"}
	v.live["d"] = true
	t.Run("a new server gets replicas, from one it does not lead", func(t *testing.T) {
		ops := plan(cfg, v, 4)
		if len(ops) != 1 || ops[0].kind != opMove || ops[0].to != "d" || ops[0].from != "a" || ops[0].rangeID != 3 {
			t.Fatalf("plan = %+v, want range 3 moved from a to d", ops)
		}
	})
	t.Run("even counts stay", func(t *testing.T) {
		v := view(t0, mk(1, "", "", "a", "a", "b", "c"))
		if ops := plan(cfg, v, 4); len(ops) != 0 {
			t.Fatalf("plan = %+v, want nothing", ops)
		}
	})
}

func TestLoadSplitKeyUsesTheLoadSample(t *testing.T) {
	// 200 keys of equal load: the busiest-keys list is arbitrary, the
	// sample is not; the split must land near the middle.
	var sample []*pb.KeyLoad
	for i := 0; i < 16; i++ {
		sample = append(sample, &pb.KeyLoad{PartitionKey: fmt.Sprintf("p%04d", (i+1)*200/16-1), EntitiesPerSec: 100})
	}
	l := &pb.RangeLoad{EntitiesPerSec: 1600, HotKeys: keys("p0000", 10.0, "p0001", 10.0), LoadSample: sample}
	key, share, ok := loadSplitKey(desc(1, "", ""), l)
	if !ok || key < "p0080" || key > "p0120" || share > 0.5 {
		t.Fatalf("loadSplitKey = %q, %.2f, %v; want a key near p0100", key, share, ok)
	}
}
