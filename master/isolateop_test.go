package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// Tests of a span leaving its anchor group (docs/range-groups.md, stage 7,
// step 7): the scheduled Isolate, and split's defence.

// anchorGroupFake is a partition server of the tests' anchor groups, led
// by server a; the fake's view of a group is the master's map. AddSpan
// applies the cap as the group's apply does (fakeGroup.spans, the anchor
// included, against the request's max_spans; 0 is none); DetachRange
// answers the range as a group of its own, and fails while
// fakeGroup.failDetach is set; SplitRange logs the group the map names
// for the range at that moment. Every call asked of the leader is logged.
type anchorGroupFake struct {
	pb.UnimplementedPartitionServiceServer
	id string
	g  *fakeGroup
}

// fakeGroup is what the fakes a, b and c share.
type fakeGroup struct {
	mu         sync.Mutex
	m          *Server
	spans      int // served, the anchor included
	failDetach bool
	log        []string // "add cap=256 refused", "add cap=0", "detach r2", "split r3 in group 1"
}

// registerFakes makes a, b and c the master's partition servers, all
// sharing g.
func registerFakes(s *Server, g *fakeGroup) {
	for _, id := range []string{"a", "b", "c"} {
		s.pool.RegisterLocal("local-"+id, &anchorGroupFake{id: id, g: g})
	}
}

func (g *fakeGroup) noteLocked(format string, args ...any) {
	g.log = append(g.log, fmt.Sprintf(format, args...))
}

func (g *fakeGroup) events() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.log)
}

func (f *anchorGroupFake) AddSpan(_ context.Context, req *pb.AddSpanRequest) (*pb.AddSpanResponse, error) {
	g := f.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.id != "a" {
		return nil, notLeader("a")()
	}
	if c := int(req.GetMaxSpans()); c > 0 && g.spans >= c {
		g.noteLocked("add cap=%d refused", c)
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonGroupFull, "group full", nil)
	}
	g.noteLocked("add cap=%d", req.GetMaxSpans())
	g.spans++
	got := proto.Clone(req.GetRange()).(*pb.RangeDescriptor)
	got.Generation = 2
	return &pb.AddSpanResponse{Range: got}, nil
}

func (f *anchorGroupFake) DetachRange(_ context.Context, req *pb.DetachRangeRequest) (*pb.DetachRangeResponse, error) {
	g := f.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.id != "a" {
		return nil, notLeader("a")()
	}
	if g.failDetach {
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonNotReady, "detach failed", nil)
	}
	d, _ := g.m.rangeDesc(req.GetRangeId())
	g.noteLocked("detach r%d", req.GetRangeId())
	g.spans--
	got := proto.Clone(d).(*pb.RangeDescriptor)
	got.GroupId, got.Generation = 0, d.GetGeneration()+1
	return &pb.DetachRangeResponse{Range: got}, nil
}

func (f *anchorGroupFake) SplitRange(_ context.Context, req *pb.SplitRangeRequest) (*pb.SplitRangeResponse, error) {
	g := f.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.id != "a" {
		return nil, notLeader("a")()
	}
	d, _ := g.m.rangeDesc(req.GetRangeId())
	g.noteLocked("split r%d in group %d", req.GetRangeId(), rangegroup.GroupOf(d))
	left := proto.Clone(d).(*pb.RangeDescriptor)
	left.End, left.Generation = req.GetSplitKey(), d.GetGeneration()+1
	right := proto.Clone(left).(*pb.RangeDescriptor)
	right.RangeId, right.Start, right.End, right.GroupId = req.GetNewRangeId(), req.GetSplitKey(), d.GetEnd(), 0
	return &pb.SplitRangeResponse{Left: left, Right: right}, nil
}

func (f *anchorGroupFake) RangeInfo(_ context.Context, req *pb.RangeInfoRequest) (*pb.RangeInfoResponse, error) {
	return &pb.RangeInfoResponse{Status: &pb.RangeStatus{RangeId: req.GetRangeId(), Leader: f.id == "a"}}, nil
}

