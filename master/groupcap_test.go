package master

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// capGroupFake is a partition server of anchor group `group`, led by
// server a: AddSpan refuses GROUP_FULL while the group is full and the
// request carries a cap, as the group's apply does (fsm.ErrGroupFull);
// DetachRange answers the range as a group of its own.
type capGroupFake struct {
	pb.UnimplementedPartitionServiceServer
	id string
	g  *capGroupState
}

type capGroupState struct {
	mu    sync.Mutex
	group uint64
	full  bool
	log   []string // "add cap=256 refused", "add cap=0", "detach 2"
}

func (f *capGroupFake) AddSpan(_ context.Context, req *pb.AddSpanRequest) (*pb.AddSpanResponse, error) {
	f.g.mu.Lock()
	defer f.g.mu.Unlock()
	if f.id != "a" {
		return nil, notLeader("a")()
	}
	if f.g.full && req.GetMaxSpans() > 0 {
		f.g.log = append(f.g.log, fmt.Sprintf("add cap=%d refused", req.GetMaxSpans()))
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonGroupFull, "group full", nil)
	}
	f.g.log = append(f.g.log, fmt.Sprintf("add cap=%d", req.GetMaxSpans()))
	d := req.GetRange()
	return &pb.AddSpanResponse{Range: &pb.RangeDescriptor{RangeId: d.GetRangeId(), GroupId: f.g.group, Table: d.GetTable(), TableId: d.GetTableId(),
		Generation: 2, Replicas: d.GetReplicas()}}, nil
}

func (f *capGroupFake) DetachRange(_ context.Context, req *pb.DetachRangeRequest) (*pb.DetachRangeResponse, error) {
	f.g.mu.Lock()
	defer f.g.mu.Unlock()
	if f.id != "a" {
		return nil, notLeader("a")()
	}
	f.g.log = append(f.g.log, fmt.Sprintf("detach %d", req.GetRangeId()))
	return &pb.DetachRangeResponse{Range: &pb.RangeDescriptor{RangeId: req.GetRangeId(), Table: "t", TableId: 2, Generation: 3,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}}, nil
}

func (f *capGroupFake) RangeInfo(_ context.Context, req *pb.RangeInfoRequest) (*pb.RangeInfoResponse, error) {
	return &pb.RangeInfoResponse{Status: &pb.RangeStatus{RangeId: req.GetRangeId(), Leader: f.id == "a"}}, nil
}

func (g *capGroupState) events() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.log)
}

// TestAddSpanToFullGroup: the master's add of a new table's range to its
// home group carries the cap (--table-group-spans); a group with room
// stores the span; a full one refuses it (the group's apply counts the
// creates that raced into it), and the master adds it without the cap and
// detaches it into a group of its own, recorded in the map, so the group
// ends with no more spans than the cap allowed and the table is served.
// Before, the add carried no cap and the group grew past it.
func TestAddSpanToFullGroup(t *testing.T) {
	capped := fmt.Sprintf("add cap=%d", DefaultConfig().TableGroupSpans)
	for _, tc := range []struct {
		name      string
		full      bool
		want      []string
		wantGroup bool // the range ends as a span of the anchor's group
	}{
		{"room", false, []string{capped}, true},
		{"full", true, []string{capped + " refused", "add cap=0", "detach 2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := startSoloMaster(t)
			t.Cleanup(func() { s.Close() })
			waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
			g := &capGroupState{full: tc.full}
			reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
			for _, id := range []string{"a", "b", "c"} {
				s.pool.RegisterLocal("local-"+id, &capGroupFake{id: id, g: g})
				if _, err := (&service{s: s}).Heartbeat(context.Background(), &pb.HeartbeatRequest{
					Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "local-" + id, RaftAddr: "127.0.0.1:1"}, Full: true,
				}); err != nil {
					t.Fatal(err)
				}
			}
			res, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Anchor: true, Replicas: reps})
			if err != nil {
				t.Fatal(err)
			}
			g.group = res.ranges[0].GetRangeId()
			res, err = s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: reps, GroupId: g.group})
			if err != nil {
				t.Fatal(err)
			}
			r := res.ranges[0]
			if !pendingAdd(r) {
				t.Fatalf("range %v is not pending its add", r)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			leader, err := s.addSpan(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.events(); !slices.Equal(got, tc.want) {
				t.Fatalf("asked %v, want %v", got, tc.want)
			}
			d, _ := s.rangeDesc(r.GetRangeId())
			if inGroup := rangegroupOf(d) == g.group; inGroup != tc.wantGroup || pendingAdd(d) {
				t.Fatalf("range after the add: %v; want a span of group %d: %v", d, g.group, tc.wantGroup)
			}
			if leader != "a" {
				t.Errorf("leader %q, want a", leader)
			}
		})
	}
}

// TestCreatedEventMarksAnchors: the table-created event of an anchor says
// so (figure anchor 1), a table recorded in an anchor's group names the
// group and its span count, and a table of a group of its own carries no
// figures, as before.
func TestCreatedEventMarksAnchors(t *testing.T) {
	s := &Server{fsm: &fsm{st: newState()}}
	apply := applier(t, s.fsm)
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	anchor := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Anchor: true, Replicas: reps})
	g := anchor.ranges[0].GetRangeId()
	shared := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: reps, GroupId: g})
	own := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "u", Replicas: reps})
	for _, tc := range []struct {
		name    string
		res     *applyResult
		message string
		figures map[string]float64
	}{
		{"anchor", anchor, fmt.Sprintf("anchor _groups/%d created: range %d founds Raft group %d for tables to share", g, g, g), map[string]float64{"anchor": 1, "group_spans": 2}},
		{"table in the anchor's group", shared, fmt.Sprintf("table t created with range %d in anchor group %d (2 spans)", shared.ranges[0].GetRangeId(), g), map[string]float64{"anchor": 0, "group_spans": 2}},
		{"table of its own group", own, fmt.Sprintf("table u created with range %d", own.ranges[0].GetRangeId()), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := s.createdEvent(tc.res, "operator")
			if e.GetKind() != pb.EventKind_EVENT_KIND_TABLE_CREATED || e.GetMessage() != tc.message || fmt.Sprint(e.GetFigures()) != fmt.Sprint(tc.figures) {
				t.Errorf("event %v; want message %q, figures %v", e, tc.message, tc.figures)
			}
		})
	}
}
