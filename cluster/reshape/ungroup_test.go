package reshape

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/grpc/codes"

	"tablestore/cluster/clustertest"
	"tablestore/internal/masterclient"
	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestUngroupTables: the downgrade from --table-groups (ctl
// ungroup-tables). Tables created in an anchor group take writes; the
// master refuses UngroupTables while it runs with the flag; restarted
// without it, UngroupTables (called until it answers that nothing is
// left) takes every table's range out into a Raft group of its own,
// served as such by every replica, and deletes the anchors, which leave
// the map and the servers; every acknowledged write of every table reads
// back exactly once, and a table created afterwards is a group of its own.
func TestUngroupTables(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, mc, anchor := startTableGroups(t)
	sc := clustertest.ServiceClient(t, c, 0)
	const tables = 6
	names := []string{"warmup0"}
	clients := []*aztables.Client{sc.NewClient("warmup0")}
	for i := range tables {
		name := fmt.Sprintf("grouped%d", i)
		names = append(names, name)
		clients = append(clients, clustertest.NewTable(t, sc, name))
	}
	m := clustertest.PartitionMap(t, mc)
	grouped, wasGrouped := 0, map[string]bool{}
	for _, name := range names {
		if d := spanOf(m, name); d != nil && rangegroup.GroupOf(d) != d.GetRangeId() {
			grouped++
			wasGrouped[name] = true
		}
	}
	if grouped < 2 {
		t.Fatalf("%d of %d tables in a shared group, want at least 2", grouped, len(names))
	}
	works := make([]*clustertest.Workload, len(clients))
	for i, tc := range clients {
		works[i] = clustertest.StartWorkload(t, tc, 1, clustertest.SpreadKeys)
	}
	if _, err := ungroup(mc); rpcerr.Parse(err).Code != codes.FailedPrecondition {
		t.Fatalf("UngroupTables with --table-groups on: %v, want FailedPrecondition", err)
	}
	if err := c.StopMaster(0); err != nil {
		t.Fatal(err)
	}
	c.Masters[0].Config.TableGroups = false
	if err := c.RestartMaster(0); err != nil {
		t.Fatal(err)
	}
	var detached int
	var deleted []string
	clustertest.WaitFor(t, 60*time.Second, "UngroupTables answering that nothing is left", func() bool {
		resp, err := ungroup(mc)
		if err != nil {
			t.Logf("UngroupTables: %v", err)
			return false
		}
		detached += len(resp.GetDetachedRangeIds())
		deleted = append(deleted, resp.GetAnchorsDeleted()...)
		return len(resp.GetRemainingRangeIds()) == 0 && len(resp.GetAnchorsRemaining()) == 0
	})
	t.Logf("%d ranges detached, anchors deleted %v", detached, deleted)
	if detached < grouped || len(deleted) == 0 {
		t.Fatalf("%d ranges detached (want %d), anchors deleted %v", detached, grouped, deleted)
	}
	// Idempotent: a call with nothing left does nothing.
	if resp, err := ungroup(mc); err != nil || len(resp.GetDetachedRangeIds())+len(resp.GetRemainingRangeIds())+len(resp.GetAnchorsDeleted())+len(resp.GetAnchorsRemaining()) != 0 {
		t.Fatalf("UngroupTables again: %v, %v; want nothing done or left", resp, err)
	}
	time.Sleep(time.Second) // writes to the tables in their own groups
	m = clustertest.PartitionMap(t, mc)
	for _, name := range names {
		d := spanOf(m, name)
		if d == nil || rangegroup.GroupOf(d) != d.GetRangeId() {
			t.Fatalf("table %s: range %v, want one range, a group of its own", name, d)
		}
		if wasGrouped[name] {
			// Detached: served as a group of its own by every replica.
			checkOneGroup(t, c, d, d.GetRangeId())
		}
	}
	for _, tb := range m.GetTables() {
		if strings.HasPrefix(tb.GetName(), "_groups/") {
			t.Fatalf("anchor %s still in the map", tb.GetName())
		}
	}
	clustertest.WaitFor(t, 30*time.Second, fmt.Sprintf("no server serving anchor range %d", anchor), func() bool {
		for _, n := range c.Servers {
			if _, err := n.Server.Service().RangeInfo(context.Background(), &pb.RangeInfoRequest{RangeId: anchor}); err == nil {
				return false
			}
		}
		return true
	})
	for i, w := range works {
		acked := w.Halt()
		if len(acked) == 0 {
			t.Fatalf("table %s: no write acknowledged", names[i])
		}
		clustertest.VerifyExactlyOnce(t, clients[i], acked)
	}
	after := "aftertheungroup"
	clustertest.NewTable(t, sc, after)
	if d := spanOf(clustertest.PartitionMap(t, mc), after); d == nil || rangegroup.GroupOf(d) != d.GetRangeId() {
		t.Fatalf("table created after the ungroup: %v, want a group of its own", d)
	}
}

// ungroup calls UngroupTables once, with a budget of 2 s.
func ungroup(mc *masterclient.Client) (*pb.UngroupTablesResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var resp *pb.UngroupTablesResponse
	err := mc.Call(ctx, func(ctx context.Context, c pb.MasterServiceClient) error {
		var err error
		resp, err = c.UngroupTables(ctx, &pb.UngroupTablesRequest{BudgetMs: 2000})
		return err
	})
	return resp, err
}
