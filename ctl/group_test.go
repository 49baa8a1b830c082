package ctl

import (
	"context"
	"strings"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// groupMaster answers GroupTables from a script.
type groupMaster struct {
	pb.UnimplementedMasterServiceServer
	scripted[*pb.GroupTablesResponse]
}

func (m *groupMaster) GroupTables(_ context.Context, req *pb.GroupTablesRequest) (*pb.GroupTablesResponse, error) {
	return m.next(req.GetBudgetMs(), "master: this master runs without --table-groups")
}

// TestGroupTablesCommand: ctl group-tables calls the master until nothing
// remains, one line per call (plus one per skipped range, with its
// reason) or one JSON object, each call asking for a third of --timeout;
// --wait 0 makes one call; the master's refusal is the command's error.
func TestGroupTablesCommand(t *testing.T) {
	script := []*pb.GroupTablesResponse{
		{AttachedRangeIds: []uint64{3, 4}, RemainingRangeIds: []uint64{5}, Skipped: []*pb.SkippedRange{{RangeId: 7, Reason: "its table is split into 2 ranges"}}},
		{AttachedRangeIds: []uint64{5}, Skipped: []*pb.SkippedRange{{RangeId: 7, Reason: "its table is split into 2 ranges"}}},
	}
	m := &groupMaster{scripted: scripted[*pb.GroupTablesResponse]{answers: script}}
	addr := serveMaster(t, m)
	out, _, err := runCtl(t, context.Background(), "--master", addr, "--timeout", "3s", "group-tables")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "attached 2 ranges, skipped 1; left: 1 ranges [5]") ||
		!strings.Contains(lines[1], "skipped range 7: its table is split into 2 ranges") || !strings.Contains(lines[2], "no table left") {
		t.Fatalf("output:\n%s", out)
	}
	if len(m.budgets) != 2 || m.budgets[0] != 1000 {
		t.Errorf("budgets asked %v, want two of 1000 ms (a third of --timeout)", m.budgets)
	}

	m = &groupMaster{scripted: scripted[*pb.GroupTablesResponse]{answers: script}}
	addr = serveMaster(t, m)
	out, _, err = runCtl(t, context.Background(), "--master", addr, "group-tables", "--wait", "0", "--json")
	if err == nil || m.calls != 1 {
		t.Fatalf("--wait 0 with ranges left: %v after %d calls, want an error after one", err, m.calls)
	}
	objs := jsonObjects(t, out)
	if len(objs) != 1 || keysOf(objs[0]) != "attached_range_ids,done,remaining_range_ids,skipped" || objs[0]["done"] != false {
		t.Fatalf("JSON: %v", objs)
	}

	addr = serveMaster(t, &groupMaster{scripted: scripted[*pb.GroupTablesResponse]{refuse: true}})
	if _, _, err := runCtl(t, context.Background(), "--master", addr, "group-tables"); err == nil || !strings.Contains(err.Error(), "--table-groups") {
		t.Fatalf("refused: %v, want the master's refusal", err)
	}
}
