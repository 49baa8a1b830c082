package reshape

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/internal/masterclient"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// groupOfThree is a cluster of four servers whose table "groupmove" is
// one Raft group of three spans (two in-group splits), on three servers
// and led by one of them (from); to is the fourth server.
type groupOfThree struct {
	c        *cluster.Cluster
	mc       *masterclient.Client
	tc       *aztables.Client
	group    uint64
	from, to string
}

const groupMoveTable = "groupmove"

// startGroupOfThree starts it with only the drain's rules acting: no load
// split, no merge of the cold spans, no balancing (replica balance would
// move the group too, and the tests count the drain's moves).
func startGroupOfThree(t *testing.T) *groupOfThree {
	t.Helper()
	c := clustertest.StartTuned(t, 4, func(m *master.Config) {
		m.Policy.SplitLoad = 1e9
		m.Policy.MergeLoad = 0
		m.Policy.BalanceLeaders = false
		m.Policy.BalanceReplicas = false
	}, nil)
	g := &groupOfThree{c: c, mc: clustertest.MasterClient(t, c)}
	g.tc = clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), groupMoveTable)
	ctx := clustertest.Context(t, time.Minute)
	for _, key := range []string{"k13", "k06"} {
		err := g.mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			resp, err := m.Split(ctx, &pb.SplitRequest{Table: groupMoveTable, PartitionKey: key, InGroup: true})
			g.group = resp.GetLeft().GetGroupId()
			return err
		})
		if err != nil {
			t.Fatalf("split at %s in the group: %v", key, err)
		}
	}
	clustertest.WaitFor(t, 10*time.Second, "three spans of one group, led by one server", func() bool {
		m := clustertest.PartitionMap(t, g.mc)
		rs := clustertest.TableRanges(m, groupMoveTable)
		g.from = m.GetLeaders()[g.group]
		for _, r := range rs {
			if m.GetLeaders()[r.GetRangeId()] != g.from {
				return false
			}
		}
		return g.from != "" && g.oneGroup(rs)
	})
	for _, n := range c.Servers {
		if d := clustertest.TableRanges(clustertest.PartitionMap(t, g.mc), groupMoveTable)[0]; !clustertest.HasServer(d, n.Config.ID) {
			g.to = n.Config.ID
		}
	}
	return g
}

// oneGroup reports whether rs are the table's three ranges, all of the
// group.
func (g *groupOfThree) oneGroup(rs []*pb.RangeDescriptor) bool {
	for _, id := range groupsOf(rs) {
		if id != g.group {
			return false
		}
	}
	return len(rs) == 3
}

// drain marks from draining.
func (g *groupOfThree) drain(t *testing.T) {
	t.Helper()
	err := g.mc.Call(clustertest.Context(t, 10*time.Second), func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.DrainServer(ctx, &pb.DrainServerRequest{ServerId: g.from})
		return err
	})
	if err != nil {
		t.Fatalf("drain %s: %v", g.from, err)
	}
}

// awaitMoved waits until every span lists to and not from (three
// replicas), failing at once if a poll finds the table in more than one
// group, then until from holds no replica of any span and to holds every
// one.
func (g *groupOfThree) awaitMoved(t *testing.T, within time.Duration) {
	t.Helper()
	clustertest.WaitFor(t, within, "every span on "+g.to+" and none on "+g.from, func() bool {
		rs := clustertest.TableRanges(clustertest.PartitionMap(t, g.mc), groupMoveTable)
		if !g.oneGroup(rs) {
			t.Fatalf("spans taken out of the group: groups %v", groupsOf(rs))
		}
		for _, r := range rs {
			if !clustertest.HasServer(r, g.to) || clustertest.HasServer(r, g.from) || len(r.GetReplicas()) != 3 {
				return false
			}
		}
		return true
	})
	rs := clustertest.TableRanges(clustertest.PartitionMap(t, g.mc), groupMoveTable)
	src := g.c.Servers[g.c.ServerIndex(g.from)].Server
	dst := g.c.Servers[g.c.ServerIndex(g.to)].Server
	clustertest.WaitFor(t, 20*time.Second, g.from+" holds no span of the group, "+g.to+" every one", func() bool {
		for _, r := range rs {
			if src.ReplicaState(r.GetRangeId()) != "absent" || dst.ReplicaState(r.GetRangeId()) == "absent" {
				return false
			}
		}
		return true
	})
}

