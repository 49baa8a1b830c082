package master

import (
	"bytes"
	"io"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// foldReport takes one full report from a server that reports every
// replica every time (no incarnation), as the master's handler does.
func foldReport(r *reports, cfg scheduler.Config, server string, ranges []*pb.RangeStatus, now time.Time) {
	req := &pb.HeartbeatRequest{Server: &pb.ServerInfo{ServerId: server}, Ranges: ranges}
	if take, _, span := r.accept(server, req, now); take {
		r.heartbeat(cfg, server, ranges, nil, true, span, now)
	}
}

// TestReportSessions: which reports the master takes, and when it asks
// for a full one, over scripted sequences of one server's heartbeats.
func TestReportSessions(t *testing.T) {
	type hb struct {
		inc, seq       uint64
		full           bool
		greet          bool // the master takes the lead before this heartbeat
		take, wantFull bool
	}
	cases := []struct {
		name string
		hbs  []hb
	}{
		{"legacy reports are full", []hb{{take: true}, {take: true}}},
		{"a delta first is refused", []hb{{inc: 7, seq: 1, wantFull: true}, {inc: 7, seq: 2, full: true, take: true}, {inc: 7, seq: 3, take: true}}},
		{"full then deltas", []hb{{inc: 7, seq: 1, full: true, take: true}, {inc: 7, seq: 2, take: true}, {inc: 7, seq: 3, take: true}}},
		{"a late report is dropped", []hb{{inc: 7, seq: 5, full: true, take: true}, {inc: 7, seq: 4}, {inc: 7, seq: 6, take: true}}},
		{"a restarted server starts anew", []hb{{inc: 7, seq: 5, full: true, take: true}, {inc: 8, seq: 1, wantFull: true}, {inc: 8, seq: 2, full: true, take: true}}},
		{"a new lead asks again", []hb{{inc: 7, seq: 1, full: true, take: true}, {inc: 7, seq: 2, greet: true, wantFull: true}, {inc: 7, seq: 3, full: true, take: true}, {inc: 7, seq: 4, take: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newReports()
			now := time.Unix(1000, 0)
			for i, h := range c.hbs {
				now = now.Add(500 * time.Millisecond)
				if h.greet {
					r.greet([]string{"a"}, now)
				}
				req := &pb.HeartbeatRequest{Server: &pb.ServerInfo{ServerId: "a"}, Incarnation: h.inc, Seq: h.seq, Full: h.full}
				take, wantFull, _ := r.accept("a", req, now)
				if take != h.take || wantFull != h.wantFull {
					t.Fatalf("heartbeat %d: take %v wantFull %v, want %v %v", i, take, wantFull, h.take, h.wantFull)
				}
			}
		})
	}
}

// TestDeltaView: the view built from a full report and deltas is the one
// full reports would have built.
func TestDeltaView(t *testing.T) {
	cfg := scheduler.DefaultConfig()
	r := newReports()
	t0 := time.Unix(1000, 0)
	st := func(id, applied uint64, leader bool) *pb.RangeStatus {
		return &pb.RangeStatus{RangeId: id, AppliedIndex: applied, Leader: leader, Voters: []string{"a", "b", "c"}}
	}
	send := func(at time.Time, seq uint64, full bool, removed []uint64, ranges ...*pb.RangeStatus) {
		req := &pb.HeartbeatRequest{Server: &pb.ServerInfo{ServerId: "a"}, Incarnation: 9, Seq: seq, Full: full, Ranges: ranges, RemovedRangeIds: removed}
		take, _, span := r.accept("a", req, at)
		if !take {
			t.Fatalf("report %d not taken", seq)
		}
		r.heartbeat(cfg, "a", ranges, removed, full, span, at)
	}
	send(t0, 1, true, nil, st(1, 10, true), st(2, 20, false), st(3, 30, true))
	send(t0.Add(time.Second), 2, false, []uint64{3}, st(2, 21, true))
	send(t0.Add(20*time.Second), 3, false, nil)
	want := map[uint64]uint64{1: 10, 2: 21}
	if got := r.hosted["a"]; len(got) != len(want) || got[1] != 10 || got[2] != 21 {
		t.Fatalf("hosted %v, want %v", got, want)
	}
	if r.leaders[1] != "a" || r.leaders[2] != "a" {
		t.Fatalf("leaders %v: ranges 1 and 2 are led by a", r.leaders)
	}
	// Range 1's voters were reported 20 s ago and stand: a reported
	// nothing new of it since.
	r.mu.Lock()
	at := r.reportedAt("a", r.voters[1].at)
	r.mu.Unlock()
	if !at.Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("range 1's voter report holds until %v, want the last heartbeat", at)
	}
	// A new full report without range 1: what was said of it no longer
	// stands beyond the time it was said.
	send(t0.Add(21*time.Second), 4, true, nil, st(2, 21, true))
	r.mu.Lock()
	at = r.reportedAt("a", r.voters[1].at)
	r.mu.Unlock()
	if !at.Equal(t0) {
		t.Fatalf("range 1's voter report holds until %v after a full report without it, want %v", at, t0)
	}
}

// TestSmoothingAcrossLeftOutReports: an idle range's reports are left out
// of deltas; its smoothed load follows as if they had come.
func TestSmoothingAcrossLeftOutReports(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tau := loadSmoothing.Seconds()
	cases := []struct {
		name string
		run  func(tr *rangeTrend) float64
		want float64
	}{
		{"decays after the last idle report", func(tr *rangeTrend) float64 {
			tr.smooth(1000, 0, t0)
			tr.smooth(0, 500*time.Millisecond, t0.Add(500*time.Millisecond))
			return tr.at(t0.Add(4500 * time.Millisecond))
		}, 1000 * math.Exp(-4.5/tau)},
		{"a burst after a long idle covers one report", func(tr *rangeTrend) float64 {
			tr.smooth(0, 0, t0)
			tr.smooth(1000, 500*time.Millisecond, t0.Add(60*time.Second))
			return tr.at(t0.Add(60 * time.Second))
		}, 1000 * (1 - math.Exp(-0.5/tau))},
		{"every report sent", func(tr *rangeTrend) float64 {
			for i := 0; i <= 4; i++ {
				tr.smooth(1000, 500*time.Millisecond, t0.Add(time.Duration(i)*500*time.Millisecond))
			}
			return tr.at(t0.Add(2 * time.Second))
		}, 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.run(&rangeTrend{})
			if math.Abs(got-c.want) > 0.5 {
				t.Fatalf("smoothed %.1f, want %.1f", got, c.want)
			}
		})
	}
}

