package ctl

import (
	"context"
	"strings"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestRangesMarkAnchors: ctl ranges marks an anchor range (the reserved
// "_groups/" table's range that names its group) and gives every range
// its group's span count, the anchor included, in the table and in JSON.
// A reserved-looking name whose range is not its group's namesake, and a
// user table's range, are not anchors.
func TestRangesMarkAnchors(t *testing.T) {
	reps := []*pb.Replica{{ServerId: "ps1"}}
	f := &fakeMaster{pm: &pb.PartitionMap{
		Tables: []*pb.Table{{Name: "_groups/7", TableId: 3}, {Name: "a", TableId: 4}, {Name: "b", TableId: 5}, {Name: "c", TableId: 6}},
		Ranges: []*pb.RangeDescriptor{
			{RangeId: 7, GroupId: 7, Table: "_groups/7", TableId: 3, Generation: 2, Replicas: reps},
			{RangeId: 8, GroupId: 7, Table: "a", TableId: 4, Generation: 2, Replicas: reps},
			{RangeId: 9, GroupId: 7, Table: "b", TableId: 5, Generation: 2, Replicas: reps},
			{RangeId: 10, Table: "c", TableId: 6, Generation: 1, Replicas: reps},
		},
	}}
	addr := startFake(t, f)
	out, _, err := runCtl(t, context.Background(), "--master", addr, "ranges")
	if err != nil {
		t.Fatal(err)
	}
	// RANGE, GROUP (and "anchor"), SPANS, TABLE by range.
	want := map[string]string{"7": "7 7 anchor 3 _groups/7", "8": "8 7 3 a", "9": "9 7 3 b", "10": "10 10 1 c"}
	rows := strings.Split(strings.TrimSpace(out), "\n")[1:]
	for _, l := range rows {
		f := strings.Fields(l)
		n := 4
		if len(f) > 2 && f[2] == "anchor" {
			n = 5
		}
		if got := strings.Join(f[:n], " "); got != want[f[0]] {
			t.Errorf("row %q begins %q, want %q", l, got, want[f[0]])
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%d rows, want %d:\n%s", len(rows), len(want), out)
	}
	out, _, err = runCtl(t, context.Background(), "--master", addr, "ranges", "--json")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range jsonObjects(t, out) {
		anchor := o["range_id"] == 7.0
		spans := 3.0
		if o["range_id"] == 10.0 {
			spans = 1
		}
		if o["anchor"] != anchor || o["group_spans"] != spans {
			t.Errorf("range %v: anchor %v, group_spans %v; want %v, %v", o["range_id"], o["anchor"], o["group_spans"], anchor, spans)
		}
	}
}