// TestGroupMovedWhole: a drain of a server holding a Raft group of three
// spans moves the group whole (docs/range-groups.md, stage 7 step 6),
// under a write load. The table is split twice in its group; its leader's
// server is drained: the drain moves the group's leadership, then the
// group's replica, as one move through its namesake (scheduler Op.Whole,
// master moveGroup). The table is one Raft group before, throughout and
// after (before, the drain took each span out of the group first: three
// groups); every span's descriptor lists the fourth server and not the
// drained one; the drained server holds no replica of any span; one move
// event names the three ranges; every acknowledged write reads back
// exactly once.
func TestGroupMovedWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	g := startGroupOfThree(t)
	w := clustertest.StartWorkload(t, g.tc, 4, clustertest.SpreadKeys)
	time.Sleep(300 * time.Millisecond)
	g.drain(t)
	g.awaitMoved(t, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	acked := w.Halt()
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}
	t.Logf("%d writes acknowledged, %d failed; longest pause: %v", len(acked), w.Failed.Load(), time.Duration(w.MaxGap.Load()))
	clustertest.VerifyExactlyOnce(t, g.tc, acked)
	whole := 0
	for _, e := range clustertest.MasterEvents(g.mc) {
		if e.GetKind() == pb.EventKind_EVENT_KIND_MOVE && len(e.GetRangeIds()) == 3 {
			whole++
			t.Logf("event: %s", e.GetMessage())
		}
	}
	if whole != 1 {
		t.Errorf("%d move events name the group's three ranges, want 1", whole)
	}
}

// TestGroupMoveInterruptedByMasterFailover: a whole move of a group of
// three spans (a drain, under a write load) stops where a master could
// die (a failpoint), after the add (master/move/after-add: the group has
// a voter too many) or after the removal before it is recorded
// (master/move-group/after-remove: the map lists the removed server, whose
// copy of the group is not deleted); the master restarts. The replica-set
// check and replica GC finish it: the table is still one group, every
// span lists the new server and not the drained one, the drained server
// holds nothing, and every acknowledged write reads back exactly once.
func TestGroupMoveInterruptedByMasterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, point := range []string{"master/move/after-add", "master/move-group/after-remove"} {
		t.Run(point, func(t *testing.T) {
			g := startGroupOfThree(t)
			w := clustertest.StartWorkload(t, g.tc, 4, clustertest.SpreadKeys)
			time.Sleep(300 * time.Millisecond)
			var hits atomic.Int32
			failpoint.Enable(point, func() error { hits.Add(1); return failpoint.ErrInjected })
			defer failpoint.Disable(point)
			g.drain(t)
			clustertest.WaitFor(t, 30*time.Second, point+" reached", func() bool { return hits.Load() > 0 })
			failpoint.Disable(point)
			if err := g.c.StopMaster(0); err != nil {
				t.Fatal(err)
			}
			if err := g.c.RestartMaster(0); err != nil {
				t.Fatal(err)
			}
			g.awaitMoved(t, 60*time.Second)
			acked := w.Halt()
			if len(acked) == 0 {
				t.Fatal("no write acknowledged")
			}
			t.Logf("%d writes acknowledged, %d failed; longest pause: %v", len(acked), w.Failed.Load(), time.Duration(w.MaxGap.Load()))
			clustertest.VerifyExactlyOnce(t, g.tc, acked)
		})
	}
}
