package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// Tests of stage 8's master side (attach.go, grouptables.go): a table's
// only range joining an anchor group.

// attachWorld is what the fake partition servers a, b and c of the attach
// tests share: the freezes of the ranges (the log of every range is one
// counter, next), the attaches applied, and the log of what the leader,
// a, was asked.
type attachWorld struct {
	mu       sync.Mutex
	m        *Server
	next     uint64
	frozen   map[uint64]uint64 // range -> freeze index
	attached map[uint64]uint64 // range -> group it joined
	lag      string            // a server whose replicas apply nothing after a freeze
	onFreeze func()            // run, unlocked, after a freeze
	log      []string
}

type attachFake struct {
	pb.UnimplementedPartitionServiceServer
	id string
	w  *attachWorld
}

func (w *attachWorld) note(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

func (w *attachWorld) events() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.log)
}

func (f *attachFake) RangeInfo(_ context.Context, req *pb.RangeInfoRequest) (*pb.RangeInfoResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	st := &pb.RangeStatus{RangeId: req.GetRangeId(), Leader: f.id == "a", AppliedIndex: f.w.next}
	if idx, ok := f.w.frozen[req.GetRangeId()]; ok {
		st.Frozen, st.FrozenIndex = true, idx
	}
	if f.id == f.w.lag {
		st.AppliedIndex, st.Frozen, st.FrozenIndex = 1, false, 0
	}
	return &pb.RangeInfoResponse{Status: st}, nil
}

func (f *attachFake) FreezeRange(_ context.Context, req *pb.FreezeRangeRequest) (*pb.FreezeRangeResponse, error) {
	if f.id != "a" {
		return nil, notLeader("a")()
	}
	w := f.w
	w.mu.Lock()
	id := req.GetRangeId()
	d, _ := w.m.rangeDesc(id)
	idx, frozen := w.frozen[id]
	switch {
	case req.GetOnlyIfFrozen() && !frozen:
		w.mu.Unlock()
		return &pb.FreezeRangeResponse{Range: d, AppliedIndex: 3}, nil // a group's log: low indexes
	case req.GetOnlyIfFrozen():
		w.mu.Unlock()
		return &pb.FreezeRangeResponse{Range: d, FreezeIndex: idx, AppliedIndex: idx}, nil
	}
	w.next++
	w.frozen[id] = w.next
	w.note("freeze r%d", id)
	resp := &pb.FreezeRangeResponse{Range: d, FreezeIndex: w.next, AppliedIndex: w.next}
	hook := w.onFreeze
	w.mu.Unlock()
	if hook != nil {
		hook()
	}
	return resp, nil
}

func (f *attachFake) UnfreezeRange(_ context.Context, req *pb.UnfreezeRangeRequest) (*pb.UnfreezeRangeResponse, error) {
	if f.id != "a" {
		return nil, notLeader("a")()
	}
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.frozen[req.GetRangeId()] != req.GetFreezeIndex() {
		return nil, rpcerr.New(codes.FailedPrecondition, "", "not frozen there", nil)
	}
	delete(w.frozen, req.GetRangeId())
	w.next++
	w.note("unfreeze r%d", req.GetRangeId())
	return &pb.UnfreezeRangeResponse{AppliedIndex: w.next}, nil
}

func (f *attachFake) AttachSpan(_ context.Context, req *pb.AttachSpanRequest) (*pb.AttachSpanResponse, error) {
	if f.id != "a" {
		return nil, notLeader("a")()
	}
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	right, g := req.GetRight(), req.GetGroupRangeId()
	anchor, _ := w.m.rangeDesc(g)
	span := proto.Clone(right).(*pb.RangeDescriptor)
	span.GroupId, span.Replicas = g, cloneReplicas(anchor.GetReplicas())
	if w.attached[right.GetRangeId()] == g {
		w.note("attach r%d to %d again", right.GetRangeId(), g)
		span.Generation = right.GetGeneration() + 1
		if cur, _ := w.m.rangeDesc(right.GetRangeId()); groupSpan(cur) {
			span.Generation = cur.GetGeneration()
		}
		return &pb.AttachSpanResponse{Range: span}, nil
	}
	if w.frozen[right.GetRangeId()] != req.GetRightFreezeIndex() {
		return nil, rpcerr.New(codes.FailedPrecondition, "", "not frozen at that index", nil)
	}
	w.note("attach r%d to %d", right.GetRangeId(), g)
	delete(w.frozen, right.GetRangeId())
	w.attached[right.GetRangeId()] = g
	span.Generation = right.GetGeneration() + 1
	return &pb.AttachSpanResponse{Range: span}, nil
}

