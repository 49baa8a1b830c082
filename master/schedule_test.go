package master

import (
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// TestSnapshotFromHeartbeats: the scheduler's input is built from the
// catalog and the heartbeats without a network: liveness, leaders, load
// trends, and each replica's applied index (a replica its live server does
// not report is missing), so leadership goes only to caught-up followers.
func TestSnapshotFromHeartbeats(t *testing.T) {
	cfg := DefaultConfig()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	st := s.fsm.st
	for _, id := range []string{"a", "b", "c", "d"} {
		st.servers[id] = &pb.ServerInfo{ServerId: id}
	}
	reps := func(ids ...string) []*pb.Replica {
		var out []*pb.Replica
		for _, id := range ids {
			out = append(out, &pb.Replica{ServerId: id})
		}
		return out
	}
	st.ranges[1] = &pb.RangeDescriptor{RangeId: 1, TableId: 1, Table: "t", End: "m", Replicas: reps("a", "b", "c")}
	st.ranges[2] = &pb.RangeDescriptor{RangeId: 2, TableId: 1, Table: "t", Start: "m", Replicas: reps("a", "b", "d")}
	now := time.Now()
	hb := func(server string, at time.Time, rs ...*pb.RangeStatus) {
		foldReport(s.reports, cfg.Policy.Config, server, rs, at)
	}
	led := func(id uint64, applied uint64, eps float64) *pb.RangeStatus {
		return &pb.RangeStatus{RangeId: id, Leader: true, AppliedIndex: applied, Load: &pb.RangeLoad{EntitiesPerSec: eps}}
	}
	hb("a", now.Add(-3*time.Second), led(1, 100000, 2000), led(2, 5000, 1500))
	hb("a", now, led(1, 100000, 2000), led(2, 5000, 1500))
	hb("b", now, &pb.RangeStatus{RangeId: 1, AppliedIndex: 99990})
	hb("c", now, &pb.RangeStatus{RangeId: 1, AppliedIndex: 40000})
	hb("d", now.Add(-time.Minute), &pb.RangeStatus{RangeId: 2, AppliedIndex: 5000})

	st.servers["e"] = &pb.ServerInfo{ServerId: "e"}
	hb("e", now.Add(-awayAfter-500*time.Millisecond)) // live, but silent

	snap := s.snapshot(now)
	live, silent := map[string]bool{}, map[string]bool{}
	for _, sv := range snap.Servers {
		live[sv.ID], silent[sv.ID] = sv.Live, sv.Silent
	}
	if !live["a"] || !live["b"] || !live["c"] || live["d"] || !live["e"] {
		t.Fatalf("liveness %v, want a b c e live and d down", live)
	}
	// Silent: live, not heard from for awayAfter (no leadership to it).
	if silent["a"] || silent["b"] || silent["c"] || silent["d"] || !silent["e"] {
		t.Fatalf("silent %v, want only e (live, last heard %v ago)", silent, awayAfter+500*time.Millisecond)
	}
	if len(snap.Ranges) != 2 || snap.Ranges[0].ID != 1 || snap.Ranges[0].Leader != "a" || snap.Ranges[0].Load.EntitiesPerSec != 2000 {
		t.Fatalf("ranges %+v", snap.Ranges)
	}
	if got := snap.Ranges[0].HotSince; !got.Equal(now.Add(-3 * time.Second)) {
		t.Fatalf("range 1 hot since %v, want since the first report", got)
	}
	r2 := snap.Ranges[1]
	if r2.Replicas[1].Server != "b" || !r2.Replicas[1].Missing || r2.Replicas[2].Missing {
		t.Fatalf("range 2 replicas %+v: b is live and does not report it (missing); d is down (not known missing)", r2.Replicas)
	}
	// a leads everything: the only caught-up, live follower holding a
	// reported replica is b on range 1.
	snap.Slots = 4
	moved := false
	for _, o := range scheduler.Schedule(cfg.Policy.Config, snap) {
		if o.Kind == scheduler.TransferLeader && (o.Range != 1 || o.To != "b") {
			t.Fatalf("transfer %s: only range 1 to b is allowed", o)
		}
		moved = moved || o.Kind == scheduler.TransferLeader
	}
	if !moved {
		t.Fatal("a leads all the load: range 1's leadership should move to b")
	}
}

// TestSnapshotCarriesGroup: each range of the scheduler's input names the
// Raft group serving it: its own id when its descriptor names none, else
// the group its descriptor names (docs/range-groups.md, stage 1).
func TestSnapshotCarriesGroup(t *testing.T) {
	s, err := New(DefaultConfig(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	st := s.fsm.st
	st.servers["a"] = &pb.ServerInfo{ServerId: "a"}
	reps := []*pb.Replica{{ServerId: "a"}}
	st.putRange(&pb.RangeDescriptor{RangeId: 1, TableId: 1, Table: "t", End: "f", Replicas: reps})
	st.putRange(&pb.RangeDescriptor{RangeId: 4, TableId: 1, Table: "t", Start: "f", End: "m", GroupId: 1, Replicas: reps})
	st.putRange(&pb.RangeDescriptor{RangeId: 7, TableId: 1, Table: "t", Start: "m", End: "t", GroupId: 7, Replicas: reps})
	st.putRange(&pb.RangeDescriptor{RangeId: 9, TableId: 1, Table: "t", Start: "t", GroupId: 3, Replicas: reps})
	want := map[uint64]uint64{1: 1, 4: 1, 7: 7, 9: 3}
	snap := s.snapshot(time.Now())
	if len(snap.Ranges) != len(want) {
		t.Fatalf("%d ranges, want %d", len(snap.Ranges), len(want))
	}
	for _, r := range snap.Ranges {
		if r.Group != want[r.ID] {
			t.Errorf("range %d: group %d, want %d", r.ID, r.Group, want[r.ID])
		}
	}
}

// TestSnapshotSmoothsLoad: one half-second report in which a leader served
// nothing (a busy host, a transfer) must not make its range look idle to the
// balancing policies, while the split window still follows the raw reports.
func TestSnapshotSmoothsLoad(t *testing.T) {
	cfg := DefaultConfig()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	s.fsm.st.servers["a"] = &pb.ServerInfo{ServerId: "a"}
	s.fsm.st.ranges[1] = &pb.RangeDescriptor{RangeId: 1, TableId: 1, Table: "t", Replicas: []*pb.Replica{{ServerId: "a"}}}
	now := time.Now()
	for i, eps := range []float64{1200, 1200, 1200, 1200, 0} {
		st := &pb.RangeStatus{RangeId: 1, Leader: true, Load: &pb.RangeLoad{EntitiesPerSec: eps}}
		foldReport(s.reports, cfg.Policy.Config, "a", []*pb.RangeStatus{st}, now.Add(time.Duration(i)*500*time.Millisecond))
	}
	r := s.snapshot(now.Add(2 * time.Second)).Ranges[0]
	// One 0 after 1,200s: 1200 * exp(-0.5 s / 2 s) = 935.
	if got := r.Load.EntitiesPerSec; got < 900 || got > 970 {
		t.Fatalf("smoothed load %.0f, want about 935", got)
	}
	if !r.HotSince.IsZero() {
		t.Fatalf("hot since %v: the raw report fell below split-load, the window must restart", r.HotSince)
	}
}

// TestSnapshotLoadAfterSplit: after a split, the left half's load is its
// own reports', not the old range's average decaying towards it.
func TestSnapshotLoadAfterSplit(t *testing.T) {
	cfg := DefaultConfig()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	s.fsm.st.servers["a"] = &pb.ServerInfo{ServerId: "a"}
	s.fsm.st.ranges[1] = &pb.RangeDescriptor{RangeId: 1, TableId: 1, Table: "t", End: "m", Replicas: []*pb.Replica{{ServerId: "a"}}}
	now := time.Now()
	report := func(i int, eps float64) {
		st := &pb.RangeStatus{RangeId: 1, Leader: true, Load: &pb.RangeLoad{EntitiesPerSec: eps}}
		s.reports.heartbeat(cfg.Policy.Config, "a", []*pb.RangeStatus{st}, nil, true, 500*time.Millisecond, now.Add(time.Duration(i)*500*time.Millisecond))
	}
	for i := range 4 {
		report(i, 1200)
	}
	for _, c := range []struct {
		split bool
		want  float64
	}{
		{false, 1200 - 600*(1-math.Exp(-0.25))}, // no split: smoothed, 1,067
		{true, 600},                             // the same report after a split: as it is
	} {
		if c.split {
			s.reports.splitOff(1)
		}
		report(4, 600)
		got := s.snapshot(now.Add(2 * time.Second)).Ranges[0].Load.EntitiesPerSec
		if math.Abs(got-c.want) > 1 {
			t.Errorf("split=%v: load %.0f after 1,200s then 600, want %.0f", c.split, got, c.want)
		}
	}
}
