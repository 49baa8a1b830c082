package master

import (
	"fmt"
	"testing"
	"time"

	"tablestore/master/scheduler"
)

// These are the master's policy tests from before the scheduler was its own
// package, kept as they were but driving scheduler.Schedule with the
// master's PolicyConfig; the scheduler's own scenarios are in
// master/scheduler/testdata.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type rangeView = scheduler.Range

func desc(id uint64, start, end string, servers ...string) *scheduler.Range {
	r := &scheduler.Range{ID: id, Table: "t", TableID: 1, Start: start, End: end}
	for _, s := range servers {
		r.Replicas = append(r.Replicas, scheduler.Replica{Server: s})
	}
	return r
}

// rv builds a range with a leader and a load.
func rv(d *scheduler.Range, leader string, load *scheduler.Load) *scheduler.Range {
	d.Leader, d.Load = leader, load
	return d
}

func keys(kv ...any) []scheduler.KeyLoad {
	var out []scheduler.KeyLoad
	for i := 0; i < len(kv); i += 2 {
		out = append(out, scheduler.KeyLoad{Key: kv[i].(string), EntitiesPerSec: kv[i+1].(float64)})
	}
	return out
}

func servers(live []string, down map[string]time.Time, now time.Time) []scheduler.Server {
	var out []scheduler.Server
	for _, s := range live {
		out = append(out, scheduler.Server{ID: s, Live: true, LastSeen: now})
	}
	for s, t := range down {
		out = append(out, scheduler.Server{ID: s, LastSeen: t})
	}
	return out
}

func view(now time.Time, rs ...*scheduler.Range) *scheduler.Snapshot {
	return &scheduler.Snapshot{Now: now, Ranges: rs, Servers: servers([]string{"a", "b", "c"}, nil, now)}
}

func plan(cfg PolicyConfig, v *scheduler.Snapshot, slots int) []scheduler.Op {
	v.Slots = slots
	return scheduler.Schedule(cfg.Config, v)
}

func TestLoadSplitKey(t *testing.T) {
	cases := []struct {
		name      string
		hot       []scheduler.KeyLoad
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
			key, share, ok := scheduler.LoadSplitKey(rv(desc(1, "", ""), "", &scheduler.Load{HotKeys: c.hot}))
			if key != c.wantKey || ok != c.wantOK || (ok && share != c.wantShare) {
				t.Fatalf("loadSplitKey = %q, %.3f, %v; want %q, %.3f, %v", key, share, ok, c.wantKey, c.wantShare, c.wantOK)
			}
		})
	}
	t.Run("keys outside the range are ignored", func(t *testing.T) {
		key, _, ok := scheduler.LoadSplitKey(rv(desc(2, "m", "t"), "", &scheduler.Load{HotKeys: keys("a", 900.0, "n", 100.0, "p", 100.0, "z", 900.0)}))
		if !ok || key != "p" {
			t.Fatalf("got %q %v, want p", key, ok)
		}
	})
}

func TestPlanSplits(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.SplitLoad, cfg.SplitWindow = 1000, 2*time.Second
	hotSpread := &scheduler.Load{EntitiesPerSec: 3000, HotKeys: keys("a", 1000.0, "b", 1000.0, "c", 1000.0)}
	hotOneKey := &scheduler.Load{EntitiesPerSec: 3000, HotKeys: keys("a", 2950.0, "b", 50.0)}
	cases := []struct {
		name     string
		load     *scheduler.Load
		hotFor   time.Duration
		wantOps  int
		wantKind scheduler.Kind
		wantKey  string
	}{
		{"sustained load over many keys splits", hotSpread, 3 * time.Second, 1, scheduler.Split, "b"},
		{"load not yet sustained waits", hotSpread, time.Second, 0, 0, ""},
		{"one hot key is never split", hotOneKey, time.Minute, 0, 0, ""},
		{"oversized range splits by size", &scheduler.Load{Bytes: cfg.SplitBytes + 1}, 0, 1, scheduler.Split, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rv(desc(1, "", "", "a", "b", "c"), "a", c.load)
			if c.hotFor > 0 {
				r.HotSince = t0.Add(-c.hotFor)
			}
			cfg := cfg
			cfg.BalanceLeaders = false
			ops := plan(cfg, view(t0, r), 4)
			if len(ops) != c.wantOps {
				t.Fatalf("plan = %+v, want %d ops", ops, c.wantOps)
			}
			if c.wantOps > 0 && (ops[0].Kind != c.wantKind || ops[0].Key != c.wantKey) {
				t.Fatalf("plan = %+v, want %v at %q", ops[0], c.wantKind, c.wantKey)
			}
		})
	}
}

func TestPlanMergeCooldownNoThrash(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.MergeLoad, cfg.MergeCooldown, cfg.BalanceLeaders = 100, time.Minute, false
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
			l := rv(desc(1, "", "m", "a", "b", "c"), "a", &scheduler.Load{EntitiesPerSec: 5, Bytes: c.size})
			r := rv(desc(2, "m", "", "a", "b", "c"), "b", &scheduler.Load{EntitiesPerSec: 5, Bytes: c.size})
			if c.leftCold > 0 {
				l.ColdSince = t0.Add(-c.leftCold)
			}
			if c.rightCold > 0 {
				r.ColdSince = t0.Add(-c.rightCold)
			}
			ops := plan(cfg, view(t0, l, r), 4)
			got := len(ops) == 1 && ops[0].Kind == scheduler.Merge && ops[0].Range == 1
			if got != c.wantMerge || (!c.wantMerge && len(ops) != 0) {
				t.Fatalf("plan = %+v, want merge %v", ops, c.wantMerge)
			}
		})
	}
}