// attachMaster is a leading solo master (tableGroups: its --table-groups)
// with fake servers a, b and c, all announcing attach_spans, and in its
// map an anchor group (the anchor, on a, b, c), table "own" (one range in
// a group of its own on a, b, c) and table "split" (two ranges). It
// returns the master, the range ids ("anchor", "own", "split"), the
// fakes' world and beat, which sends every server's heartbeat (servers
// silent for 2 s do not fit an attach).
func attachMaster(t *testing.T, tableGroups bool) (*Server, map[string]uint64, *attachWorld, func()) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir = "m1", t.TempDir()
	cfg.GRPCAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
	cfg.Policy.Enabled = false
	cfg.TableGroups = tableGroups
	s := startMaster(t, cfg)
	t.Cleanup(func() { s.Close() })
	waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
	w := &attachWorld{m: s, next: 10, frozen: map[uint64]uint64{}, attached: map[uint64]uint64{}}
	for _, id := range []string{"a", "b", "c"} {
		s.pool.RegisterLocal("local-"+id, &attachFake{id: id, w: w})
	}
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	create := pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE
	ids := map[string]uint64{"anchor": mustApply(t, s, create, &pb.CreateTableCommand{Anchor: true, Replicas: reps}).ranges[0].GetRangeId()}
	ids["own"] = mustApply(t, s, create, &pb.CreateTableCommand{Name: "own", Replicas: reps}).ranges[0].GetRangeId()
	ids["split"] = mustApply(t, s, create, &pb.CreateTableCommand{Name: "split", Replicas: reps}).ranges[0].GetRangeId()
	mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{
		{RangeId: 90, Table: "split", TableId: tableOf(t, s, ids["split"]), Start: "m", Generation: 2, Replicas: reps},
		{RangeId: ids["split"], Table: "split", TableId: tableOf(t, s, ids["split"]), End: "m", Generation: 2, Replicas: reps},
	}})
	beat := func() {
		t.Helper()
		for _, id := range []string{"a", "b", "c"} {
			req := &pb.HeartbeatRequest{
				Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "local-" + id, RaftAddr: "127.0.0.1:1"}, Full: true,
				MergeAbort: true, TableGroups: true, AttachSpans: true,
			}
			for _, d := range s.mapRanges() {
				req.Ranges = append(req.Ranges, &pb.RangeStatus{RangeId: d.GetRangeId(), Generation: d.GetGeneration(), Range: d,
					Leader: id == "a", AppliedIndex: 10, Load: &pb.RangeLoad{}})
			}
			if _, err := (&service{s: s}).Heartbeat(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		}
	}
	beat()
	return s, ids, w, beat
}

func tableOf(t *testing.T, s *Server, id uint64) uint64 {
	t.Helper()
	d, ok := s.rangeDesc(id)
	if !ok {
		t.Fatalf("range %d not in the map", id)
	}
	return d.GetTableId()
}

// decisionOf is the map's recorded decision for range id (nil: none).
func decisionOf(s *Server, id uint64) (d *pb.MergeDecision) {
	s.fsm.read(func(st *state) { d = st.mergeDecisions[id] })
	return d
}

