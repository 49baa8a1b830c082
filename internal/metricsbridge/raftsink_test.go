package metricsbridge

import (
	"regexp"
	"sort"
	"strings"
	"testing"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// emit plays what hashicorp/raft reports for two groups with different
// peers, including the legacy copies with the peer id in the key.
func emit(s *raftSink, peers ...string) {
	for _, p := range peers {
		l := []gometrics.Label{{Name: "peer_id", Value: p}}
		s.IncrCounterWithLabels([]string{"raft", "replication", "appendEntries", "logs"}, 3, l)
		s.IncrCounter([]string{"raft", "replication", "appendEntries", "logs", p}, 3)
		s.AddSampleWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, 2.5, l)
		s.AddSample([]string{"raft", "replication", "appendEntries", "rpc", p}, 2.5)
	}
	s.AddSample([]string{"raft", "commitTime"}, 4) // 4 ms
	s.IncrCounter([]string{"raft", "apply"}, 1)
	s.IncrCounter([]string{"raft", "state", "leader"}, 1)
	s.IncrCounter([]string{"raft", "state", "follower"}, 1)
	s.SetGauge([]string{"raft", "peers"}, 3)
	s.AddSample([]string{"raft", "thread", "fsm", "saturation"}, 0.25)
	s.AddSample([]string{"raft", "unknownNewMetric"}, 1)
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func TestRaftFamiliesFollowConventions(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := newRaftSink(reg)
	if err != nil {
		t.Fatal(err)
	}
	emit(s, "ps1", "ps2")
	snake := regexp.MustCompile(`^tablestore_raft_[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for name, mf := range gather(t, reg) {
		if !snake.MatchString(name) {
			t.Errorf("%s: not tablestore_raft_ snake_case", name)
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			if !strings.HasSuffix(name, "_total") {
				t.Errorf("counter %s lacks _total", name)
			}
		case dto.MetricType_HISTOGRAM:
			if !regexp.MustCompile(`_(seconds|entries|ratio)$`).MatchString(name) {
				t.Errorf("histogram %s lacks a unit suffix", name)
			}
		default:
			t.Errorf("%s: unexpected type %v", name, mf.GetType())
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
	}
}

func TestRaftFamiliesFixedWhateverThePeers(t *testing.T) {
	names := func(peers ...string) []string {
		reg := prometheus.NewRegistry()
		s, err := newRaftSink(reg)
		if err != nil {
			t.Fatal(err)
		}
		emit(s, peers...)
		var out []string
		for n := range gather(t, reg) {
			out = append(out, n)
		}
		sort.Strings(out)
		return out
	}
	few, many := names("ps1"), names("ps1", "ps2", "ps3", "ps4", "ps5")
	if strings.Join(few, ",") != strings.Join(many, ",") {
		t.Fatalf("families depend on the peers:\n1 peer:  %v\n5 peers: %v", few, many)
	}
}

func TestRaftSinkValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := newRaftSink(reg)
	if err != nil {
		t.Fatal(err)
	}
	emit(s, "ps1", "ps2")
	mfs := gather(t, reg)
	commit := mfs["tablestore_raft_commit_seconds"].GetMetric()[0].GetHistogram()
	if commit.GetSampleCount() != 1 || commit.GetSampleSum() != 0.004 {
		t.Errorf("commit_seconds: count %d sum %v, want 1 and 0.004 (4 ms in seconds)", commit.GetSampleCount(), commit.GetSampleSum())
	}
	logs := mfs["tablestore_raft_replication_append_entries_logs_total"].GetMetric()
	if len(logs) != 2 {
		t.Fatalf("append_entries_logs_total: %d series, want one per peer", len(logs))
	}
	for _, m := range logs {
		if lp := m.GetLabel(); len(lp) != 1 || lp[0].GetName() != "peer" || m.GetCounter().GetValue() != 3 {
			t.Errorf("append_entries_logs_total series %v = %v, want peer label and 3 (legacy copies dropped)", lp, m.GetCounter().GetValue())
		}
	}
	states := map[string]float64{}
	for _, m := range mfs["tablestore_raft_state_changes_total"].GetMetric() {
		states[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if states["leader"] != 1 || states["follower"] != 1 {
		t.Errorf("state_changes_total = %v", states)
	}
}

// Raft reports a few keys per read and per write (verify_leader, apply,
// commitTime): the ones the key alone places must not allocate.
func TestRaftSinkFixedKeysDoNotAllocate(t *testing.T) {
	s, err := newRaftSink(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range [][]string{{"raft", "verify_leader"}, {"raft", "apply"}, {"raft", "commitTime"}, {"raft", "state", "leader"}, {"raft", "net", "unknown"}} {
		if n := testing.AllocsPerRun(100, func() { s.IncrCounter(key, 1); s.AddSample(key, 1) }); n != 0 {
			t.Errorf("%v: %.0f allocations per report, want 0", key, n)
		}
	}
}
