package master

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestUngroupPlan: the ranges UngroupTables takes out are the user ranges
// served by an anchor's group (added, pending their add, or split in it),
// not the anchor itself nor a range of a group that no anchor founded;
// the anchors it may delete are those whose groups serve nothing else.
func TestUngroupPlan(t *testing.T) {
	anchor := func(id uint64) *pb.RangeDescriptor {
		return &pb.RangeDescriptor{RangeId: id, GroupId: id, Table: fmt.Sprintf("_groups/%d", id), Generation: 2}
	}
	span := func(id, group, gen uint64) *pb.RangeDescriptor {
		return &pb.RangeDescriptor{RangeId: id, GroupId: group, Table: fmt.Sprintf("t%d", id), Generation: gen}
	}
	ids := func(ds []*pb.RangeDescriptor) string {
		var out []uint64
		for _, d := range ds {
			out = append(out, d.GetRangeId())
		}
		return fmt.Sprint(out)
	}
	for _, tc := range []struct {
		name        string
		ranges      []*pb.RangeDescriptor
		spans, empt string
	}{
		{"nothing grouped", []*pb.RangeDescriptor{span(3, 0, 1), span(4, 4, 2)}, "[]", "[]"},
		{"an anchor alone", []*pb.RangeDescriptor{anchor(1), span(3, 0, 1)}, "[]", "[1]"},
		{"spans of two anchors, one pending its add", []*pb.RangeDescriptor{
			anchor(1), anchor(2), span(5, 1, 2), span(3, 1, 2), span(4, 2, 1), span(6, 0, 1)}, "[3 4 5]", "[]"},
		{"one anchor emptied", []*pb.RangeDescriptor{anchor(1), anchor(2), span(5, 2, 3)}, "[5]", "[1]"},
		{"a user table's group of two spans", []*pb.RangeDescriptor{span(3, 3, 2), span(7, 3, 2)}, "[]", "[]"},
		{"a reserved name that is no group's namesake", []*pb.RangeDescriptor{
			{RangeId: 8, GroupId: 3, Table: "_groups/8", Generation: 2}, span(3, 3, 2)}, "[]", "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans, empty := ungroupPlan(tc.ranges)
			if ids(spans) != tc.spans || ids(empty) != tc.empt {
				t.Errorf("spans %s, empty anchors %s; want %s, %s", ids(spans), ids(empty), tc.spans, tc.empt)
			}
		})
	}
}

// TestUngroupTablesRefusedWithTableGroups: a master running with
// --table-groups refuses UngroupTables (FailedPrecondition, the message
// naming the flag) and changes nothing.
func TestUngroupTablesRefusedWithTableGroups(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("table-groups=%v", on), func(t *testing.T) {
			_, s := startSoloMaster(t)
			t.Cleanup(func() { s.Close() })
			waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
			s.cfg.TableGroups = on
			res, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Anchor: true, Replicas: []*pb.Replica{{ServerId: "a"}}})
			if err != nil {
				t.Fatal(err)
			}
			a := res.ranges[0]
			resp, err := (&service{s: s}).UngroupTables(context.Background(), &pb.UngroupTablesRequest{BudgetMs: 1})
			info := rpcerr.Parse(err)
			if on {
				if info.Code != codes.FailedPrecondition || !strings.Contains(info.Message, "--table-groups") {
					t.Fatalf("with the flag: %v, %v; want FailedPrecondition naming --table-groups", resp, err)
				}
				if _, ok := s.rangeDesc(a.GetRangeId()); !ok {
					t.Fatal("the refused call changed the map")
				}
				return
			}
			// Without the flag: the anchor, whose group serves nothing
			// else, is deleted (its freeze, with no server to answer, is
			// left to resumeDeletions).
			if err != nil || fmt.Sprint(resp.GetAnchorsDeleted()) != fmt.Sprintf("[%s]", a.GetTable()) || len(resp.GetAnchorsRemaining()) != 0 {
				t.Fatalf("without the flag: %v, %v; want the anchor %s deleted", resp, err, a.GetTable())
			}
			if _, ok := s.rangeDesc(a.GetRangeId()); ok {
				t.Fatal("the deleted anchor is still in the map")
			}
		})
	}
}