// TestAttachDecisionRecord: a decision naming an attach group is recorded
// with it and keeps it through a snapshot; a COMMIT naming a range that
// is no live anchor is recorded ABORT (a final COMMIT no group could carry
// out kept the range frozen for good); the decision stays while the map
// shows the range a span of that group and goes when it leaves the group
// (its later freezes are in a new log). Fails without attachCommitFit and
// without dropLeftAttach.
func TestAttachDecisionRecord(t *testing.T) {
	s := newState()
	anchor := &pb.RangeDescriptor{RangeId: 1, Table: anchorPrefix + "1", TableId: 1, GroupId: 1, Generation: 1}
	s.putTable(anchor.GetTable(), &pb.Table{Name: anchor.GetTable(), TableId: 1})
	s.putRange(anchor)
	s.putTable("t", &pb.Table{Name: "t", TableId: 2})
	s.putRange(&pb.RangeDescriptor{RangeId: 2, Table: "t", TableId: 2, Generation: 3})
	propose := func(index, group uint64, o pb.MergeOutcome) *applyResult {
		payload, err := proto.Marshal(&pb.MergeDecisionCommand{Decision: &pb.MergeDecision{RightRangeId: 2, FreezeIndex: index, Outcome: o, AttachGroup: group}})
		if err != nil {
			t.Fatal(err)
		}
		return handlers[pb.MasterCommandKind_MASTER_COMMAND_KIND_MERGE_DECISION](s, payload)
	}
	if res := propose(10, 7, commit); res.err != nil || res.decision.GetOutcome() != abort || res.decision.GetAttachGroup() != 7 {
		t.Fatalf("COMMIT naming no anchor: %v %v, want recorded ABORT naming 7", res.decision, res.err)
	}
	if res := propose(20, 1, commit); res.err != nil || res.decision.GetOutcome() != commit || !res.recorded {
		t.Fatalf("COMMIT naming the anchor: %v %v", res.decision, res.err)
	}
	s = stateFromSnapshot(s.snapshot())
	if d := s.mergeDecisions[2]; d.GetAttachGroup() != 1 || d.GetOutcome() != commit || d.GetFreezeIndex() != 20 {
		t.Fatalf("after a snapshot: %v", d)
	}
	update := func(group, gen uint64) {
		payload, _ := proto.Marshal(&pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{{RangeId: 2, Table: "t", TableId: 2, GroupId: group, Generation: gen}}})
		if res := handlers[pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES](s, payload); res.err != nil {
			t.Fatal(res.err)
		}
	}
	update(1, 4) // attached
	if s.mergeDecisions[2] == nil {
		t.Fatal("decision dropped when the range joined its attach group")
	}
	update(0, 5) // detached: a group of its own again
	if d := s.mergeDecisions[2]; d != nil {
		t.Fatalf("decision %v kept after the range left its attach group", d)
	}
}

// TestAttachGap: the rules an attach is refused (before the freeze) or
// aborted (at the decision) by, and co-location. Table-driven, pure.
func TestAttachGap(t *testing.T) {
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	g := &pb.RangeDescriptor{RangeId: 1, Table: anchorPrefix + "1", GroupId: 1, Replicas: reps}
	r := &pb.RangeDescriptor{RangeId: 5, Table: "t", Replicas: reps}
	ok := attachInput{tableRanges: 1, groupRanges: 1, anchorLive: true, spans: 3, maxSpans: 4, whole: true, canAttach: func(string) bool { return true }}
	with := func(f func(*attachInput, *pb.RangeDescriptor)) (attachInput, *pb.RangeDescriptor) {
		in, d := ok, proto.Clone(r).(*pb.RangeDescriptor)
		f(&in, d)
		return in, d
	}
	for _, tc := range []struct {
		name string
		edit func(*attachInput, *pb.RangeDescriptor)
		want string // "" fits
	}{
		{"fits", func(*attachInput, *pb.RangeDescriptor) {}, ""},
		{"an anchor's range", func(_ *attachInput, d *pb.RangeDescriptor) { d.Table = anchorPrefix + "5" }, "anchor's"},
		{"a span of a group", func(_ *attachInput, d *pb.RangeDescriptor) { d.GroupId = 9 }, "serves"},
		{"a group of several", func(in *attachInput, _ *pb.RangeDescriptor) { in.groupRanges = 2 }, "serves 2 ranges"},
		{"a split table", func(in *attachInput, d *pb.RangeDescriptor) { in.tableRanges, d.End = 2, "m" }, "table has 2 ranges"},
		{"anchor gone", func(in *attachInput, _ *pb.RangeDescriptor) { in.anchorLive = false }, "no live anchor"},
		{"group full", func(in *attachInput, _ *pb.RangeDescriptor) { in.spans = 4 }, "full"},
		{"a server unfit", func(in *attachInput, _ *pb.RangeDescriptor) { in.whole = false }, "does not fit"},
		{"no attach_spans", func(in *attachInput, _ *pb.RangeDescriptor) {
			in.canAttach = func(s string) bool { return s != "b" }
		}, "server b does not announce attach_spans"},
	} {
		in, d := with(tc.edit)
		err := attachGap(d, g, in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want nil", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrAttachUnfit) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrAttachUnfit saying %q", tc.name, err, tc.want)
		}
	}
	if err := colocationExact(g, r); err != nil {
		t.Errorf("co-located: %v", err)
	}
	elsewhere := proto.Clone(r).(*pb.RangeDescriptor)
	elsewhere.Replicas[2].ServerId = "d"
	if err := colocationExact(g, elsewhere); !errors.Is(err, ErrNotColocated) || !errors.Is(err, ErrAttachUnfit) {
		t.Errorf("a replica on d, outside the group: %v, want ErrNotColocated", err)
	}
}