// TestAssignmentsVersion: a heartbeat answer carries the catalog only when
// it changed since the version the server holds, and whole after a restore.
func TestAssignmentsVersion(t *testing.T) {
	f := &fsm{st: newState()}
	var index uint64
	create := func(name string) {
		t.Helper()
		data, err := encodeCommand(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE,
			&pb.CreateTableCommand{Name: name, Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}})
		if err != nil {
			t.Fatal(err)
		}
		index++
		if res := f.Apply(&raft.Log{Index: index, Data: data}).(*applyResult); res.err != nil {
			t.Fatal(res.err)
		}
	}
	create("t1")
	first := f.assignments("a", 0)
	if first.GetAssignmentsUnchanged() || len(first.GetAssigned()) != 1 || len(first.GetLiveTableIds()) != 1 {
		t.Fatalf("first answer %v: want the whole catalog", first)
	}
	if again := f.assignments("a", first.GetAssignmentsVersion()); !again.GetAssignmentsUnchanged() || len(again.GetAssigned()) != 0 {
		t.Fatalf("answer at the same version %v: want unchanged and empty", again)
	}
	create("t2")
	if next := f.assignments("a", first.GetAssignmentsVersion()); next.GetAssignmentsUnchanged() || len(next.GetAssigned()) != 2 {
		t.Fatalf("answer after a create %v: want both ranges", next)
	}
	held := f.assignments("a", 0).GetAssignmentsVersion()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if after := f.assignments("a", held); after.GetAssignmentsUnchanged() || len(after.GetAssigned()) != 2 {
		t.Fatalf("answer after a restore %v: want the whole catalog", after)
	}
}

// TestLeaderLostAsksForFullReports: when a server reports it no longer
// leads a range the master recorded it as leading, the other servers
// hosting the range are asked for a full report with their next answer
// (their leader's report, unchanged since acknowledged, would not come
// in a delta), and only once.
func TestLeaderLostAsksForFullReports(t *testing.T) {
	cfg := scheduler.DefaultConfig()
	r := newReports()
	now := time.Unix(1000, 0)
	st := func(id uint64, leader bool) *pb.RangeStatus {
		return &pb.RangeStatus{RangeId: id, AppliedIndex: 5, Leader: leader}
	}
	seq := map[string]uint64{}
	send := func(server string, full bool, ranges ...*pb.RangeStatus) (take, wantFull bool) {
		now = now.Add(100 * time.Millisecond)
		seq[server]++
		req := &pb.HeartbeatRequest{Server: &pb.ServerInfo{ServerId: server}, Incarnation: 3, Seq: seq[server], Full: full, Ranges: ranges}
		take, wantFull, span := r.accept(server, req, now)
		if take {
			r.heartbeat(cfg, server, ranges, nil, full, span, now)
		}
		return take, wantFull
	}
	send("x", true, st(1, true), st(2, false))
	send("y", true, st(1, false), st(2, true))
	send("z", true, st(1, false))
	// y's late claim of range 1 (built before a transfer to x) is taken
	// after x's report, then y reports it no longer leads.
	send("y", false, st(1, true))
	if got := r.leaderOf(1); got != "y" {
		t.Fatalf("leader %q, want y", got)
	}
	send("y", false, st(1, false))
	if got := r.leaderOf(1); got != "" {
		t.Fatalf("leader %q after y's denial, want none", got)
	}
	for _, c := range []struct {
		server   string
		wantFull bool
	}{{"x", true}, {"z", true}, {"y", false}} {
		take, wantFull := send(c.server, false)
		if !take || wantFull != c.wantFull {
			t.Fatalf("%s's delta: take %v wantFull %v, want true %v", c.server, take, wantFull, c.wantFull)
		}
	}
	send("x", true, st(1, true), st(2, false))
	if got := r.leaderOf(1); got != "x" {
		t.Fatalf("leader %q after x's full report, want x", got)
	}
	if _, wantFull := send("x", false); wantFull {
		t.Fatal("a full report asked for again")
	}
}

