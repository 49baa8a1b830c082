package scheduler

import (
	"fmt"
	"testing"
	"time"
)

// TestGroupCooldownOutlivesItsRange: a balancing transfer of a shared
// group's leadership (Op.Group) keeps the group cooling for
// LeaderMoveCooldown even after the range the transfer named has left the
// group (a group split since): the group's remaining ranges are not moved
// back early. A transfer in flight keeps every range of its group busy,
// while a range the master merely claimed (listed as a transfer with no
// group) keeps only itself busy (which is enough to keep the group's
// leadership where it is: wholeGroup wants every range free).
func TestGroupCooldownOutlivesItsRange(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	reps := func() []Replica { return []Replica{{Server: "a"}, {Server: "b"}, {Server: "c"}} }
	rng := func(id, group uint64, start, end, leader string, eps float64) *Range {
		return &Range{ID: id, Group: group, TableID: 1, Table: "t", Start: start, End: end, Replicas: reps(), Leader: leader,
			Load: &Load{EntitiesPerSec: eps}}
	}
	snap := func(recent, inflight []Op) *Snapshot {
		return &Snapshot{Now: now, Slots: 4, Recent: recent, InFlight: inflight,
			Servers: []Server{{ID: "a", Live: true}, {ID: "b", Live: true}, {ID: "c", Live: true}},
			Ranges: []*Range{
				// r7 was the group's first range when its leadership
				// moved to a; it has left group 5 since.
				rng(7, 0, "", "d", "b", 50),
				rng(5, 0, "d", "m", "a", 400),
				rng(6, 5, "m", "t", "a", 400),
				rng(8, 0, "t", "w", "a", 300),
				rng(9, 0, "w", "", "a", 300),
			}}
	}
	cfg := DefaultConfig()
	cfg.LeaderMoveCooldown = 30 * time.Second
	cfg.BalanceCooldown = 0
	groupMoves := func(ops []Op) (n int) {
		for _, o := range ops {
			if o.Kind == TransferLeader && o.Range == 5 {
				if o.Group != 5 {
					t.Errorf("transfer of group 5's leadership names group %d: %v", o.Group, o)
				}
				n++
			}
		}
		return n
	}
	if n := groupMoves(Schedule(cfg, snap(nil, nil))); n != 1 {
		t.Fatalf("with no recent move, group 5 (800 of a's 1,400 entities/s) moves %d times, want once", n)
	}
	moved := Op{Kind: TransferLeader, Range: 7, Group: 5, From: "b", To: "a", Rule: RuleBalanceLeaderLoad, At: now.Add(-10 * time.Second), Done: now.Add(-9 * time.Second)}
	if n := groupMoves(Schedule(cfg, snap([]Op{moved}, nil))); n != 0 {
		t.Errorf("group 5 moved again 10 s after its leadership moved (cooldown 30 s)")
	}
	moved.At, moved.Done = now.Add(-40*time.Second), now.Add(-39*time.Second)
	if n := groupMoves(Schedule(cfg, snap([]Op{moved}, nil))); n != 1 {
		t.Errorf("group 5 not moved 40 s after its leadership moved (cooldown 30 s)")
	}
	busy := func(inflight Op) (ids []uint64) {
		p := NewPlan(cfg, snap(nil, []Op{inflight}))
		for _, id := range []uint64{5, 6, 7, 8, 9} {
			if p.busy.has(id) {
				ids = append(ids, id)
			}
		}
		return ids
	}
	if got := busy(Op{Kind: TransferLeader, Range: 6, Group: 5, From: "b", To: "a", Rule: RuleSlowDiskLeader, At: now}); fmt.Sprint(got) != "[5 6]" {
		t.Errorf("busy with group 5's transfer in flight = %v, want [5 6]", got)
	}
	if got := busy(Op{Kind: TransferLeader, Range: 6}); fmt.Sprint(got) != "[6]" {
		t.Errorf("busy with range 6 claimed = %v, want [6]", got)
	}
}

// TestGroupTransferCountsWhatItMoves: a transfer of a shared group's
// leadership moves, in the plan's figures, the ranges counted as led by
// the transfer's source: all of the group's when their reports agree, only
// those reporting that leader when they do not (a slow server's transfer
// may meet a group whose reports lag a transfer), so no server's count or
// load goes below what the snapshot gave it.
func TestGroupTransferCountsWhatItMoves(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	reps := []Replica{{Server: "a"}, {Server: "b"}, {Server: "c"}}
	for _, tc := range []struct {
		name           string
		second         string // the second span's reported leader
		wantA, wantC   int
		wantAL, wantCL float64
	}{
		{"reports agree", "a", 0, 2, 0, 700},
		{"one report lags", "b", 0, 1, 0, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := &Snapshot{Now: now, Slots: 4,
				Servers: []Server{{ID: "a", Live: true}, {ID: "b", Live: true}, {ID: "c", Live: true}},
				Ranges: []*Range{
					{ID: 5, TableID: 1, Start: "", End: "m", Replicas: reps, Leader: "a", Load: &Load{EntitiesPerSec: 300}},
					{ID: 6, Group: 5, TableID: 1, Start: "m", End: "", Replicas: reps, Leader: tc.second, Load: &Load{EntitiesPerSec: 400}},
				}}
			p := NewPlan(DefaultConfig(), snap)
			if !p.add(snap.Ranges[0], Op{Kind: TransferLeader, Range: 5, From: "a", To: "c", Rule: RuleSlowDiskLeader}) {
				t.Fatal("transfer refused")
			}
			a, c := p.servers["a"], p.servers["c"]
			if a.leaders != tc.wantA || c.leaders != tc.wantC || a.leaderLoad != tc.wantAL || c.leaderLoad != tc.wantCL {
				t.Errorf("after the transfer a leads %d (%.0f/s), c %d (%.0f/s); want %d (%.0f), %d (%.0f)",
					a.leaders, a.leaderLoad, c.leaders, c.leaderLoad, tc.wantA, tc.wantAL, tc.wantC, tc.wantCL)
			}
		})
	}
}