// TestAttach: an attach of a table's only range freezes it, records
// COMMIT naming the group, asks the group's leader to attach it with the
// freeze, and records it a span of the group (generation + 1, the group's
// leader, its freeze forgotten) with a group-join event; anchor 0 picks
// the anchor group.
func TestAttach(t *testing.T) {
	for _, pick := range []bool{false, true} {
		t.Run(fmt.Sprintf("pick=%v", pick), func(t *testing.T) {
			s, ids, w, beat := attachMaster(t, true)
			own, anchor := ids["own"], ids["anchor"]
			before, _ := s.rangeDesc(own)
			named := anchor
			if pick {
				named = 0
			}
			if err := s.ops.claim(own); err != nil {
				t.Fatal(err)
			}
			beat()
			got, err := s.attach(context.Background(), own, named, causeOperator, "", nil)
			s.ops.release(own)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{fmt.Sprintf("freeze r%d", own), fmt.Sprintf("attach r%d to %d", own, anchor)}; !slices.Equal(w.events(), want) {
				t.Fatalf("asked %v, want %v", w.events(), want)
			}
			d, _ := s.rangeDesc(own)
			if rangegroup.GroupOf(d) != anchor || d.GetGeneration() != before.GetGeneration()+1 || !proto.Equal(d, got) {
				t.Fatalf("map after the attach: %v (answer %v), want a span of %d at generation %d", d, got, anchor, before.GetGeneration()+1)
			}
			if dec := decisionOf(s, own); dec.GetOutcome() != commit || dec.GetAttachGroup() != anchor {
				t.Fatalf("decision %v, want COMMIT naming %d", dec, anchor)
			}
			if f := s.reports.frozenAt(own); f != 0 || s.leaderOf(own) != "a" {
				t.Fatalf("reports: frozen at %d, leader %q; want not frozen, led by a", f, s.leaderOf(own))
			}
			waitUntil(t, 5*time.Second, "the group-join event", func() bool { return hasEvent(s, pb.EventKind_EVENT_KIND_GROUP_JOIN, own) })
			if err := s.ops.claim(own, anchor); err != nil {
				t.Errorf("claims not released: %v", err)
			}
		})
	}
}

func hasEvent(s *Server, kind pb.EventKind, id uint64) (found bool) {
	s.fsm.read(func(st *state) {
		for _, e := range st.events {
			if e.GetKind() == kind && slices.Contains(e.GetRangeIds(), id) {
				found = true
			}
		}
	})
	return found
}