// anchorGroupMaster is a leading solo master with fake servers a, b, c
// and, in its map, an anchor group (the anchor and tables "hot" and
// "cold" added to it), table "own" (a group of its own) and table "user",
// whose range's group also serves table "usersp"'s range (a group no
// anchor founded). It returns the master, the range ids by table name
// ("anchor" for the anchor's) and the fakes' log.
func anchorGroupMaster(t *testing.T) (*Server, map[string]uint64, func() []string) {
	t.Helper()
	_, s := startSoloMaster(t)
	t.Cleanup(func() { s.Close() })
	waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
	g := &fakeGroup{m: s}
	registerFakes(s, g)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := (&service{s: s}).Heartbeat(context.Background(), &pb.HeartbeatRequest{
			Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "local-" + id, RaftAddr: "127.0.0.1:1"}, Full: true,
		}); err != nil {
			t.Fatal(err)
		}
	}
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	create := pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE
	ids := map[string]uint64{"anchor": mustApply(t, s, create, &pb.CreateTableCommand{Anchor: true, Replicas: reps}).ranges[0].GetRangeId()}
	for _, name := range []string{"hot", "cold", "own", "user", "usersp"} {
		c := &pb.CreateTableCommand{Name: name, Replicas: reps}
		if name == "hot" || name == "cold" {
			c.GroupId = ids["anchor"]
		}
		ids[name] = mustApply(t, s, create, c).ranges[0].GetRangeId()
	}
	// Added: generation 2, as ADD_SPAN stores them; usersp joins user's group.
	var added []*pb.RangeDescriptor
	for _, name := range []string{"hot", "cold", "usersp"} {
		d, _ := s.rangeDesc(ids[name])
		d = proto.Clone(d).(*pb.RangeDescriptor)
		d.Generation = 2
		if name == "usersp" {
			d.GroupId = ids["user"]
		}
		added = append(added, d)
	}
	mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: added})
	return s, ids, g.events
}

// groupIn is range id's group in s's map.
func groupIn(t *testing.T, s *Server, id uint64) uint64 {
	t.Helper()
	d, ok := s.rangeDesc(id)
	if !ok {
		t.Fatalf("range %d not in the map", id)
	}
	return rangegroup.GroupOf(d)
}

// TestIsolateSpan: a scheduled Isolate of a span of an anchor group
// detaches it through the group's leader and records it a group of its
// own, the anchor and the other span staying; the anchor, a range alone
// and a span of a group no anchor founded are left as they are; a busy
// range of the group refuses it (ErrBusy) with nothing asked; the group's
// ranges are released after. The scheduler's snapshot marks the anchor
// alone (Range.Anchor).
func TestIsolateSpan(t *testing.T) {
	s, ids, log := anchorGroupMaster(t)
	anchor := ids["anchor"]
	var marked []uint64
	for _, r := range s.snapshot(time.Now()).Ranges {
		if r.Anchor {
			marked = append(marked, r.ID)
		}
	}
	if !slices.Equal(marked, []uint64{anchor}) {
		t.Fatalf("snapshot marks %v as anchors, want [%d]", marked, anchor)
	}
	isolate := func(name string) error {
		return s.isolateSpan(context.Background(), scheduler.Op{Kind: scheduler.Isolate, Range: ids[name], Group: anchor, Rule: scheduler.RuleDetachHot})
	}
	for _, name := range []string{"anchor", "own", "usersp"} {
		if err := isolate(name); err != nil {
			t.Fatalf("isolate %s: %v", name, err)
		}
	}
	if got := log(); len(got) != 0 {
		t.Fatalf("isolating the anchor, a range alone, a span of a user's group asked %v, want nothing", got)
	}
	if err := s.ops.claim(ids["cold"]); err != nil {
		t.Fatal(err)
	}
	if err := isolate("hot"); !errors.Is(err, ErrBusy) || len(log()) != 0 {
		t.Fatalf("with a range of the group busy: %v, asked %v; want ErrBusy, nothing", err, log())
	}
	s.ops.release(ids["cold"])
	if err := isolate("hot"); err != nil {
		t.Fatalf("isolate hot: %v", err)
	}
	if got, want := log(), []string{fmt.Sprintf("detach r%d", ids["hot"])}; !slices.Equal(got, want) {
		t.Fatalf("asked %v, want %v", got, want)
	}
	if g := groupIn(t, s, ids["hot"]); g != ids["hot"] {
		t.Errorf("hot's range in group %d after the isolate, want its own", g)
	}
	if g := groupIn(t, s, ids["cold"]); g != anchor {
		t.Errorf("cold's range in group %d, want the anchor's %d", g, anchor)
	}
	if err := s.ops.claim(anchor, ids["cold"]); err != nil {
		t.Errorf("the group's ranges still claimed: %v", err)
	}
}

