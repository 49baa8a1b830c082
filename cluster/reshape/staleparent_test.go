package reshape

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// TestStaleParentDoesNotHoldUpSplitRange replays chaos seed 299: a server
// cut off while its range splits, and taken off the parent by a move right
// after (the policies rebalanced replicas), keeps a replica of the parent
// that covers the split-off range's start and will never apply the split:
// no leader sends it anything, it is outside the parent's configuration.
// Before the fix the server waited for that replica to go (the placement
// was "await the split") and only the master's replica GC deleted it, 2 s
// after the healed server's first report: the split-off range ran a voter
// short for about 7 s after the heal, and a SIGSTOP of its leader left it
// without a quorum (4.34 s without a write). Now the master's replica GC
// collects such a replica without its grace (it holds up a range assigned
// to the server), on the positive proof that the parent's descriptor no
// longer lists the server; the server then joins the split-off range
// empty. (Session 9 first had the server delete it itself because the
// answer no longer assigned the parent; that is no proof: the master's map
// can lose a live range for a while.)
//
// The move's own delete is held by a failpoint (the cut-off server would
// not get it in the chaos run either); replica GC's are not.
func TestStaleParentDoesNotHoldUpSplitRange(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// One Raft group per table: the stale parent is a table's group. A
	// span of an anchor group leaves it first, a detach the cut-off server
	// misses: its copy stays a span there, no right range until healed
	// (the anchor's case: TestStaleAnchorDoesNotHoldUpDetachedRange).
	c := clustertest.StartTuned(t, 4, func(m *master.Config) { clustertest.QuietPolicies(m); m.TableGroups = false }, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 3*time.Minute)
	const table = "staleparent"
	tc := clustertest.NewTable(t, sc, table)
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tc, acked, "before", 30)

	left := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	leader, victim, spare := clustertest.RangeRoles(t, c, mc, left)
	if spare == "" {
		t.Fatalf("no spare server for range %d", left.GetRangeId())
	}
	vi := c.ServerIndex(victim)
	t.Logf("range %d: leader %s, cut off %s, moved to %s", left.GetRangeId(), leader, victim, spare)

	failpoint.Enable("master/delete-replica-later", nil)
	t.Cleanup(func() { failpoint.Disable("master/delete-replica-later") })
	c.IsolateServer(vi, true)
	t.Cleanup(func() { c.IsolateServer(vi, false) })

	// The split, then the move of the parent off the cut-off server.
	right := splitListing(t, ctx, mc, table, "k13", victim, false)
	if err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: left.GetRangeId(), FromServerId: victim, ToServerId: spare})
		return err
	}); err != nil {
		t.Fatalf("move range %d %s -> %s: %v", left.GetRangeId(), victim, spare, err)
	}
	moved := time.Now()
	clustertest.WriteSeq(t, tc, acked, "cut", 50)

	// Still cut off from its peers, the server has the split-off range
	// (empty, awaiting its snapshot) and no longer the stale parent.
	vs := c.Servers[vi].Server
	clustertest.WaitFor(t, 20*time.Second, fmt.Sprintf("range %d created on %s while cut off", right.GetRangeId(), victim), func() bool {
		return clustertest.RangeInfo(vs, right.GetRangeId()) != nil
	})
	t.Logf("range %d created on %s %v after the move", right.GetRangeId(), victim, time.Since(moved).Round(time.Millisecond))
	if clustertest.RangeInfo(vs, left.GetRangeId()) != nil {
		t.Fatalf("%s still hosts its stale replica of range %d beside range %d", victim, left.GetRangeId(), right.GetRangeId())
	}

	// Healed, it catches up by the leader's snapshot.
	c.IsolateServer(vi, false)
	healed := time.Now()
	t.Logf("healed %s", healed.UTC().Format("15:04:05.000"))
	var target uint64
	for i, n := range c.Servers {
		if i == vi {
			continue
		}
		if st := clustertest.RangeInfo(n.Server, right.GetRangeId()); st != nil && st.GetAppliedIndex() > target {
			target = st.GetAppliedIndex()
		}
	}
	clustertest.WaitFor(t, 30*time.Second, fmt.Sprintf("range %d on %s caught up to index %d", right.GetRangeId(), victim, target), func() bool {
		st := clustertest.RangeInfo(vs, right.GetRangeId())
		return st != nil && st.GetAppliedIndex() >= target
	})
	t.Logf("range %d on %s caught up %v after the heal", right.GetRangeId(), victim, time.Since(healed).Round(time.Millisecond))
	failpoint.Disable("master/delete-replica-later")

	// The split-off range lives on the healed server and one more.
	degradedReadBack(t, c, tc, acked, func(i int) bool {
		id := c.Servers[i].Config.ID
		return id != victim && clustertest.HasServer(right, id)
	})
}
