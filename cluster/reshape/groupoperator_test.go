package reshape

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/masterclient"
	"tablestore/internal/rangegroup"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// TestAnchorGroupMovedByOperator: with --table-groups on four servers, an
// operator's move of an anchor (ctl move, MoveRequest without whole) moves
// its Raft group whole, under writes to every table of it, and an
// operator's leadership transfer of the anchor moves the group's
// leadership without taking it apart (docs/range-groups.md, stage 7; ctl
// move --whole). Before session 35 the move isolated the anchor: every
// table's span left the group, each a group of its own. The group's
// ranges are polled throughout: any table whose range leaves the group
// fails the test at once. After the move every range of the group lists
// the fourth server and not the source, the source holds none of them,
// one move event names every range; after the transfer every range is led
// by the target; every acknowledged write of every table reads back
// exactly once.
func TestAnchorGroupMovedByOperator(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, mc, anchor := startTableGroupsOf(t, 4, func(m *master.Config) {
		m.Policy.BalanceReplicas = false
		m.Policy.BalanceLeaders = false
	})
	sc := clustertest.ServiceClient(t, c, 0)
	var tables []string
	var clients []*aztables.Client
	for i := 0; len(tables) < 3 && i < 12; i++ {
		name := fmt.Sprintf("anchored%02d", i)
		tc := clustertest.NewTable(t, sc, name)
		if d := spanOf(clustertest.PartitionMap(t, mc), name); d != nil && rangegroup.GroupOf(d) == anchor {
			tables, clients = append(tables, name), append(clients, tc)
		}
	}
	if len(tables) < 3 {
		t.Fatalf("only %d tables landed in anchor group %d", len(tables), anchor)
	}
	m := clustertest.PartitionMap(t, mc)
	ad, _ := rangeByID(m, anchor)
	from := m.GetLeaders()[anchor]
	to := ""
	for _, n := range c.Servers {
		if !clustertest.HasServer(ad, n.Config.ID) {
			to = n.Config.ID
		}
	}
	works := make([]*clustertest.Workload, len(clients))
	for i, tc := range clients {
		works[i] = clustertest.StartWorkload(t, tc, 1, clustertest.SpreadKeys)
	}
	time.Sleep(300 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		done <- mc.Call(clustertest.Context(t, time.Minute), func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.Move(ctx, &pb.MoveRequest{RangeId: anchor, FromServerId: from, ToServerId: to})
			return err
		})
	}()
	ranges := append([]uint64{anchor}, anchoredRanges(t, mc, tables, anchor)...)
	t.Logf("anchor group %d: ranges %v, moved from %s to %s", anchor, ranges, from, to)
	awaitGroupOn(t, c, mc, ranges, anchor, to, from, done)
	transferAnchor(t, mc, ranges, anchor, from)
	total := 0
	for i, w := range works {
		acked := w.Halt()
		if len(acked) == 0 {
			t.Fatalf("table %s: no write acknowledged", tables[i])
		}
		total += len(acked)
		clustertest.VerifyExactlyOnce(t, clients[i], acked)
	}
	t.Logf("%d writes acknowledged over %d tables", total, len(tables))
	whole := 0
	for _, e := range clustertest.MasterEvents(mc) {
		if e.GetKind() == pb.EventKind_EVENT_KIND_GROUP_SPLIT {
			t.Errorf("a range left its group: %s", e.GetMessage())
		}
		if e.GetKind() == pb.EventKind_EVENT_KIND_MOVE && len(e.GetRangeIds()) == len(ranges) {
			whole++
			t.Logf("event: %s", e.GetMessage())
		}
	}
	if whole != 1 {
		t.Errorf("%d move events name the group's %d ranges, want 1", whole, len(ranges))
	}
}

// anchoredRanges are the ranges of group anchor other than the anchor
// (the tables' and the warm-up tables'), failing the test unless every
// one of tables is one of them.
func anchoredRanges(t *testing.T, mc *masterclient.Client, tables []string, anchor uint64) []uint64 {
	t.Helper()
	m := clustertest.PartitionMap(t, mc)
	for _, name := range tables {
		if d := spanOf(m, name); d == nil || rangegroup.GroupOf(d) != anchor {
			t.Fatalf("table %s left anchor group %d before the move: %v", name, anchor, d)
		}
	}
	var out []uint64
	for _, d := range m.GetRanges() {
		if rangegroup.GroupOf(d) == anchor && d.GetRangeId() != anchor {
			out = append(out, d.GetRangeId())
		}
	}
	return out
}

// awaitGroupOn waits until the operator's move (done) answered, every one
// of ranges lists to and not from (three replicas) and from holds none
// of them, failing at once if a poll finds one in another group or the
// move failed.
func awaitGroupOn(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, ranges []uint64, group uint64, to, from string, done chan error) {
	t.Helper()
	answered := false
	clustertest.WaitFor(t, 60*time.Second, fmt.Sprintf("ranges %v of group %d on %s and not on %s", ranges, group, to, from), func() bool {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("move of anchor %d from %s to %s: %v", group, from, to, err)
			}
			answered = true
		default:
		}
		m := clustertest.PartitionMap(t, mc)
		moved := true
		for _, id := range ranges {
			d, ok := rangeByID(m, id)
			if !ok || rangegroup.GroupOf(d) != group {
				t.Fatalf("range %d taken out of anchor group %d: %v", id, group, d)
			}
			moved = moved && clustertest.HasServer(d, to) && !clustertest.HasServer(d, from) && len(d.GetReplicas()) == 3
		}
		return answered && moved
	})
	src := c.Servers[c.ServerIndex(from)].Server
	clustertest.WaitFor(t, 20*time.Second, from+" holds no range of the group", func() bool {
		for _, id := range ranges {
			if src.ReplicaState(id) != "absent" {
				return false
			}
		}
		return true
	})
}

