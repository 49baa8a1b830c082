package master

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

func TestStartedByReport(t *testing.T) {
	gen := func(g uint64) *pb.RangeDescriptor { return &pb.RangeDescriptor{RangeId: 1, TableId: 1, Generation: g} }
	status := func(g uint64, leader bool, applied uint64) *pb.RangeStatus {
		return &pb.RangeStatus{RangeId: 1, Generation: g, Range: gen(g), Leader: leader, AppliedIndex: applied}
	}
	tests := []struct {
		name   string
		known  *pb.RangeDescriptor
		marked bool
		rs     *pb.RangeStatus
		want   bool
	}{
		{"leader of an unmarked generation-1 range", gen(1), false, status(1, true, 0), true},
		{"follower past the bootstrap entry", gen(1), false, status(1, false, 2), true},
		{"follower at the bootstrap entry only", gen(1), false, status(1, false, 1), false},
		{"bootstrapped, no leader yet", gen(1), false, status(1, false, 0), false},
		{"marked already: no second entry", gen(1), true, status(1, true, 9), false},
		{"range past generation 1 in the map", gen(2), false, status(1, true, 9), false},
		{"replica past generation 1, map behind", gen(1), false, status(2, true, 9), false},
		{"range not in the map", nil, false, status(1, true, 9), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := startedByReport(tt.known, tt.marked, tt.rs); got != tt.want {
				t.Fatalf("startedByReport = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMayBootstrap(t *testing.T) {
	tests := []struct {
		gen     uint64
		started bool
		want    bool
	}{
		{1, false, true},  // a brand-new range: no leader can give a floor
		{1, true, false},  // started: joins with a floor
		{2, false, false}, // past generation 1: always joins (or awaits its split)
		{2, true, false},
	}
	for _, tt := range tests {
		if got := mayBootstrap(&pb.RangeDescriptor{Generation: tt.gen}, tt.started); got != tt.want {
			t.Errorf("mayBootstrap(generation %d, started %v) = %v, want %v", tt.gen, tt.started, got, tt.want)
		}
	}
}

// markStartedCmd applies a MARK_RANGES_STARTED as the FSM would.
func markStartedCmd(t *testing.T, s *state, ids ...uint64) {
	t.Helper()
	payload, err := proto.Marshal(&pb.MarkRangesStartedCommand{RangeIds: ids})
	if err != nil {
		t.Fatal(err)
	}
	if res := handlers[pb.MasterCommandKind_MASTER_COMMAND_KIND_MARK_RANGES_STARTED](s, payload); res.err != nil {
		t.Fatal(res.err)
	}
}

// TestRangeStartsRecorded: a mark is kept only for a range the map holds
// at generation 1, survives a snapshot, goes with its table, and decides
// what the heartbeat answer lists as unstarted.
func TestRangeStartsRecorded(t *testing.T) {
	f := &fsm{st: newState()}
	s := f.st
	rep := []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}
	a := createTable(s, &pb.CreateTableCommand{Name: "a", Replicas: rep}).ranges[0]
	b := createTable(s, &pb.CreateTableCommand{Name: "b", Replicas: rep}).ranges[0]
	c := createTable(s, &pb.CreateTableCommand{Name: "c", Replicas: rep}).ranges[0]
	// c split: its first range is at generation 2 now.
	c2 := proto.Clone(c).(*pb.RangeDescriptor)
	c2.Generation, c2.End = 2, "m"
	s.putRange(c2)

	unstarted := func() []uint64 {
		resp := f.assignments("ps2", 0)
		if !resp.GetRangeStartsKnown() {
			t.Fatal("assignments: range_starts_known unset")
		}
		ids := slices.Clone(resp.GetUnstartedRangeIds())
		slices.Sort(ids)
		return ids
	}
	if got, want := unstarted(), []uint64{a.GetRangeId(), b.GetRangeId()}; !slices.Equal(got, want) {
		t.Fatalf("unstarted before any mark = %v, want %v", got, want)
	}
	if got := f.assignments("ps9", 0).GetUnstartedRangeIds(); len(got) != 0 {
		t.Fatalf("a server assigned nothing is told of unstarted ranges %v", got)
	}

	// Reports: b's leader and a's follower at entry 1 (no leader yet).
	reports := []*pb.RangeStatus{
		{RangeId: b.GetRangeId(), Range: b, Leader: true},
		{RangeId: b.GetRangeId(), Range: b, Leader: true},
		{RangeId: a.GetRangeId(), Range: a, AppliedIndex: 1},
		{RangeId: c.GetRangeId(), Range: c2, Leader: true},
	}
	if got := f.unstartedLed(reports); !slices.Equal(got, []uint64{b.GetRangeId()}) {
		t.Fatalf("unstartedLed = %v, want [%d] once", got, b.GetRangeId())
	}

	markStartedCmd(t, s, b.GetRangeId(), c.GetRangeId(), 99)
	if _, ok := s.started[c.GetRangeId()]; ok {
		t.Fatal("a range past generation 1 was marked")
	}
	if _, ok := s.started[99]; ok {
		t.Fatal("a range the map lacks was marked")
	}
	if got := f.unstartedLed(reports); len(got) != 0 {
		t.Fatalf("unstartedLed after the mark = %v, want none", got)
	}
	f.st = stateFromSnapshot(s.snapshot())
	s = f.st
	if got, want := unstarted(), []uint64{a.GetRangeId()}; !slices.Equal(got, want) {
		t.Fatalf("unstarted after marking b and a snapshot = %v, want %v", got, want)
	}
	markStartedCmd(t, s, a.GetRangeId())
	if got := unstarted(); len(got) != 0 {
		t.Fatalf("unstarted after marking a = %v, want none", got)
	}
	deleteTable(s, "b")
	if _, ok := s.started[b.GetRangeId()]; ok {
		t.Fatal("a deleted table's range keeps its mark")
	}
	if got := s.snapshot().GetStartedRangeIds(); !slices.Equal(got, []uint64{a.GetRangeId()}) {
		t.Fatalf("snapshot's started ids = %v, want [%d]", got, a.GetRangeId())
	}
}

// TestRangeStartMarkedFromHeartbeat: the wiring of the heartbeat path on a
// running master. A table whose CreateTable saw no leader (applied
// directly here, as after a lost answer) is listed unstarted to its
// servers until one reports leading it; then the master marks it (one
// command), no answer lists it again, and the mark survives a restart of
// the master from its log.
func TestRangeStartMarkedFromHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	t.Parallel() // its own masters, mostly waiting on elections: beside one other
	cfg, s := startSoloMaster(t)
	defer func() { s.Close() }()
	waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
	ctx := context.Background()
	servers := []string{"ps1", "ps2", "ps3"}
	beat := func(s *Server, sid string, ranges ...*pb.RangeStatus) *pb.HeartbeatResponse {
		t.Helper()
		resp, err := (&service{s: s}).Heartbeat(ctx, &pb.HeartbeatRequest{
			Server: &pb.ServerInfo{ServerId: sid, GrpcAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2"},
			Ranges: ranges, Full: true,
		})
		if err != nil {
			t.Fatalf("heartbeat of %s: %v", sid, err)
		}
		return resp
	}
	var rep []*pb.Replica
	for _, sid := range servers {
		beat(s, sid)
		rep = append(rep, &pb.Replica{ServerId: sid})
	}
	res, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: rep})
	if err != nil {
		t.Fatal(err)
	}
	d := res.ranges[0]
	if got := beat(s, "ps2").GetUnstartedRangeIds(); !slices.Equal(got, []uint64{d.GetRangeId()}) {
		t.Fatalf("before any leader: unstarted = %v, want [%d]", got, d.GetRangeId())
	}
	// A follower at the bootstrap entry says nothing; the leader does.
	// (The heartbeat's mark is asynchronous: the decision is checked.)
	follower := &pb.RangeStatus{RangeId: d.GetRangeId(), Generation: 1, Range: d, AppliedIndex: 1}
	if got := s.fsm.unstartedLed([]*pb.RangeStatus{follower}); len(got) != 0 {
		t.Fatalf("a follower's report at entry 1 would mark %v, want nothing", got)
	}
	beat(s, "ps1", follower)
	if got := beat(s, "ps2").GetUnstartedRangeIds(); len(got) != 1 {
		t.Fatalf("after a follower's report at entry 1: unstarted = %v, want the range", got)
	}
	beat(s, "ps3", &pb.RangeStatus{RangeId: d.GetRangeId(), Generation: 1, Range: d, Leader: true, AppliedIndex: 2})
	waitUntil(t, 10*time.Second, "the range marked started", func() bool {
		resp := beat(s, "ps2")
		return resp.GetRangeStartsKnown() && len(resp.GetUnstartedRangeIds()) == 0
	})
	s.Close()
	s = startMaster(t, cfg)
	waitUntil(t, 10*time.Second, "the restarted master leads", s.IsLeader)
	resp := beat(s, "ps1")
	if !resp.GetRangeStartsKnown() || len(resp.GetAssigned()) != 1 || len(resp.GetUnstartedRangeIds()) != 0 {
		t.Fatalf("after a restart: starts known %v, assigned %d, unstarted %v; want the range assigned and started",
			resp.GetRangeStartsKnown(), len(resp.GetAssigned()), resp.GetUnstartedRangeIds())
	}
}

// TestNoteStartedKeepsLateReports: ranges noted while a mark is in flight
// are marked by the next command, not dropped (an idle range is reported
// again only by a full report, ten seconds later).
func TestNoteStartedKeepsLateReports(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	t.Parallel() // its own masters, mostly waiting on elections: beside one other
	_, s := startSoloMaster(t)
	defer s.Close()
	waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
	var rep []*pb.Replica
	for _, sid := range []string{"ps1", "ps2", "ps3"} {
		if _, err := (&service{s: s}).Heartbeat(context.Background(), &pb.HeartbeatRequest{
			Server: &pb.ServerInfo{ServerId: sid, GrpcAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2"}, Full: true,
		}); err != nil {
			t.Fatal(err)
		}
		rep = append(rep, &pb.Replica{ServerId: sid})
	}
	var ids []uint64
	for _, name := range []string{"a", "b", "c"} {
		res, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: name, Replicas: rep})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ranges[0].GetRangeId())
	}
	// The first note starts a command; the others arrive while it is in
	// flight (a command takes a disk sync at least).
	for _, id := range ids {
		s.noteStarted([]uint64{id})
	}
	waitUntil(t, 10*time.Second, "every noted range marked", func() bool { return len(s.UnstartedRanges()) == 0 })
}

// startSoloMaster starts a one-member master group with its policies off
// (the caller closes it and waits for it to lead).
func startSoloMaster(t *testing.T) (Config, *Server) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir = "m1", t.TempDir()
	cfg.GRPCAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
	cfg.Policy.Enabled = false
	return cfg, startMaster(t, cfg)
}