// TestServerBack: a server's return (reports.back) is its first heartbeat
// of a new incarnation or after a silence of awayAfter, not its first
// heartbeat to this master nor a regular one.
func TestServerBack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	hb := func(inc, seq uint64) *pb.HeartbeatRequest {
		return &pb.HeartbeatRequest{Server: &pb.ServerInfo{ServerId: "a"}, Incarnation: inc, Seq: seq, Full: true}
	}
	cases := []struct {
		name string
		// second heartbeat: incarnation and delay after the first
		inc   uint64
		after time.Duration
		back  bool
	}{
		{"regular heartbeat", 9, 500 * time.Millisecond, false},
		{"restarted", 10, 500 * time.Millisecond, true},
		{"silent, then heard from again", 9, awayAfter, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newReports()
			r.accept("a", hb(9, 1), t0)
			if _, ok := r.back["a"]; ok {
				t.Fatal("the first heartbeat to this master counted as a return")
			}
			at := t0.Add(tc.after)
			r.accept("a", hb(tc.inc, 2), at)
			if got, ok := r.back["a"]; ok != tc.back || (ok && !got.Equal(at)) {
				t.Fatalf("back = %v (recorded %v), want recorded %v at %v", got, ok, tc.back, at)
			}
		})
	}
}

// TestGreetForgetsAnEarlierTerm: a master that regains the lead counts
// every server's silence from then, not from what it heard in an earlier
// term (heartbeats went to the other leader meanwhile), so none looks down
// for that long or comes "back" with its first heartbeat.
func TestGreetForgetsAnEarlierTerm(t *testing.T) {
	r := newReports()
	t0 := time.Unix(1000, 0)
	req := func(seq uint64) *pb.HeartbeatRequest {
		return &pb.HeartbeatRequest{Server: &pb.ServerInfo{ServerId: "a"}, Incarnation: 7, Seq: seq, Full: true}
	}
	r.greet([]string{"a"}, t0)
	r.accept("a", req(1), t0)
	// Another master led for a minute; this one leads again.
	again := t0.Add(time.Minute)
	r.greet([]string{"a"}, again)
	if got := r.seen()["a"]; !got.Equal(again) {
		t.Fatalf("last seen %v after the new term's greeting, want %v", got, again)
	}
	_, _, span := r.accept("a", req(2), again.Add(500*time.Millisecond))
	if span != 500*time.Millisecond {
		t.Fatalf("first heartbeat's span %v, want 500ms (counted from the greeting)", span)
	}
	if _, back := r.back["a"]; back {
		t.Fatal("the first heartbeat of the new term counted as a return")
	}
}

