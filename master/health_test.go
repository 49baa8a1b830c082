package master

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	pb "tablestore/proto/tablestorepb"
)

func TestReadiness(t *testing.T) {
	for _, tc := range []struct {
		name  string
		facts healthFacts
		want  string // reasons joined by ";", "" = ready
	}{
		{"not started", healthFacts{}, "not started"},
		{"ready follower", healthFacts{Started: true, Leader: "10.0.0.1:7100", InConfig: true}, ""},
		{"no leader", healthFacts{Started: true, InConfig: true}, "master group has no known leader"},
		{"removed member", healthFacts{Started: true, Leader: "10.0.0.1:7100"}, "not a voter in the master group's configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(readiness(tc.facts).Reasons, ";"); got != tc.want {
				t.Fatalf("readiness(%+v) = %q, want %q", tc.facts, got, tc.want)
			}
		})
	}
}

func TestAssessCluster(t *testing.T) {
	rng := func(servers ...string) *pb.RangeDescriptor {
		d := &pb.RangeDescriptor{}
		for _, s := range servers {
			d.Replicas = append(d.Replicas, &pb.Replica{ServerId: s})
		}
		return d
	}
	ranges := map[uint64]*pb.RangeDescriptor{
		1: rng("a", "b", "c"), // healthy
		2: rng("a", "b", "d"), // d is down: under-replicated
		3: rng("a", "b", "c"), // no leader reported
		4: rng("b", "c", "d"), // leader on the down server
	}
	alive := map[string]bool{"a": true, "b": true, "c": true}
	leaders := map[uint64]string{1: "a", 2: "b", 4: "d"}
	got := assessCluster(ranges, []string{"a", "b", "c", "d"}, alive, leaders, 3)
	want := clusterHealth{up: 3, down: 1, underReplicated: 2, leaderless: 2}
	if got != want {
		t.Fatalf("assessCluster = %+v, want %+v", got, want)
	}
}

// TestHealthGauges: the leading master publishes the cluster-health
// gauges (is_leader, servers up and down by serverUp, under-replicated
// and leaderless ranges) from its liveness loop. From a merge of
// 2026-11-23 until session 19 nothing set them: is_leader stayed 0 on
// every master and the servers' down count stayed 0 with servers down.
func TestHealthGauges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	s := leadingMaster(t, nil)
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id}}); err != nil {
			t.Fatal(err)
		}
	}
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "d"}}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: reps}); err != nil {
		t.Fatal(err)
	}
	// The term's greet gives every server a full timeout once per term;
	// greeted here, the liveness loop's first tick of the term (which
	// may come before or after the registrations: waiting for it to have
	// greeted all four timed out when it came first, on a loaded
	// machine) greets none of them again. Then a, b, c heard now; d
	// silent for longer than the timeout. The table's range has a
	// replica on d and no leader reported.
	s.reports.greetTerm(s.raft.CurrentTerm(), []string{"a", "b", "c", "d"}, time.Now())
	s.reports.mu.Lock()
	now := time.Now()
	for _, id := range []string{"a", "b", "c"} {
		s.reports.lastSeen[id] = now.Add(time.Minute) // up for the whole test
	}
	s.reports.lastSeen["d"] = now.Add(-time.Hour)
	s.reports.mu.Unlock()
	gauge := func(g prometheus.Gauge) float64 {
		var m dto.Metric
		if err := g.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}
	waitUntil(t, 5*time.Second, "the health gauges", func() bool {
		return gauge(isLeaderGauge) == 1 && gauge(serversGauge.WithLabelValues("up")) == 3 &&
			gauge(serversGauge.WithLabelValues("down")) == 1 && gauge(underReplicatedGauge) == 1 && gauge(leaderlessGauge) == 1
	})
}

// TestDiskGauges: every master exports its data directory's free and total
// space (the TablestoreMasterDiskFull alert reads them), and drops them
// when it stops.
func TestDiskGauges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	cfg := DefaultConfig()
	cfg.ID = "m-disk"
	cfg.DataDir = t.TempDir()
	cfg.GRPCAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
	cfg.Policy.Enabled = false
	s := startMaster(t, cfg)
	gauge := func(g prometheus.Gauge) float64 {
		var m dto.Metric
		if err := g.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}
	waitUntil(t, 5*time.Second, "the disk gauges", func() bool {
		return gauge(diskAvailableGauge.WithLabelValues(cfg.ID)) > 0 && gauge(diskCapacityGauge.WithLabelValues(cfg.ID)) >= gauge(diskAvailableGauge.WithLabelValues(cfg.ID))
	})
	s.Close()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "tablestore_master_data_dir_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == cfg.ID {
					t.Errorf("%s still exported for %s after it stopped", mf.GetName(), cfg.ID)
				}
			}
		}
	}
}