// TestSplitLeavesAnchorGroup: a split of a span of an anchor group (an
// operator's, or a plan of an older master) takes it out of the group
// first, so both halves are groups of the table's own; a range alone
// splits at once. Fails without leaveAnchorGroup: the split ran in group
// of the anchor, its left half staying there.
func TestSplitLeavesAnchorGroup(t *testing.T) {
	s, ids, log := anchorGroupMaster(t)
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"own", []string{fmt.Sprintf("split r%d in group %d", ids["own"], ids["own"])}},
		{"hot", []string{fmt.Sprintf("detach r%d", ids["hot"]), fmt.Sprintf("split r%d in group %d", ids["hot"], ids["hot"])}},
	} {
		before := len(log())
		resp, err := s.split(context.Background(), ids[tc.name], "m", "", causeOperator, "", nil, false)
		if err != nil {
			t.Fatalf("split %s: %v", tc.name, err)
		}
		if got := log()[before:]; !slices.Equal(got, tc.want) {
			t.Errorf("split %s asked %v, want %v", tc.name, got, tc.want)
		}
		for _, d := range []*pb.RangeDescriptor{resp.GetLeft(), resp.GetRight()} {
			if g := groupIn(t, s, d.GetRangeId()); g != d.GetRangeId() {
				t.Errorf("split %s: range %d in group %d, want its own", tc.name, d.GetRangeId(), g)
			}
		}
	}
	if g := groupIn(t, s, ids["cold"]); g != ids["anchor"] {
		t.Errorf("cold's range in group %d, want the anchor's", g)
	}
}

// TestIsolateRecordsTheDetach: a span an operation outside the scheduler
// takes out of its group (an operator's move or leadership transfer of
// one span: isolate) is in the scheduler's recent operations as an
// Isolate, as the scheduler's own isolates are, so attach-cold waits out
// MergeCooldown before taking it back into an anchor group (its cold
// trend predates the detach; the scenario table_group_attach_history.txt
// has the scheduler's side). A range alone records nothing. Fails
// without the record in isolate: nothing was recorded, and attach-cold
// saw a cold lone range at the next pass.
func TestIsolateRecordsTheDetach(t *testing.T) {
	s, ids, _ := anchorGroupMaster(t)
	if _, err := s.isolate(context.Background(), ids["own"], causeOperator); err != nil {
		t.Fatalf("isolate own: %v", err)
	}
	if _, err := s.isolate(context.Background(), ids["hot"], causeOperator); err != nil {
		t.Fatalf("isolate hot: %v", err)
	}
	_, recent := s.ops.state(time.Now())
	var got []string
	for _, o := range recent {
		got = append(got, fmt.Sprintf("%v r%d %s failed=%v", o.Kind, o.Range, o.Rule, o.Failed))
	}
	want := []string{fmt.Sprintf("%v r%d %s failed=false", scheduler.Isolate, ids["hot"], causeOperator)}
	if !slices.Equal(got, want) {
		t.Fatalf("recent operations %q, want %q", got, want)
	}
}
