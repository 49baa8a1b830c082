package reshape

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster/clustertest"
	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// anchorGroupsOf returns, for each anchor of m, the ids of the ranges its
// group serves (the anchor first, then by id).
func anchorGroupsOf(m *pb.PartitionMap) map[uint64][]uint64 {
	out := map[uint64][]uint64{}
	for _, d := range m.GetRanges() {
		if strings.HasPrefix(d.GetTable(), "_groups/") && rangegroup.GroupOf(d) == d.GetRangeId() {
			out[d.GetRangeId()] = append(out[d.GetRangeId()], d.GetRangeId())
		}
	}
	for _, d := range m.GetRanges() {
		if g := rangegroup.GroupOf(d); g != d.GetRangeId() && out[g] != nil {
			out[g] = append(out[g], d.GetRangeId())
		}
	}
	for g := range out {
		slices.Sort(out[g][1:])
	}
	return out
}

// TestOverCapGroupShedsSpans: an anchor group serving more spans than
// --table-group-spans (here: tables created in anchor groups under the
// default cap, then the master restarted with --table-group-spans 3, as
// a group filled by an older build or one a dying master's uncapped add
// passed) gives up its newest spans through the master's policies
// (detach-over-cap) until it serves 3 (the anchor and its two oldest
// spans), each with a group-split event naming the rule; every table
// that left is a group of its own on every replica, those that stayed
// spans of their anchor's group on every replica; every acknowledged
// write (writes go on throughout) reads back exactly once. Fails without
// the rule: the groups stay over the cap (the wait times out).
func TestOverCapGroupShedsSpans(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const spanCap = 3
	c, mc, anchor := startTableGroups(t)
	sc := clustertest.ServiceClient(t, c, 0)
	// The warm-up table that landed in the anchor's group: on a loaded
	// machine the first ones may be created before the anchor takes
	// tables, in groups of their own, which the test leaves out.
	var names []string
	clients := map[string]*aztables.Client{}
	for _, d := range clustertest.PartitionMap(t, mc).GetRanges() {
		if strings.HasPrefix(d.GetTable(), "warmup") && rangegroup.GroupOf(d) == anchor {
			names = append(names, d.GetTable())
			clients[d.GetTable()] = sc.NewClient(d.GetTable())
		}
	}
	for i := range 8 {
		n := fmt.Sprintf("capped%d", i)
		names = append(names, n)
		clients[n] = clustertest.NewTable(t, sc, n)
	}
	before := anchorGroupsOf(clustertest.PartitionMap(t, mc))
	over := false
	for g, ids := range before {
		t.Logf("anchor group %d before: %v", g, ids)
		over = over || len(ids) > spanCap
	}
	if !over {
		t.Fatalf("no anchor group over %d spans to start from: %v", spanCap, before)
	}
	works := map[string]*clustertest.Workload{}
	for _, n := range names {
		works[n] = clustertest.StartWorkload(t, clients[n], 1, func(w, i int) (string, string) {
			time.Sleep(100 * time.Millisecond)
			return clustertest.SpreadKeys(w, i)
		})
	}
	if err := c.StopMaster(0); err != nil {
		t.Fatal(err)
	}
	c.Masters[0].Config.TableGroupSpans = spanCap
	if err := c.RestartMaster(0); err != nil {
		t.Fatal(err)
	}
	var after map[uint64][]uint64
	clustertest.WaitFor(t, 60*time.Second, fmt.Sprintf("every anchor group at %d spans or fewer", spanCap), func() bool {
		after = anchorGroupsOf(clustertest.PartitionMap(t, mc))
		for _, ids := range after {
			if len(ids) > spanCap {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second) // writes go on after the last span left
	m := clustertest.PartitionMap(t, mc)
	var left []uint64
	for g, ids := range before {
		if want := ids[:min(len(ids), spanCap)]; !slices.Equal(after[g], want) {
			t.Errorf("anchor group %d serves %v after, want its anchor and oldest spans %v", g, after[g], want)
		}
		left = append(left, ids[min(len(ids), spanCap):]...)
	}
	for _, n := range names {
		d := spanOf(m, n)
		if d == nil {
			t.Fatalf("table %s: %v, want one range", n, clustertest.TableRanges(m, n))
		}
		checkOneGroup(t, c, d, rangegroup.GroupOf(d))
		if slices.Contains(left, d.GetRangeId()) && rangegroup.GroupOf(d) != d.GetRangeId() {
			t.Errorf("table %s's range %d in group %d, want a group of its own", n, d.GetRangeId(), rangegroup.GroupOf(d))
		}
	}
	ruled := map[uint64]bool{}
	for _, e := range clustertest.MasterEvents(mc) {
		if e.GetKind() == pb.EventKind_EVENT_KIND_GROUP_SPLIT && len(e.GetRangeIds()) > 0 && strings.Contains(e.GetMessage(), "[detach-over-cap]") {
			ruled[e.GetRangeIds()[0]] = true
		}
	}
	for _, id := range left {
		if !ruled[id] {
			t.Errorf("no group-split event of range %d naming [detach-over-cap]", id)
		}
	}
	for _, n := range names {
		acked := works[n].Halt()
		if len(acked) == 0 {
			t.Fatalf("table %s: no write acknowledged", n)
		}
		clustertest.VerifyExactlyOnce(t, clients[n], acked)
	}
	t.Logf("ranges that left their anchor groups: %v", left)
}