// TestAttachAborts: an attach whose freeze a replica does not apply in
// time, or that is no longer fit at the decision (a server stopped
// announcing attach_spans after the freeze), records ABORT naming the
// group, unfreezes the range and fails with ErrMergeAborted; the range
// stays a group of its own. A range that is not its table's only range
// is refused before anything is asked.
func TestAttachAborts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(s *Server, w *attachWorld)
	}{
		{"a replica short of the freeze", func(_ *Server, w *attachWorld) { w.lag = "c" }},
		{"unfit at the decision", func(s *Server, w *attachWorld) {
			w.onFreeze = func() { s.reports.setAttachSpans("b", false) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ids, w, beat := attachMaster(t, true)
			own, anchor := ids["own"], ids["anchor"]
			beat()
			tc.setup(s, w)
			// Claimed as its callers do: resumeMerges would otherwise
			// take the freeze for one whose master died.
			if err := s.ops.claim(own, anchor); err != nil {
				t.Fatal(err)
			}
			_, err := s.attach(context.Background(), own, anchor, causeOperator, "", nil)
			s.ops.release(own, anchor)
			if !errors.Is(err, ErrMergeAborted) {
				t.Fatalf("attach: %v, want ErrMergeAborted", err)
			}
			if want := []string{fmt.Sprintf("freeze r%d", own), fmt.Sprintf("unfreeze r%d", own)}; !slices.Equal(w.events(), want) {
				t.Fatalf("asked %v, want %v", w.events(), want)
			}
			if dec := decisionOf(s, own); dec.GetOutcome() != abort || dec.GetAttachGroup() != anchor {
				t.Fatalf("decision %v, want ABORT naming %d", dec, anchor)
			}
			if g := groupIn(t, s, own); g != own || s.reports.frozenAt(own) != 0 {
				t.Fatalf("range in group %d, frozen at %d; want its own, unfrozen", g, s.reports.frozenAt(own))
			}
		})
	}
	s, ids, w, beat := attachMaster(t, true)
	beat()
	if _, err := s.attach(context.Background(), ids["split"], ids["anchor"], causeOperator, "", nil); !errors.Is(err, ErrAttachUnfit) || len(w.events()) != 0 {
		t.Fatalf("attach of a split table's range: %v, asked %v; want ErrAttachUnfit, nothing", err, w.events())
	}
}

// TestResumeAttach: a frozen range that is its table's only range is
// resumed as an attach: a COMMIT naming a group is carried out from
// AttachSpan (also when the AttachSpan applied and its record was lost:
// asked again, it answers the span), an ABORT unfreezes, and a freeze
// with no decision (its master died before deciding) is decided ABORT
// and unfrozen. Fails without resumeAlone (resumeMerges skipped a frozen
// range with no left neighbour: frozen for good).
func TestResumeAttach(t *testing.T) {
	for _, tc := range []struct {
		name     string
		decision pb.MergeOutcome // 0: none
		applied  bool            // the AttachSpan applied, not recorded
		want     []string        // after the freeze, with %d the range and the anchor
		inGroup  bool
	}{
		{"commit", commit, false, []string{"attach r%d to %d"}, true},
		{"commit applied", commit, true, []string{"attach r%d to %d again"}, true},
		{"abort", abort, false, []string{"unfreeze r%d"}, false},
		{"no decision", 0, false, []string{"unfreeze r%d"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ids, w, _ := attachMaster(t, true)
			own, anchor := ids["own"], ids["anchor"]
			w.mu.Lock()
			w.next++
			index := w.next
			if tc.applied {
				w.attached[own] = anchor
			} else {
				w.frozen[own] = index
			}
			w.mu.Unlock()
			if tc.decision != 0 {
				mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_MERGE_DECISION, &pb.MergeDecisionCommand{Decision: &pb.MergeDecision{
					RightRangeId: own, FreezeIndex: index, Outcome: tc.decision, AttachGroup: anchor,
				}})
			}
			s.reports.observeFreeze(own, 0, true, index, index)
			waitUntil(t, 10*time.Second, "the freeze resumed", func() bool { return s.reports.frozenAt(own) == 0 })
			var want []string
			for _, f := range tc.want {
				if strings.Count(f, "%d") == 1 {
					want = append(want, fmt.Sprintf(f, own))
				} else {
					want = append(want, fmt.Sprintf(f, own, anchor))
				}
			}
			if got := w.events(); !slices.Equal(got, want) {
				t.Fatalf("asked %v, want %v", got, want)
			}
			if inGroup := groupIn(t, s, own) == anchor; inGroup != tc.inGroup {
				t.Fatalf("range a span of the anchor group: %v, want %v", inGroup, tc.inGroup)
			}
			if dec := decisionOf(s, own); tc.decision == 0 && (dec.GetOutcome() != abort || dec.GetFreezeIndex() != index) {
				t.Fatalf("decision %v, want ABORT at %d", dec, index)
			}
		})
	}
}

