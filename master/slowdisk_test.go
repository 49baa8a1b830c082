package master

import (
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	pb "tablestore/proto/tablestorepb"
)

// disk is a heartbeat's disk report: n state commits with median state,
// m log syncs with median log.
func disk(n uint32, state time.Duration, m uint32, log time.Duration) *pb.DiskLatency {
	return &pb.DiskLatency{WindowSeconds: 10, StateCommits: n, StateCommitMedianSeconds: state.Seconds(),
		LogSyncs: m, LogSyncMedianSeconds: log.Seconds()}
}

func TestNextSlow(t *testing.T) {
	ms := time.Millisecond
	const threshold = 100 * time.Millisecond
	tests := []struct {
		name      string
		slow      bool
		d         *pb.DiskLatency
		threshold time.Duration
		want      bool
	}{
		{"healthy", false, disk(80, 3*ms, 900, 2*ms), threshold, false},
		{"state commits slow", false, disk(40, 152*ms, 900, 2*ms), threshold, true},
		{"log syncs slow", false, disk(80, 3*ms, 30, 120*ms), threshold, true},
		{"at the threshold", false, disk(40, 100*ms, 0, 0), threshold, true},
		{"just under it", false, disk(40, 99*ms, 0, 0), threshold, false},
		// A loaded machine's tens of ms, even at their worst, are not
		// slow.
		{"loaded machine", false, disk(60, 45*ms, 400, 30*ms), threshold, false},
		// Too few commits: no evidence, the state stands either way.
		{"slow but few commits", false, disk(slowDiskMinCommits-1, 900*ms, 3, 800*ms), threshold, false},
		{"slow, few healthy commits", true, disk(slowDiskMinCommits-1, 1*ms, 0, 0), threshold, true},
		{"slow, no report (older server)", true, nil, threshold, true},
		{"slow commits, too few of them, beside healthy syncs", false, disk(5, 300*ms, 500, 2*ms), threshold, false},
		// Hysteresis: slow until below half the threshold.
		{"slow, still above half", true, disk(40, 60*ms, 500, 2*ms), threshold, true},
		{"slow, at half", true, disk(40, 50*ms, 500, 2*ms), threshold, true},
		{"slow, below half", true, disk(40, 49*ms, 500, 2*ms), threshold, false},
		{"slow, log still slow", true, disk(40, 2*ms, 500, 70*ms), threshold, true},
		{"rule off", true, disk(40, 900*ms, 0, 0), 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := diskMedian(tc.d)
			if got := nextSlow(tc.slow, m, ok, 0, tc.threshold); got != tc.want {
				t.Fatalf("nextSlow(%v, %v, %v) = %v, want %v", tc.slow, tc.d, tc.threshold, got, tc.want)
			}
		})
	}
}

// TestNextSlowRelative: slow is relative to the median of the other
// servers' figures (peer): a disk slow like all the others is not slow.
func TestNextSlowRelative(t *testing.T) {
	ms := time.Millisecond
	const threshold = 100 * time.Millisecond
	tests := []struct {
		name    string
		slow    bool
		m, peer time.Duration
		want    bool
	}{
		{"all slow alike", false, 150 * ms, 150 * ms, false},
		{"one slow, the others healthy", false, 150 * ms, 3 * ms, true},
		{"over the threshold, under 3x the others", false, 150 * ms, 60 * ms, false},
		{"3x the others, under the threshold", false, 90 * ms, 3 * ms, false},
		{"no peer with evidence: the threshold alone", false, 150 * ms, 0, true},
		// Hysteresis on both: slow until under half the threshold or
		// under 1.5x the others.
		{"slow, the others caught up", true, 150 * ms, 120 * ms, false},
		{"slow, still 1.5x the others", true, 150 * ms, 100 * ms, true},
		{"slow, 2x the others", true, 120 * ms, 60 * ms, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextSlow(tc.slow, tc.m, true, tc.peer, threshold); got != tc.want {
				t.Fatalf("nextSlow(%v, %v, peer %v) = %v, want %v", tc.slow, tc.m, tc.peer, got, tc.want)
			}
		})
	}
}