func TestPlanBalancesLeaders(t *testing.T) {
	cfg := DefaultPolicyConfig()
	mk := func(id uint64, start, end, leader string, load float64) *rangeView {
		return rv(desc(id, start, end, "a", "b", "c"), leader, &scheduler.Load{EntitiesPerSec: load})
	}
	t.Run("load moves off the busiest server", func(t *testing.T) {
		ops := plan(cfg, view(t0, mk(1, "", "g", "a", 900), mk(2, "g", "p", "a", 800), mk(3, "p", "", "b", 100)), 4)
		if len(ops) != 1 || ops[0].Kind != scheduler.TransferLeader || ops[0].From != "a" || ops[0].To != "c" {
			t.Fatalf("plan = %+v, want a leader moved from a to c", ops)
		}
	})
	t.Run("no balancing right after the last move", func(t *testing.T) {
		v := view(t0, mk(1, "", "g", "a", 900), mk(2, "g", "p", "a", 800), mk(3, "p", "", "b", 100))
		v.Recent = []scheduler.Op{{Kind: scheduler.TransferLeader, Range: 3, From: "c", To: "a", Rule: scheduler.RuleBalanceLeaderLoad, At: t0.Add(-time.Second)}}
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
		if len(ops) != 1 || ops[0].Kind != scheduler.TransferLeader || ops[0].From != "a" {
			t.Fatalf("plan = %+v, want a leader moved off a", ops)
		}
	})
}

func TestPlanReReplicates(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.ReplicateAfter, cfg.BalanceLeaders = 30*time.Second, false
	mkView := func(downFor time.Duration) *scheduler.Snapshot {
		v := view(t0, rv(desc(1, "", "", "a", "b", "c"), "a", &scheduler.Load{}))
		v.Servers = servers([]string{"a", "b", "d"}, map[string]time.Time{"c": t0.Add(-downFor)}, t0)
		return v
	}
	t.Run("down briefly: wait", func(t *testing.T) {
		if ops := plan(cfg, mkView(10*time.Second), 4); len(ops) != 0 {
			t.Fatalf("plan = %+v, want nothing yet", ops)
		}
	})
	t.Run("down past the timeout: move to the spare server", func(t *testing.T) {
		ops := plan(cfg, mkView(time.Minute), 4)
		if len(ops) != 1 || ops[0].Kind != scheduler.Move || ops[0].From != "c" || ops[0].To != "d" {
			t.Fatalf("plan = %+v, want range 1 moved from c to d", ops)
		}
	})
}

func TestPlanRespectsSlotsAndBusy(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.BalanceLeaders = false
	hot := func(id uint64, start, end string) *rangeView {
		r := rv(desc(id, start, end, "a", "b", "c"), "a", &scheduler.Load{EntitiesPerSec: 5000, HotKeys: keys(start+"1", 2500.0, start+"2", 2500.0)})
		r.HotSince = t0.Add(-time.Minute)
		return r
	}
	v := view(t0, hot(1, "a", "b"), hot(2, "b", "c"), hot(3, "c", ""))
	v.InFlight = []scheduler.Op{{Kind: scheduler.Split, Range: 2}}
	ops := plan(cfg, v, 1)
	if len(ops) != 1 || ops[0].Range != 1 {
		t.Fatalf("plan = %+v, want only range 1 (one slot, range 2 busy)", ops)
	}
}

func TestPlanBalancesReplicas(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.BalanceLeaders = false
	mk := func(id uint64, start, end, leader string, servers ...string) *rangeView {
		return rv(desc(id, start, end, servers...), leader, &scheduler.Load{})
	}
	v := view(t0, mk(1, "", "g", "a", "a", "b", "c"), mk(2, "g", "p", "a", "a", "b", "c"), mk(3, "p", "", "b", "a", "b", "c"))
	v.Servers = servers([]string{"a", "b", "c", "d"}, nil, t0)
	t.Run("a new server gets replicas, from one it does not lead", func(t *testing.T) {
		ops := plan(cfg, v, 4)
		if len(ops) != 1 || ops[0].Kind != scheduler.Move || ops[0].To != "d" || ops[0].From != "a" || ops[0].Range != 3 {
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
	var sample []scheduler.KeyLoad
	for i := 0; i < 16; i++ {
		sample = append(sample, scheduler.KeyLoad{Key: fmt.Sprintf("p%04d", (i+1)*200/16-1), EntitiesPerSec: 100})
	}
	l := &scheduler.Load{EntitiesPerSec: 1600, HotKeys: keys("p0000", 10.0, "p0001", 10.0), Sample: sample}
	key, share, ok := scheduler.LoadSplitKey(rv(desc(1, "", ""), "", l))
	if !ok || key < "p0080" || key > "p0120" || share > 0.5 {
		t.Fatalf("loadSplitKey = %q, %.2f, %v; want a key near p0100", key, share, ok)
	}
}
