package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"tablestore/master/scheduler"
)

// thrash lists the decisions of a run that undo a recent one: a leadership
// moved back to the server it left within leaderWindow (except by a drain);
// a range merged within mergeWindow of its split.
func thrash(rep *Report, leaderWindow, mergeWindow time.Duration) []string {
	var out []string
	type move struct {
		t        time.Duration
		from, to string
		op       scheduler.Op
	}
	lastMove := map[uint64]move{}
	splitAt := map[uint64]time.Duration{}
	for _, x := range rep.ops {
		o := x.op
		switch o.Kind {
		case scheduler.TransferLeader:
			if m, ok := lastMove[o.Range]; ok && m.from == o.To && m.to == o.From && x.t-m.t < leaderWindow && o.Rule != scheduler.RuleDrainLeader {
				out = append(out, fmt.Sprintf("%v: %s undoes %v: %s", x.t, o, m.t, m.op))
			}
			lastMove[o.Range] = move{x.t, o.From, o.To, o}
		case scheduler.Split:
			splitAt[o.Range] = x.t
		case scheduler.Merge:
			for _, id := range o.Ranges() {
				if t, ok := splitAt[id]; ok && x.t-t < mergeWindow {
					out = append(out, fmt.Sprintf("%v: %s within %v of r%d's split", x.t, o, x.t-t, id))
				}
			}
		}
	}
	return out
}

// TestNoThrash runs every workload and checks that no decision undoes a
// recent one (leadership ping-pong, a merge right after a split), and that
// the same configuration gives the same decisions (the scheduler is a
// pure function; the simulator is seeded).
func TestNoThrash(t *testing.T) {
	for _, w := range Workloads {
		t.Run(w, func(t *testing.T) {
			cfg := small(w)
			rep, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if bad := thrash(rep, cfg.Scheduler.LeaderMoveCooldown, cfg.Scheduler.MergeCooldown); len(bad) > 0 {
				t.Errorf("%d decisions undo recent ones, e.g.\n%s\n%s", len(bad), strings.Join(bad[:min(5, len(bad))], "\n"), rep.Summary())
			}
			again, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(again.ops) != len(rep.ops) {
				t.Fatalf("second run: %d operations, first %d", len(again.ops), len(rep.ops))
			}
			for i := range rep.ops {
				a, b := rep.ops[i], again.ops[i]
				if a.t != b.t || a.op.String() != b.op.String() {
					t.Fatalf("operation %d differs between two runs: %v %s / %v %s", i, a.t, a.op, b.t, b.op)
				}
			}
		})
	}
}

// TestNoSplitMergePingPong: with merge-load above half of split-load (600
// of 1,000: valid, merge-load < split-load), two halves of a split for load
// each under merge-load were merged back into a range over split-load and
// split again (on the tree before the hysteresis fix: 46 merges within 22 s
// of a split of the same range in this run). A merge must leave the merged
// range at most half of split-load (scheduler's farBelowSplit).
func TestNoSplitMergePingPong(t *testing.T) {
	cfg := small("zipf")
	cfg.Servers, cfg.Ranges, cfg.RangeLoad, cfg.RangeBytes = 6, 8, 1100, 1<<20
	cfg.Duration = 20 * time.Minute
	cfg.Scheduler.MergeLoad, cfg.Scheduler.MergeCooldown = 600, 20*time.Second
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OpsByRule[scheduler.RuleSplitLoad] == 0 {
		t.Fatalf("no split for load: the run proves nothing\n%s", rep.Summary())
	}
	if bad := thrash(rep, cfg.Scheduler.LeaderMoveCooldown, 3*cfg.Scheduler.MergeCooldown); len(bad) > 0 {
		t.Fatalf("%d decisions undo recent ones, e.g.\n%s\n%s", len(bad), strings.Join(bad[:min(5, len(bad))], "\n"), rep.Summary())
	}
}
