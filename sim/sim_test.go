package sim

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tablestore/master/scheduler"
)

func small(workload string) Config {
	cfg := DefaultConfig()
	cfg.Servers, cfg.Ranges, cfg.Duration, cfg.EventAt, cfg.Workload = 20, 400, 6*time.Minute, 2*time.Minute, workload
	cfg.HotShare = 0.05
	return cfg
}

// TestHotSpotAbsorbed: a 10x hot spot on 5% of the ranges of a small
// cluster is spread under the target by the real scheduler.
func TestHotSpotAbsorbed(t *testing.T) {
	rep, err := Run(small("hot-partition"))
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep.Summary())
	if rep.PeakSpread <= rep.Target {
		t.Fatalf("the hot spot did not unbalance the cluster (peak %.2f): the test proves nothing", rep.PeakSpread)
	}
	if rep.AbsorbSec < 0 || rep.AbsorbSec > 120 {
		t.Fatalf("absorbed after %.0f s, want within 120 s", rep.AbsorbSec)
	}
}

func TestWorkloads(t *testing.T) {
	for _, w := range Workloads {
		t.Run(w, func(t *testing.T) {
			rep, err := Run(small(w))
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Points) == 0 || rep.ServedShare <= 0 || rep.ServedShare > 1.0000001 {
				t.Fatalf("report %+v", rep)
			}
			var html, js bytes.Buffer
			if err := rep.WriteHTML(&html); err != nil {
				t.Fatal(err)
			}
			if err := rep.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(html.String(), "<svg") || strings.Contains(html.String(), "http://") && strings.Count(html.String(), "http://www.w3.org/2000/svg") != strings.Count(html.String(), "http://") {
				t.Fatal("the page must be self-contained with inline SVG")
			}
		})
	}
}

func TestServerFailureReReplicates(t *testing.T) {
	rep, err := Run(small("server-failure"))
	if err != nil {
		t.Fatal(err)
	}
	// 400 ranges x 3 replicas over 20 servers: 60 replicas to re-create.
	if got := rep.OpsByRule["re-replicate"]; got != 60 {
		t.Fatalf("re-replicated %d replicas, want 60\n%s", got, rep.Summary())
	}
}

func TestServerAddedGetsReplicas(t *testing.T) {
	rep, err := Run(small("server-added"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.OpsByRule["balance-replica-count"] == 0 {
		t.Fatalf("no replica moved to the new server\n%s", rep.Summary())
	}
}

// TestFullScaleTarget checks the simulator's target: 1,000 servers and
// 100,000 ranges for one simulated hour in under 60 s, and a 10x hot spot
// on 1% of the ranges spread to within 1.25x of the mean in 2 simulated
// minutes. It takes a minute of CPU, so it runs only from `make sim`
// (TABLESTORE_SIM_TARGET=1), which also keeps the reports.
func TestFullScaleTarget(t *testing.T) {
	if os.Getenv("TABLESTORE_SIM_TARGET") == "" {
		t.Skip("set TABLESTORE_SIM_TARGET=1 (make sim)")
	}
	rep, err := Run(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep.Summary())
	for name, write := range map[string]func(io.Writer) error{"sim-report.html": rep.WriteHTML, "sim-report.json": rep.WriteJSON} {
		if dir := os.Getenv("TABLESTORE_SIM_REPORT_DIR"); dir != "" {
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := write(f); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	if rep.ElapsedSec >= 60 {
		t.Errorf("took %.0f s, want under 60", rep.ElapsedSec)
	}
	if rep.AbsorbSec < 0 || rep.AbsorbSec > 120 {
		t.Errorf("hot spot absorbed after %.0f s, want within 120", rep.AbsorbSec)
	}
}

// TestCapacityTargetModel is the master's part of the dev capacity target
// (issue 12: dev --servers 3 --server-capacity 1500, a uniform load over
// many PartitionKeys, served >= 2.5 x one server's capacity within 30 s)
// without the host: one range on three servers of 1,500 entities/s each,
// a demand of 4,500, load reports carrying what was served. Split-load
// alone stalls at 3,715/s (six ranges, 2/2/1/1 load units: the busiest
// server's ranges each serve under split-load and none can move whole);
// split-balance takes it past 3,750.
func TestCapacityTargetModel(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Servers, cfg.Ranges, cfg.RangeLoad, cfg.Capacity, cfg.ReportServed = 3, 1, 4500, 1500, true
	cfg.Workload, cfg.Duration, cfg.EventAt = "uniform", time.Minute, 0
	cfg.Step, cfg.ScheduleEvery = 250*time.Millisecond, 250*time.Millisecond // the master's policy interval
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Points {
		if p.T >= 30 && p.Served < 2.5*cfg.Capacity {
			t.Fatalf("served %.0f entities/s at %.0f s, want >= %.0f from 30 s on\n%s", p.Served, p.T, 2.5*cfg.Capacity, rep.Summary())
		}
	}
	if rep.OpsByRule["merge-cold"] > 0 {
		t.Fatalf("merged under load (thrash)\n%s", rep.Summary())
	}
}

// TestSharedHostGroups: with --shared-host the scheduler's splits stay in
// their range's Raft group, and the simulator keeps the groups: the hot
// spot still spreads (leaderships of whole groups, spans moved out of their
// groups), over fewer Raft groups than ranges.
func TestSharedHostGroups(t *testing.T) {
	cfg := small("hot-partition")
	cfg.Scheduler.SharedHost = true
	cfg.Scheduler.SplitLoad = 300 // the hot ranges' 500 entities/s split
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep.Summary())
	if rep.RangesAtEnd <= cfg.Ranges {
		t.Fatalf("no split: %d ranges at the end, the test proves nothing", rep.RangesAtEnd)
	}
	if rep.GroupsAtEnd >= rep.RangesAtEnd || rep.GroupsAtEnd < cfg.Ranges/2 {
		t.Fatalf("%d Raft groups for %d ranges at the end: in-group splits not kept", rep.GroupsAtEnd, rep.RangesAtEnd)
	}
	if rep.PeakSpread <= rep.Target || rep.AbsorbSec < 0 {
		t.Fatalf("peak spread %.2f, absorbed after %.0f s: want the hot spot absorbed", rep.PeakSpread, rep.AbsorbSec)
	}
	groupMoves := 0
	for _, o := range rep.ops {
		if o.op.Kind == scheduler.TransferLeader && o.op.Figures["group_ranges"] > 1 {
			groupMoves++
		}
	}
	if groupMoves == 0 {
		t.Fatalf("no leadership of a group of several ranges moved: %v", rep.OpsByRule)
	}
	t.Logf("%d transfers of a group's leadership", groupMoves)
}

// TestSummaryEventAfterTheEnd: a run shorter than --event-at has no event,
// and its summary says so rather than "spread not back under" the target,
// which reads as the scheduler failing.
func TestSummaryEventAfterTheEnd(t *testing.T) {
	cfg := small("hot-partition")
	cfg.Duration, cfg.EventAt = time.Minute, 10*time.Minute
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Summary()
	if !strings.Contains(s, "no event: --event-at 600 s is not before the end of the run (--duration 60 s)") || strings.Contains(s, "not back under") {
		t.Errorf("summary:\n%s", s)
	}
}