// TestGroupTablesRefusedWithoutTableGroups: GroupTables answers
// FailedPrecondition on a master without --table-groups, and asks
// nothing.
func TestGroupTablesRefusedWithoutTableGroups(t *testing.T) {
	s, _, w, _ := attachMaster(t, false)
	_, err := (&service{s: s}).GroupTables(context.Background(), &pb.GroupTablesRequest{})
	if status.Code(err) != codes.FailedPrecondition || len(w.events()) != 0 {
		t.Fatalf("GroupTables without --table-groups: %v, asked %v; want FailedPrecondition, nothing", err, w.events())
	}
}

// TestGroupTables: GroupTables attaches the table that is one cold range
// in a group of its own and answers the split table's ranges skipped,
// with the reason; a second call finds nothing to do.
func TestGroupTables(t *testing.T) {
	s, ids, w, beat := attachMaster(t, true)
	beat()
	resp, err := (&service{s: s}).GroupTables(context.Background(), &pb.GroupTablesRequest{BudgetMs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.GetAttachedRangeIds(), []uint64{ids["own"]}) || len(resp.GetRemainingRangeIds()) != 0 {
		t.Fatalf("attached %v, remaining %v; want [%d], none (asked %v)", resp.GetAttachedRangeIds(), resp.GetRemainingRangeIds(), ids["own"], w.events())
	}
	var skipped []string
	for _, sk := range resp.GetSkipped() {
		skipped = append(skipped, fmt.Sprintf("%d: %s", sk.GetRangeId(), sk.GetReason()))
	}
	slices.Sort(skipped)
	if want := []string{fmt.Sprintf("%d: its table is split into 2 ranges", ids["split"]), "90: its table is split into 2 ranges"}; !slices.Equal(skipped, want) {
		t.Fatalf("skipped %v, want %v", skipped, want)
	}
	beat()
	resp, err = (&service{s: s}).GroupTables(context.Background(), &pb.GroupTablesRequest{BudgetMs: 1000})
	if err != nil || len(resp.GetAttachedRangeIds())+len(resp.GetRemainingRangeIds()) != 0 {
		t.Fatalf("second call: %v %v, want nothing to do", resp, err)
	}
}

// TestGroupPlan: which user ranges GroupTables attaches, asks about again
// or skips, and why. Pure.
func TestGroupPlan(t *testing.T) {
	cold := &scheduler.Load{EntitiesPerSec: 1, Bytes: 100}
	reps := []scheduler.Replica{{Server: "a"}, {Server: "b"}, {Server: "c"}}
	snap := &scheduler.Snapshot{Ranges: []*scheduler.Range{
		{ID: 1, Group: 1, TableID: 1, Table: anchorPrefix + "1", Replicas: reps, Anchor: true},
		{ID: 2, Group: 1, TableID: 2, Table: "inanchor", Replicas: reps, Load: cold},
		{ID: 3, Group: 3, TableID: 3, Table: "own", Replicas: reps, Load: cold},
		{ID: 4, Group: 4, TableID: 4, Table: "split", Replicas: reps, Load: cold, End: "m"},
		{ID: 5, Group: 5, TableID: 4, Table: "split", Replicas: reps, Load: cold, Start: "m"},
		{ID: 6, Group: 6, TableID: 6, Table: "hot", Replicas: reps, Load: &scheduler.Load{EntitiesPerSec: 500}},
		{ID: 7, Group: 7, TableID: 7, Table: "shared", Replicas: reps, Load: cold},
		{ID: 8, Group: 7, TableID: 8, Table: "sharer", Replicas: reps, Load: cold},
		{ID: 9, Group: 9, TableID: 9, Table: "frozen", Replicas: reps, Load: cold, Frozen: true},
		{ID: 10, Group: 10, TableID: 10, Table: "unreported", Replicas: reps},
		{ID: 11, Group: 11, TableID: 11, Table: "old", Replicas: []scheduler.Replica{{Server: "a"}, {Server: "old"}, {Server: "c"}}, Load: cold},
		// A server that has not reported to this master yet (it took the
		// lead a moment ago): asked again, not skipped.
		{ID: 12, Group: 12, TableID: 12, Table: "unheard", Replicas: []scheduler.Replica{{Server: "a"}, {Server: "silent"}, {Server: "c"}}, Load: cold},
	}}
	cands, remaining, skipped := groupPlan(groupPlanIn{Snap: snap, MergeLoad: 100, MergeBytes: 1 << 20,
		AttachSpans: func(s string) (ok, said bool) { return s != "old" && s != "silent", s != "silent" }})
	var ids []uint64
	for _, r := range cands {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []uint64{3}) || !slices.Equal(remaining, []uint64{9, 10, 12}) {
		t.Fatalf("candidates %v, remaining %v; want [3], [9 10 12]", ids, remaining)
	}
	want := map[uint64]string{4: "split into 2", 5: "split into 2", 6: "hot or large", 7: "serves 2 ranges", 8: "a span of Raft group 7", 11: "server old does not announce attach_spans"}
	if len(skipped) != len(want) {
		t.Fatalf("skipped %v, want %v", skipped, want)
	}
	for _, sk := range skipped {
		if !strings.Contains(sk.GetReason(), want[sk.GetRangeId()]) || want[sk.GetRangeId()] == "" {
			t.Errorf("range %d skipped: %q, want %q", sk.GetRangeId(), sk.GetReason(), want[sk.GetRangeId()])
		}
	}
}

// TestAttachHome: an attach takes the fullest anchor group with room
// whose every server fits, never one short of a server (a new table may
// join that one) nor one with another replica count; with no group with
// room, or only groups a server of which is away or unfit now, it is
// asked again (ensureAnchor founds one; the server comes back); it is
// skipped only when no group can ever take it. Pure.
func TestAttachHome(t *testing.T) {
	servers := []scheduler.Server{{ID: "a", Live: true}, {ID: "b", Live: true}, {ID: "c", Live: true}, {ID: "d"}}
	reps := func(ids ...string) []scheduler.Replica {
		var out []scheduler.Replica
		for _, id := range ids {
			out = append(out, scheduler.Replica{Server: id})
		}
		return out
	}
	anchorOf := func(id uint64, r []scheduler.Replica) *scheduler.Range {
		return &scheduler.Range{ID: id, Group: id, TableID: id, Table: fmt.Sprintf("%s%d", anchorPrefix, id), Replicas: r, Leader: "a", Anchor: true}
	}
	span := func(id, g uint64) *scheduler.Range {
		return &scheduler.Range{ID: id, Group: g, TableID: id, Table: "t", Replicas: reps("a", "b", "c"), Load: &scheduler.Load{}}
	}
	r := &pb.RangeDescriptor{RangeId: 50, Table: "own", Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
	in := func(ranges ...*scheduler.Range) homeGroupInput {
		return homeGroupInput{Snap: &scheduler.Snapshot{Servers: servers, Ranges: ranges}, CanShare: func(string) bool { return true },
			MaxSpans: 3, MergeLoad: 100, MergeSize: 1 << 20, Started: func(uint64) bool { return true }}
	}
	for _, tc := range []struct {
		name   string
		in     homeGroupInput
		want   uint64
		retry  bool
		reason string
	}{
		{"the fullest whole group", in(anchorOf(1, reps("a", "b", "c")), anchorOf(2, reps("a", "b", "c")), span(3, 2)), 2, false, ""},
		{"not one short of a server", in(anchorOf(1, reps("a", "b", "d")), anchorOf(2, reps("a", "b", "c"))), 2, false, ""},
		{"only short ones: asked again", in(anchorOf(1, reps("a", "b", "d"))), 0, true, "live and fit now"},
		{"another replica count", in(anchorOf(1, reps("a", "b"))), 0, false, "as many replicas"},
		{"no attach_spans", func() homeGroupInput {
			i := in(anchorOf(1, reps("a", "b", "c")))
			i.CanShare = func(s string) bool { return s != "b" }
			return i
		}(), 0, false, "announces table_groups and attach_spans"},
		{"full: wait for a new one", in(anchorOf(1, reps("a", "b", "c")), span(3, 1), span(4, 1)), 0, true, "being founded"},
	} {
		got, why, retry := attachHome(tc.in, r)
		if got != tc.want || retry != tc.retry || !strings.Contains(why, tc.reason) {
			t.Errorf("%s: %d %q retry=%v, want %d %q retry=%v", tc.name, got, why, retry, tc.want, tc.reason, tc.retry)
		}
	}
}
