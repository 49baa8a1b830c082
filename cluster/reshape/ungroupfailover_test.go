package reshape

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/grpc/codes"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/internal/masterclient"
	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// ungroupAtLeader calls UngroupTables with budget as ctl does
// (leaderCall): on an Unavailable answer (not the leader, or no answer)
// it asks the next master, until ctx ends.
func ungroupAtLeader(ctx context.Context, mc *masterclient.Client, budget time.Duration) (*pb.UngroupTablesResponse, error) {
	for {
		conn, i := mc.Conn()
		resp, err := pb.NewMasterServiceClient(conn).UngroupTables(ctx, &pb.UngroupTablesRequest{BudgetMs: uint32(budget.Milliseconds())})
		if err == nil || ctx.Err() != nil || rpcerr.Parse(err).Code != codes.Unavailable {
			return resp, err
		}
		mc.Advance(i)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestUngroupTablesAcrossMasterLeaderChange: ctl ungroup-tables (docs/
// operations.md, "Leaving tables in shared groups") with the master
// leadership moving in the middle of a call. Three masters run with
// --table-groups while six tables are created in anchor groups and
// written; every master is restarted without it in turn; one
// UngroupTables call (a 20 s budget, retried at the next master on
// Unavailable as ctl's leaderCall does) is held after its first detach
// applied in the group and before the master records it
// (master/detach/after-detach), the leading master steps down, and the
// detach goes on. The deposed master must start nothing more and answer
// NotLeader, so the call goes on at the new leader, which rereads the map
// (the held detach unrecorded: asked again, answered by the server as
// done) and finishes: the call answers that nothing is left. Every table
// is then one range, a group of its own on every replica; no anchor is
// left in the map or on a server; every acknowledged write reads back
// exactly once. Fails before: the deposed master went on for its budget,
// detaching spans it could not record (the new leader adopting them from
// heartbeats) and unable to delete the emptied anchor, and answered it
// remaining.
func TestUngroupTablesAcrossMasterLeaderChange(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// Not beside another test: the failpoint is the process's.
	c, err := cluster.Start(cluster.Options{Masters: 3, Servers: 3, Frontends: 1, DataDir: t.TempDir(),
		TuneMaster: func(m *master.Config) {
			m.TableGroups = true
			m.Policy.SplitLoad = 1e9
			m.ServerTimeout = 2 * time.Second
		},
		TuneServer: func(cfg *partitionserver.Config) { cfg.HeartbeatInterval = 200 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	mc := clustertest.MasterClient(t, c)
	anchor := anchorTakingTables(t, c, mc)
	sc := clustertest.ServiceClient(t, c, 0)
	var names []string
	for i := range 6 {
		names = append(names, fmt.Sprintf("grouped%d", i))
	}
	clients := map[string]*aztables.Client{}
	for _, n := range names {
		clients[n] = clustertest.NewTable(t, sc, n)
	}
	// The tables are spans of anchor groups (the master founds a spare
	// anchor as the first fills, and homeGroup picks the one with fewest
	// spans: not all in anchor's).
	m := clustertest.PartitionMap(t, mc)
	anchors := []uint64{anchor}
	for _, d := range m.GetRanges() {
		if strings.HasPrefix(d.GetTable(), "_groups/") && d.GetRangeId() != anchor {
			anchors = append(anchors, d.GetRangeId())
		}
	}
	for _, n := range names {
		d := spanOf(m, n)
		if d == nil || !slices.Contains(anchors, rangegroup.GroupOf(d)) {
			t.Fatalf("table %s: %v, want a span of an anchor group %v", n, d, anchors)
		}
		checkOneGroup(t, c, d, rangegroup.GroupOf(d))
	}
	works := map[string]*clustertest.Workload{}
	for _, n := range names {
		works[n] = clustertest.StartWorkload(t, clients[n], 1, clustertest.SpreadKeys)
	}
	for i := range c.Masters {
		if err := c.StopMaster(i); err != nil {
			t.Fatal(err)
		}
		c.Masters[i].Config.TableGroups = false
		if err := c.RestartMaster(i); err != nil {
			t.Fatal(err)
		}
		clustertest.LeaderOf(t, c)
	}
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	failpoint.Enable("master/detach/after-detach", func() error {
		once.Do(func() { close(reached) })
		<-release
		return nil
	})
	t.Cleanup(func() { failpoint.Disable("master/detach/after-detach") })
	type answer struct {
		resp *pb.UngroupTablesResponse
		err  error
	}
	answered := make(chan answer, 1)
	ctx := clustertest.Context(t, 2*time.Minute)
	go func() {
		resp, err := ungroupAtLeader(ctx, mc, 20*time.Second)
		answered <- answer{resp, err}
	}()
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the call never detached a range")
	}
	old := clustertest.LeaderOf(t, c)
	// A transfer may fail on a connection to a master restarted just
	// before (TimeoutNow: EOF): asked again until another master leads.
	clustertest.WaitFor(t, 20*time.Second, "another master to lead", func() bool {
		if old.IsLeader() {
			if err := old.StepDown(); err != nil {
				t.Logf("step down: %v", err)
			}
		}
		return clustertest.LeaderOf(t, c) != old
	})
	failpoint.Disable("master/detach/after-detach")
	close(release)
	var a answer
	select {
	case a = <-answered:
	case <-ctx.Done():
		t.Fatal("UngroupTables never answered")
	}
	if a.err != nil || len(a.resp.GetRemainingRangeIds()) != 0 || len(a.resp.GetAnchorsRemaining()) != 0 {
		t.Fatalf("UngroupTables across the leader change: %v, %v; want nothing left", a.resp, a.err)
	}
	t.Logf("answered: detached %v, anchors deleted %v", a.resp.GetDetachedRangeIds(), a.resp.GetAnchorsDeleted())
	checkUngrouped(t, c, mc, anchors, names, clients, works)
}

// checkUngrouped checks a finished ungroup: every table of names one
// range, a group of its own on every replica; no anchor in the map, and
// the ranges of anchors on no server; every acknowledged write of works
// (halted here) read back exactly once.
func checkUngrouped(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, anchors []uint64, names []string, clients map[string]*aztables.Client, works map[string]*clustertest.Workload) {
	t.Helper()
	m := clustertest.PartitionMap(t, mc)
	for _, n := range names {
		d := spanOf(m, n)
		if d == nil || rangegroup.GroupOf(d) != d.GetRangeId() {
			t.Fatalf("table %s: range %v, want one range, a group of its own", n, d)
		}
		checkOneGroup(t, c, d, d.GetRangeId())
	}
	for _, tb := range m.GetTables() {
		if strings.HasPrefix(tb.GetName(), "_groups/") {
			t.Fatalf("anchor %s still in the map", tb.GetName())
		}
	}
	clustertest.WaitFor(t, 30*time.Second, fmt.Sprintf("no server serving anchor ranges %v", anchors), func() bool {
		for _, n := range c.Servers {
			for _, a := range anchors {
				if _, err := n.Server.Service().RangeInfo(context.Background(), &pb.RangeInfoRequest{RangeId: a}); err == nil {
					return false
				}
			}
		}
		return true
	})
	for _, n := range names {
		acked := works[n].Halt()
		if len(acked) == 0 {
			t.Fatalf("table %s: no write acknowledged", n)
		}
		clustertest.VerifyExactlyOnce(t, clients[n], acked)
	}
}
