package master

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// TestAddSpanToFullGroup: the master's add of a new table's range to its
// home group carries the cap (--table-group-spans); a group with room
// stores the span; a full one refuses it (the group's apply counts the
// creates that raced into it), and the master adds it without the cap and
// detaches it into a group of its own, recorded in the map, so the group
// ends with no more spans than the cap allowed and the table is served.
// Before, the add carried no cap and the group grew past it.
func TestAddSpanToFullGroup(t *testing.T) {
	spanCap := DefaultConfig().TableGroupSpans
	capped := fmt.Sprintf("add cap=%d", spanCap)
	for _, tc := range []struct {
		name      string
		spans     int // the group serves, the anchor included
		want      []string
		wantGroup bool // the range ends as a span of the anchor's group
	}{
		{"room", 1, []string{capped}, true},
		{"full", spanCap, []string{capped + " refused", "add cap=0", "detach r2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := startSoloMaster(t)
			t.Cleanup(func() { s.Close() })
			waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
			g := &fakeGroup{m: s, spans: tc.spans}
			registerFakes(s, g)
			reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
			for _, id := range []string{"a", "b", "c"} {
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
			group := res.ranges[0].GetRangeId()
			res, err = s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: reps, GroupId: group})
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
			if inGroup := rangegroupOf(d) == group; inGroup != tc.wantGroup || pendingAdd(d) {
				t.Fatalf("range after the add: %v; want a span of group %d: %v", d, group, tc.wantGroup)
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