// transferAnchor moves the anchor group's leadership by an operator's
// transfer of the anchor to a server other than its leader and other than
// avoid, and waits until every one of ranges is led there, still of the
// group.
func transferAnchor(t *testing.T, mc *masterclient.Client, ranges []uint64, anchor uint64, avoid string) {
	t.Helper()
	m := clustertest.PartitionMap(t, mc)
	ad, _ := rangeByID(m, anchor)
	target := ""
	for _, rep := range ad.GetReplicas() {
		if id := rep.GetServerId(); id != m.GetLeaders()[anchor] && id != avoid {
			target = id
		}
	}
	err := mc.Call(clustertest.Context(t, 30*time.Second), func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: anchor, ToServerId: target})
		return err
	})
	if err != nil {
		t.Fatalf("transfer the anchor's leadership to %s: %v", target, err)
	}
	clustertest.WaitFor(t, 20*time.Second, fmt.Sprintf("ranges %v led by %s", ranges, target), func() bool {
		m := clustertest.PartitionMap(t, mc)
		for _, id := range ranges {
			d, ok := rangeByID(m, id)
			if !ok || rangegroup.GroupOf(d) != anchor {
				t.Fatalf("range %d taken out of anchor group %d by the transfer: %v", id, anchor, d)
			}
			if m.GetLeaders()[id] != target {
				return false
			}
		}
		return true
	})
}

// TestGroupBalancedWhole: with --table-groups (groups of up to two
// ranges: an anchor and a table) on three servers, a fourth server
// joins empty and replica balance gives it replicas: of ranges alone in
// their group, and of shared groups whole (a group of n counted as n
// replicas, moved across a gap of 2n), never a range taken out of its
// group. Every range of a shared group is polled throughout and must stay
// in it; the test waits until the new server holds some shared group
// whole. Before session 35 balance moved the groups' ranges one by one,
// each first taken out of its group.
func TestGroupBalancedWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, mc, _ := startTableGroupsOf(t, 3, func(m *master.Config) {
		m.TableGroupSpans = 2
		m.Policy.BalanceLeaders = false
	})
	sc := clustertest.ServiceClient(t, c, 0)
	// Tables created one at a time, each given time to find the spare
	// anchor the master founds after the last filled up: few ranges
	// alone in their group, so the counts leave a gap for a group.
	var groups map[uint64]uint64
	for i := 0; len(groups) < 8 && i < 16; i++ {
		clustertest.NewTable(t, sc, fmt.Sprintf("balanced%02d", i))
		time.Sleep(time.Second)
		groups = sharedGroups(clustertest.PartitionMap(t, mc))
	}
	if len(groups) < 8 {
		t.Fatalf("shared groups (range: group) %v, want four of two ranges", groups)
	}
	t.Logf("shared groups (range: group): %v", groups)
	i, err := c.AddServer()
	if err != nil {
		t.Fatal(err)
	}
	joined := c.Servers[i].Config.ID
	clustertest.WaitFor(t, 60*time.Second, joined+" holding a shared group whole", func() bool {
		m := clustertest.PartitionMap(t, mc)
		held := map[uint64]int{}
		for id, g := range groups {
			d, ok := rangeByID(m, id)
			if !ok || rangegroup.GroupOf(d) != g {
				t.Fatalf("range %d taken out of group %d: %v", id, g, d)
			}
			if clustertest.HasServer(d, joined) {
				held[g]++
			}
		}
		for g, n := range held {
			if n == groupSize(groups, g) {
				t.Logf("%s holds group %d whole", joined, g)
				return true
			}
		}
		return false
	})
	for _, e := range clustertest.MasterEvents(mc) {
		if e.GetKind() == pb.EventKind_EVENT_KIND_GROUP_SPLIT {
			t.Errorf("a range left its group: %s", e.GetMessage())
		}
	}
}

// sharedGroups maps every range of a Raft group that serves several
// ranges to its group.
func sharedGroups(m *pb.PartitionMap) map[uint64]uint64 {
	n := map[uint64]int{}
	for _, d := range m.GetRanges() {
		n[rangegroup.GroupOf(d)]++
	}
	out := map[uint64]uint64{}
	for _, d := range m.GetRanges() {
		if g := rangegroup.GroupOf(d); n[g] > 1 {
			out[d.GetRangeId()] = g
		}
	}
	return out
}

// groupSize is how many ranges groups maps to g.
func groupSize(groups map[uint64]uint64, g uint64) int {
	n := 0
	for _, x := range groups {
		if x == g {
			n++
		}
	}
	return n
}
