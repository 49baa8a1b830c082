package reshape

import (
	"strings"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/masterclient"
	"tablestore/internal/rangegroup"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// TestHotTableLeavesAnchorGroup: stage 7, step 7 (docs/range-groups.md).
// With --table-groups and a low split load (100 entities/s), four tables
// created through the front-end share the anchor's Raft group; one is
// written as fast as four writers go, the other three at a few writes a
// second. The hot table's span leaves the group (detach-hot: a
// group-split event naming the rule) before anything splits it, so no
// range of the hot table is left in the shared group (a split in the
// group kept its left half there); the cold tables stay spans of the
// anchor's group on every replica; every acknowledged write of every
// table reads back exactly once. Fails without the rule: the span left
// only through split-load's split, by the master's defence (split
// isolates a span of an anchor group first), and no event names
// detach-hot; without the defence too, the split kept the hot table's
// left half in the group (the wait timed out).
func TestHotTableLeavesAnchorGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, mc, anchor := startTableGroupsTuned(t, func(m *master.Config) {
		m.Policy.SplitLoad = 100
		m.Policy.MergeLoad = 20
	})
	sc := clustertest.ServiceClient(t, c, 0)
	names := []string{"hot", "cold0", "cold1", "cold2"}
	clients, spans := tablesInAnchor(t, c, mc, sc, anchor, names)
	// A few writes a second: under the merge load, cold.
	paced := func(w, i int) (string, string) {
		time.Sleep(200 * time.Millisecond)
		return clustertest.SpreadKeys(w, i)
	}
	works := map[string]*clustertest.Workload{"hot": clustertest.StartWorkload(t, clients["hot"], 4, clustertest.SpreadKeys)}
	for _, n := range names[1:] {
		works[n] = clustertest.StartWorkload(t, clients[n], 1, paced)
	}
	hot := spans["hot"].GetRangeId()
	clustertest.WaitFor(t, 60*time.Second, "the hot table's span out of the anchor's group", func() bool {
		d, ok := rangeByID(clustertest.PartitionMap(t, mc), hot)
		return ok && rangegroup.GroupOf(d) != anchor
	})
	time.Sleep(2 * time.Second) // writes go on after it left (and a split of it alone, if any)
	for _, n := range names {
		acked := works[n].Halt()
		if len(acked) == 0 {
			t.Fatalf("table %s: no write acknowledged", n)
		}
		clustertest.VerifyExactlyOnce(t, clients[n], acked)
		t.Logf("table %s: %d writes acknowledged", n, len(acked))
	}
	m := clustertest.PartitionMap(t, mc)
	for _, d := range clustertest.TableRanges(m, "hot") {
		if rangegroup.GroupOf(d) == anchor {
			t.Errorf("hot table's range %d still in the anchor's group: %v", d.GetRangeId(), d)
		}
	}
	checkLeftBy(t, c, mc, m, names[1:], spans, anchor, hot, "detach-hot")
}

// checkLeftBy checks, after range id left the anchor's group, that the
// tables stayed (their one range still added to it) and that the
// master's group-split event of id names the scheduler rule that took it.
func checkLeftBy(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, m *pb.PartitionMap, stayed []string, spans map[string]*pb.RangeDescriptor, anchor, id uint64, rule string) {
	t.Helper()
	for _, n := range stayed {
		d := spanOf(m, n)
		if d == nil || d.GetRangeId() != spans[n].GetRangeId() {
			t.Fatalf("table %s after: %v, want its one range %d", n, clustertest.TableRanges(m, n), spans[n].GetRangeId())
		}
		checkOneGroup(t, c, d, anchor)
	}
	named := false
	for _, e := range clustertest.MasterEvents(mc) {
		if e.GetKind() == pb.EventKind_EVENT_KIND_GROUP_SPLIT && len(e.GetRangeIds()) > 0 && e.GetRangeIds()[0] == id {
			named = strings.Contains(e.GetMessage(), "["+rule+"]")
			t.Logf("event: %s", e.GetMessage())
		}
	}
	if !named {
		t.Errorf("no group-split event of range %d naming [%s]", id, rule)
	}
}