// TestPruneDropped: the reports of a dropped table's ranges are forgotten;
// nothing else forgot them (leaders, loads with their hot keys, trends,
// voters, thawed indexes), for the master's lifetime. A live table's range
// stays, even one the map lacks for a while.
func TestPruneDropped(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := newReports()
	leader := func(id, table uint64) *pb.RangeStatus {
		return &pb.RangeStatus{RangeId: id, Generation: 3, Leader: true, AppliedIndex: 9, Voters: []string{"a", "b", "c"},
			Range: &pb.RangeDescriptor{RangeId: id, TableId: table, Generation: 3},
			Load:  &pb.RangeLoad{EntitiesPerSec: 5, HotKeys: []*pb.KeyLoad{{PartitionKey: "p"}}}}
	}
	foldReport(r, scheduler.Config{}, "a", []*pb.RangeStatus{leader(11, 1), leader(22, 2)}, t0)
	if n := r.pruneDropped(func(table uint64) bool { return table != 2 }); n != 1 {
		t.Fatalf("pruned %d ranges, want 1", n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, m := range map[string]map[uint64]bool{
		"leaders": idSet(r.leaders), "loads": idSet(r.loads), "trends": idSet(r.trends), "voters": idSet(r.voters),
		"thawed": idSet(r.thawed), "tables": idSet(r.tables),
	} {
		if m[22] || !m[11] {
			t.Errorf("%s holds %v: want range 11 kept, 22 (dropped table) forgotten", name, m)
		}
	}
}

func idSet[V any](m map[uint64]V) map[uint64]bool {
	out := map[uint64]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// TestReportsBroken: the replicas a server reports broken are remembered
// per server and range (the scheduler replaces them): a report of the
// replica in another state clears it, as does its removal from a delta
// or a full report without it.
func TestReportsBroken(t *testing.T) {
	cfg := scheduler.DefaultConfig()
	r := newReports()
	now := time.Now()
	st := func(id uint64, lc string) *pb.RangeStatus { return &pb.RangeStatus{RangeId: id, Lifecycle: lc} }
	r.heartbeat(cfg, "a", []*pb.RangeStatus{st(1, "broken"), st(2, "quiet"), st(3, "broken")}, nil, true, time.Second, now)
	r.heartbeat(cfg, "b", []*pb.RangeStatus{st(1, "active")}, nil, true, time.Second, now)
	want := map[uint64]map[string]bool{1: {"a": true}, 3: {"a": true}}
	if got := r.brokenReplicas(); !reflect.DeepEqual(got, want) {
		t.Fatalf("broken after full reports: %v, want %v", got, want)
	}
	if !r.brokenOn("a", 1) || r.brokenOn("b", 1) || r.brokenOn("a", 2) {
		t.Fatal("brokenOn disagrees with the reports")
	}
	// A delta: range 1 reopened (a restart), range 3 deleted.
	r.heartbeat(cfg, "a", []*pb.RangeStatus{st(1, "active")}, []uint64{3}, false, time.Second, now)
	if got := r.brokenReplicas(); len(got) != 0 {
		t.Fatalf("broken after the delta: %v, want none", got)
	}
	r.heartbeat(cfg, "a", []*pb.RangeStatus{st(2, "broken")}, nil, false, time.Second, now)
	r.heartbeat(cfg, "a", []*pb.RangeStatus{st(1, "active")}, nil, true, time.Second, now)
	if r.brokenOn("a", 2) {
		t.Fatal("a full report without range 2 left it broken")
	}
	r.heartbeat(cfg, "a", []*pb.RangeStatus{st(2, "broken")}, nil, false, time.Second, now)
	r.forgetServer("a")
	if r.brokenOn("a", 2) {
		t.Fatal("a removed server's broken replica is still remembered")
	}
}

// TestReportsReplacedInPlace: an in-place replacement's delete clears the
// broken mark at once (the policy tick must not see it again before the
// server's next heartbeat), and a report of the old replica built before
// the delete (its generation below the removal's) that is folded in after
// is not taken as broken; the new replica (the removal's generation or
// later) is, should it break too.
func TestReportsReplacedInPlace(t *testing.T) {
	cfg := scheduler.DefaultConfig()
	r := newReports()
	now := time.Now()
	st := func(gen uint64, lc string) *pb.RangeStatus {
		return &pb.RangeStatus{RangeId: 1, Generation: gen, Lifecycle: lc}
	}
	r.heartbeat(cfg, "a", []*pb.RangeStatus{st(4, "broken")}, nil, true, time.Second, now)
	if !r.brokenOn("a", 1) {
		t.Fatal("the broken replica is not remembered")
	}
	before := r.gen
	r.replacedInPlace("a", 1, 6)
	if r.brokenOn("a", 1) {
		t.Fatal("the broken mark outlived the in-place replacement's delete")
	}
	if r.gen == before {
		t.Fatal("clearing the mark did not count as a change of the reports (the replica check would skip it)")
	}
	r.heartbeat(cfg, "a", []*pb.RangeStatus{st(4, "broken")}, nil, false, time.Second, now)
	if r.brokenOn("a", 1) {
		t.Fatal("a late report of the replaced replica marked the range broken again")
	}
	r.heartbeat(cfg, "a", []*pb.RangeStatus{st(6, "broken")}, nil, true, time.Second, now)
	if !r.brokenOn("a", 1) {
		t.Fatal("the new replica, broken too, is not taken as broken")
	}
	r.forget(1)
	r.heartbeat(cfg, "a", []*pb.RangeStatus{st(4, "broken")}, nil, true, time.Second, now)
	if !r.brokenOn("a", 1) {
		t.Fatal("a forgotten range's replacement still hides a broken report")
	}
}
