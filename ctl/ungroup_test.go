package ctl

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// scripted answers a fake master's calls from a script, one answer per
// call (the last repeated), or refuses every call (FailedPrecondition),
// and records each call's budget.
type scripted[T any] struct {
	mu      sync.Mutex
	answers []T
	calls   int
	budgets []uint32
	refuse  bool
}

func (s *scripted[T]) next(budget uint32, refusal string) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse {
		var none T
		return none, rpcerr.New(codes.FailedPrecondition, "", refusal, nil)
	}
	s.budgets = append(s.budgets, budget)
	a := s.answers[min(s.calls, len(s.answers)-1)]
	s.calls++
	return a, nil
}

// ungroupMaster answers UngroupTables from a script.
type ungroupMaster struct {
	pb.UnimplementedMasterServiceServer
	scripted[*pb.UngroupTablesResponse]
}

func (m *ungroupMaster) UngroupTables(_ context.Context, req *pb.UngroupTablesRequest) (*pb.UngroupTablesResponse, error) {
	return m.next(req.GetBudgetMs(), "master: this master runs with --table-groups")
}

// TestUngroupTablesCommand: ctl ungroup-tables calls the master until it
// answers that nothing is left, one line (or JSON object) per call, each
// asking for a third of --timeout; --wait 0 makes one call; the master's
// refusal is the command's error.
func TestUngroupTablesCommand(t *testing.T) {
	script := []*pb.UngroupTablesResponse{
		{DetachedRangeIds: []uint64{3, 4}, RemainingRangeIds: []uint64{5}, AnchorsRemaining: []string{"_groups/1"}},
		{DetachedRangeIds: []uint64{5}, AnchorsDeleted: []string{"_groups/1"}},
	}
	m := &ungroupMaster{scripted: scripted[*pb.UngroupTablesResponse]{answers: script}}
	addr := serveMaster(t, m)
	out, _, err := runCtl(t, context.Background(), "--master", addr, "--timeout", "3s", "ungroup-tables")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "detached 2 ranges") || !strings.Contains(lines[0], "left: 1 ranges [5], anchors [_groups/1]") ||
		!strings.Contains(lines[1], "no anchor left") {
		t.Fatalf("output:\n%s", out)
	}
	if len(m.budgets) != 2 || m.budgets[0] != 1000 {
		t.Errorf("budgets asked %v, want two of 1000 ms (a third of --timeout)", m.budgets)
	}

	m = &ungroupMaster{scripted: scripted[*pb.UngroupTablesResponse]{answers: script}}
	addr = serveMaster(t, m)
	out, _, err = runCtl(t, context.Background(), "--master", addr, "ungroup-tables", "--wait", "0", "--json")
	if err == nil || m.calls != 1 {
		t.Fatalf("--wait 0 with ranges left: %v after %d calls, want an error after one", err, m.calls)
	}
	objs := jsonObjects(t, out)
	if len(objs) != 1 || keysOf(objs[0]) != "anchors_deleted,anchors_remaining,detached_range_ids,done,remaining_range_ids" || objs[0]["done"] != false {
		t.Fatalf("JSON: %v", objs)
	}

	addr = serveMaster(t, &ungroupMaster{scripted: scripted[*pb.UngroupTablesResponse]{refuse: true}})
	if _, _, err := runCtl(t, context.Background(), "--master", addr, "ungroup-tables"); err == nil || !strings.Contains(err.Error(), "--table-groups") {
		t.Fatalf("refused: %v, want the master's refusal", err)
	}
}