// TestSlowRelativeCluster: through the heartbeats, every server at 150 ms
// makes none slow once each has reported; one at 150 ms among servers at
// 3 ms is slow, and so are two of three; one at 150 ms among servers at
// 60 ms is not (under 3x).
func TestSlowRelativeCluster(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		medians map[string]time.Duration
		want    []string
	}{
		{"all at 150 ms", map[string]time.Duration{"a": 150 * ms, "b": 150 * ms, "c": 150 * ms, "d": 150 * ms}, nil},
		{"others at 3 ms", map[string]time.Duration{"a": 150 * ms, "b": 3 * ms, "c": 3 * ms, "d": 3 * ms}, []string{"a"}},
		{"two of three", map[string]time.Duration{"a": 150 * ms, "b": 150 * ms, "c": 3 * ms}, []string{"a", "b"}},
		{"others at 60 ms", map[string]time.Duration{"a": 150 * ms, "b": 60 * ms, "c": 60 * ms}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReports()
			now := time.Now()
			// a, the server under test, reports last: the first report
			// to a master, with no peer evidence, is judged on the
			// threshold alone (reliability.md, left and doubtful).
			ids := slices.Sorted(maps.Keys(tc.medians))
			slices.Reverse(ids)
			for round := range 3 {
				at := now.Add(time.Duration(round) * time.Second)
				for _, id := range ids {
					r.observeDisk(id, disk(40, tc.medians[id], 0, 0), 100*ms, at)
				}
			}
			got := slices.Sorted(maps.Keys(r.slowServers(now.Add(2 * time.Second))))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("slow %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSlowExpires: a slow state that no report with evidence confirms
// expires slowDiskExpiry after the last evidence, cleared then.
func TestSlowExpires(t *testing.T) {
	ms := time.Millisecond
	r := newReports()
	now := time.Now()
	r.observeDisk("a", disk(40, 150*ms, 0, 0), 100*ms, now)
	for _, d := range []time.Duration{10 * time.Second, slowDiskExpiry - time.Second} {
		r.observeDisk("a", disk(2, 1*ms, 0, 0), 100*ms, now.Add(d)) // no evidence
		if !r.slowServers(now.Add(d))["a"] {
			t.Fatalf("not slow %v after the evidence", d)
		}
	}
	if r.slowServers(now.Add(slowDiskExpiry))["a"] {
		t.Fatalf("still slow %v after the last evidence", slowDiskExpiry)
	}
	st := r.disk["a"].at(now.Add(2 * slowDiskExpiry))
	if st.slow || !st.cleared.Equal(now.Add(slowDiskExpiry)) {
		t.Fatalf("expired state %+v, want cleared at %v", st, now.Add(slowDiskExpiry))
	}
	if st, changed := r.observeDisk("a", nil, 100*ms, now.Add(slowDiskExpiry+time.Second)); st.slow || !changed {
		t.Fatalf("report after expiry: slow=%v changed=%v, want cleared and changed", st.slow, changed)
	}
}

// TestSnapshotSlow: the snapshot's Slow follows the heartbeats' disk
// reports through the rule: set on a slow median with its figure, kept
// while the median stays above half the threshold or the reports carry
// no evidence, cleared below half (SlowCleared set), kept by a master
// that regains the lead (greet) until slowDiskExpiry.
func TestSnapshotSlow(t *testing.T) {
	ms := time.Millisecond
	cfg := DefaultConfig()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	for _, id := range []string{"a", "b"} {
		s.fsm.st.servers[id] = &pb.ServerInfo{ServerId: id}
	}
	now := time.Now()
	type want struct {
		slow    bool
		median  time.Duration
		cleared bool
	}
	steps := []struct {
		name string
		a    *pb.DiskLatency
		want want
	}{
		{"healthy", disk(80, 3*ms, 900, 2*ms), want{median: 3 * ms}},
		{"a loaded moment", disk(80, 40*ms, 900, 20*ms), want{median: 40 * ms}},
		{"slow", disk(40, 152*ms, 900, 2*ms), want{slow: true, median: 152 * ms}},
		{"just restarted: no evidence", disk(2, 1*ms, 3, 1*ms), want{slow: true, median: 152 * ms}},
		{"older server: no report", nil, want{slow: true, median: 152 * ms}},
		// The snapshot (an event's reason) quotes the median that made
		// the server slow, not a lower one hysteresis keeps slow.
		{"better, not enough", disk(40, 70*ms, 900, 2*ms), want{slow: true, median: 152 * ms}},
		{"healthy again", disk(40, 4*ms, 900, 2*ms), want{median: 4 * ms, cleared: true}},
	}
	for i, st := range steps {
		at := now.Add(time.Duration(i) * 500 * time.Millisecond)
		s.noteDisk("a", &pb.HeartbeatRequest{DiskLatency: st.a}, at)
		s.noteDisk("b", &pb.HeartbeatRequest{DiskLatency: disk(80, 2*ms, 900, 1*ms)}, at)
		foldReport(s.reports, cfg.Policy.Config, "a", nil, at)
		foldReport(s.reports, cfg.Policy.Config, "b", nil, at)
		snap := s.snapshot(at)
		a, b := snap.Servers[0], snap.Servers[1]
		if a.ID != "a" || b.Slow {
			t.Fatalf("%s: servers %+v", st.name, snap.Servers)
		}
		got := want{slow: a.Slow, median: a.SlowMedian, cleared: !a.SlowCleared.IsZero()}
		if got != st.want {
			t.Fatalf("%s: a slow=%v median=%v cleared=%v, want %+v", st.name, a.Slow, a.SlowMedian, a.SlowCleared, st.want)
		}
		if st.want.cleared && !a.SlowCleared.Equal(at) {
			t.Fatalf("%s: cleared at %v, want %v", st.name, a.SlowCleared, at)
		}
	}
	s.noteDisk("a", &pb.HeartbeatRequest{DiskLatency: disk(40, 152*ms, 0, 0)}, now)
	if !s.snapshot(now).Servers[0].Slow {
		t.Fatal("slow again: not slow")
	}
	s.reports.greet([]string{"a", "b"}, now)
	if !s.snapshot(now).Servers[0].Slow {
		t.Fatal("a master that regained the lead (greet) dropped the slow state")
	}
	if s.snapshot(now.Add(slowDiskExpiry)).Servers[0].Slow {
		t.Fatalf("slow %v after the last evidence", slowDiskExpiry)
	}
}

// TestPlacementCampaignerNotSlow: a new range's first replica, which
// campaigns for its leadership, is not on a slow server when another
// server was chosen; the slow one still holds a replica (replicas are
// placed by count alone).
func TestPlacementCampaignerNotSlow(t *testing.T) {
	cfg := DefaultConfig()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	now := time.Now()
	for i, id := range []string{"a", "b", "c", "d"} {
		s.fsm.st.servers[id] = &pb.ServerInfo{ServerId: id}
		s.fsm.st.replicaCount[id] = i // a holds the fewest, d the most
	}
	s.reports.greet([]string{"a", "b", "c", "d"}, now)
	first := func() []string {
		reps, _, err := s.placement()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range reps {
			ids = append(ids, r.GetServerId())
		}
		return ids
	}
	if got := first(); got[0] != "a" || len(got) != 3 {
		t.Fatalf("placement %v, want a (fewest replicas) first of 3", got)
	}
	s.noteDisk("a", &pb.HeartbeatRequest{DiskLatency: disk(40, 152*time.Millisecond, 0, 0)}, now)
	if got := first(); got[0] != "b" || got[2] != "a" {
		t.Fatalf("placement %v with a slow, want b first and a last", got)
	}
}

// TestServerSlowGauge: tablestore_master_server_slow is 1 for a slow
// server, 0 for the others heard from.
func TestServerSlowGauge(t *testing.T) {
	now := time.Now()
	publishSlow(map[string]time.Time{"gauge-a": now, "gauge-b": now}, map[string]bool{"gauge-a": true})
	for id, want := range map[string]float64{"gauge-a": 1, "gauge-b": 0} {
		var m dto.Metric
		if err := serverSlowGauge.WithLabelValues(id).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetGauge().GetValue(); got != want {
			t.Fatalf("server_slow{server=%q} = %v, want %v", id, got, want)
		}
	}
}

// TestSlowDiskCommitValidate: --slow-disk-commit is 0 (off) or at least
// 1 ms (a figure without its unit is nanoseconds).
func TestSlowDiskCommitValidate(t *testing.T) {
	for _, tc := range []struct {
		d  time.Duration
		ok bool
	}{{0, true}, {time.Millisecond, true}, {100 * time.Millisecond, true}, {100, false}, {-time.Millisecond, false}} {
		c := DefaultPolicyConfig()
		c.SlowDiskCommit = tc.d
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Fatalf("Validate with slow-disk-commit %v: %v, want ok=%v", tc.d, err, tc.ok)
		}
	}
}
