package reshape

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster/clustertest"
	"tablestore/internal/rangegroup"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// TestSplitInGroup: an operator's split in the range's group
// (docs/range-groups.md, stage 3) under a write load: the right range
// becomes a second span of the left's Raft group, led by the same server;
// the leader's server crashes and the
// group, one election, serves both ranges from the survivors; restarted,
// it catches up; the spans merge back in their group (stage 5); every
// acknowledged write reads back exactly once.
func TestSplitInGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 3*time.Minute)
	const table = "ingroup"
	tc := clustertest.NewTable(t, sc, table)
	mc := clustertest.MasterClient(t, c)
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	time.Sleep(300 * time.Millisecond)

	var split *pb.SplitResponse
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		var err error
		split, err = m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k13", InGroup: true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	left, right := split.GetLeft(), split.GetRight()
	if left.GetEnd() != "k13" || right.GetStart() != "k13" || left.GetGroupId() != left.GetRangeId() || right.GetGroupId() != left.GetRangeId() {
		t.Fatalf("split in group = %v / %v", left, right)
	}
	clustertest.WaitFor(t, 5*time.Second, "two ranges in the map", func() bool { return len(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)) == 2 })
	var leader string
	clustertest.WaitFor(t, 5*time.Second, "both spans led by one server", func() bool {
		m := clustertest.PartitionMap(t, mc)
		leader = m.GetLeaders()[left.GetRangeId()]
		return leader != "" && leader == m.GetLeaders()[right.GetRangeId()]
	})
	time.Sleep(300 * time.Millisecond)
	t.Logf("pause across the split: %v", time.Duration(w.MaxGap.Swap(0)))

	i := c.ServerIndex(leader)
	if err := c.CrashServer(i); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 20*time.Second, "a new leader of both spans", func() bool {
		m := clustertest.PartitionMap(t, mc)
		l := m.GetLeaders()[left.GetRangeId()]
		return l != "" && l != leader && l == m.GetLeaders()[right.GetRangeId()]
	})
	time.Sleep(500 * time.Millisecond)
	if err := c.RestartServer(i); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	t.Logf("pause across the crash and restart: %v", time.Duration(w.MaxGap.Swap(0)))
	// The two spans merge back in their group: one entry, no freeze.
	var merged *pb.MergeResponse
	err = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		var err error
		merged, err = m.Merge(ctx, &pb.MergeRequest{RangeId: left.GetRangeId()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := merged.GetRange(); d.GetRangeId() != left.GetRangeId() || d.GetStart() != left.GetStart() || d.GetEnd() != right.GetEnd() {
		t.Fatalf("merged in group: %v", d)
	}
	clustertest.WaitFor(t, 5*time.Second, "one range in the map", func() bool { return len(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)) == 1 })
	time.Sleep(300 * time.Millisecond)
	t.Logf("pause across the merge: %v", time.Duration(w.MaxGap.Swap(0)))
	acked := w.Halt()
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}
	t.Logf("%d writes acknowledged, %d failed; longest pause: %v", len(acked), w.Failed.Load(), time.Duration(w.MaxGap.Load()))
	clustertest.VerifyExactlyOnce(t, tc, acked)
	// Every server, the restarted one too, serves the merged range and no
	// longer the right one.
	clustertest.WaitFor(t, 20*time.Second, "every server holds the merged range alone", func() bool {
		for _, n := range c.Servers {
			if st := n.Server; st == nil || st.ReplicaState(left.GetRangeId()) == "absent" || st.ReplicaState(right.GetRangeId()) != "absent" {
				return false
			}
		}
		return true
	})
}

// TestGroupSplit: ranges that share a Raft group change leader and move
// one at a time (docs/range-groups.md, stage 4), under a write load. An
// operator's leadership transfer of a span born in the group first moves
// it into a group of its own (one entry), which the target then leads,
// while the group's other spans stay with their leader. A move of the
// group's namesake first moves its last sibling out, then moves the
// namesake alone onto the fourth server. Every acknowledged write reads
// back exactly once, and every server ends up holding exactly the
// replicas the map lists.
func TestGroupSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 4, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 3*time.Minute)
	const table = "groupsplit"
	tc := clustertest.NewTable(t, sc, table)
	mc := clustertest.MasterClient(t, c)
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	time.Sleep(300 * time.Millisecond)
	op := func(what string, fn func(ctx context.Context, m pb.MasterServiceClient) error) {
		t.Helper()
		if err := mc.Call(ctx, fn); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	var right, mid *pb.RangeDescriptor
	op("split at k13 in the group", func(ctx context.Context, m pb.MasterServiceClient) error {
		resp, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k13", InGroup: true})
		right = resp.GetRight()
		return err
	})
	op("split at k06 in the group", func(ctx context.Context, m pb.MasterServiceClient) error {
		resp, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k06", InGroup: true})
		mid = resp.GetRight()
		return err
	})
	left := right.GetGroupId()
	var leader string
	clustertest.WaitFor(t, 5*time.Second, "three spans led by one server", func() bool {
		m := clustertest.PartitionMap(t, mc)
		leader = m.GetLeaders()[left]
		return len(clustertest.TableRanges(m, table)) == 3 && leader != "" && leader == m.GetLeaders()[right.GetRangeId()] && leader == m.GetLeaders()[mid.GetRangeId()]
	})
	var to string
	for _, r := range right.GetReplicas() {
		if r.GetServerId() != leader {
			to = r.GetServerId()
		}
	}
	op("transfer the right span's leadership", func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: right.GetRangeId(), ToServerId: to})
		return err
	})
	clustertest.WaitFor(t, 10*time.Second, "the right span in a group of its own, led by the target", func() bool {
		m := clustertest.PartitionMap(t, mc)
		groups := groupsOf(clustertest.TableRanges(m, table))
		return groups[right.GetRangeId()] == right.GetRangeId() && groups[mid.GetRangeId()] == left &&
			m.GetLeaders()[right.GetRangeId()] == to && m.GetLeaders()[left] == leader && m.GetLeaders()[mid.GetRangeId()] == leader
	})
	t.Logf("pause across the transfer out of the group: %v", time.Duration(w.MaxGap.Swap(0)))

	target := ""
	for _, n := range c.Servers {
		if !clustertest.HasServer(right, n.Config.ID) {
			target = n.Config.ID
		}
	}
	op("move the namesake", func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: left, ToServerId: target})
		return err
	})
	clustertest.WaitFor(t, 10*time.Second, "every range its own group, the namesake moved", func() bool {
		rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)
		groups := groupsOf(rs)
		for _, r := range rs {
			if r.GetRangeId() == left && !clustertest.HasServer(r, target) {
				return false
			}
		}
		return len(groups) == 3 && groups[left] == left && groups[mid.GetRangeId()] == mid.GetRangeId() && groups[right.GetRangeId()] == right.GetRangeId()
	})
	time.Sleep(300 * time.Millisecond)
	t.Logf("pause across the move: %v", time.Duration(w.MaxGap.Swap(0)))
	acked := w.Halt()
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}
	t.Logf("%d writes acknowledged, %d failed; longest pause: %v", len(acked), w.Failed.Load(), time.Duration(w.MaxGap.Load()))
	clustertest.VerifyExactlyOnce(t, tc, acked)
	clustertest.WaitFor(t, 30*time.Second, "every server holds the replicas the map lists", func() bool {
		for _, r := range clustertest.TableRanges(clustertest.PartitionMap(t, mc), table) {
			for _, n := range c.Servers {
				if st := n.Server; st == nil || (st.ReplicaState(r.GetRangeId()) != "absent") != clustertest.HasServer(r, n.Config.ID) {
					return false
				}
			}
		}
		return true
	})
}

// groupsOf maps each range to its Raft group (rangegroup.GroupOf).
func groupsOf(rs []*pb.RangeDescriptor) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, r := range rs {
		out[r.GetRangeId()] = rangegroup.GroupOf(r)
	}
	return out
}

// TestSplitOutOfGroupMissedBySnapshot: a range that is a span of a group of
// two splits into a new group while a follower of the group is down, and
// the group's log is compacted past the split: the follower comes back,
// gets a snapshot of the group (the shrunk span and its sibling), learns of
// the new group from the span's record of the split (SplitsMissed, per
// span), and holds the new range too: with another server stopped, the
// follower and the last one serve every range and every acknowledged
// write.
func TestSplitOutOfGroupMissedBySnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, compactingLogs)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 3*time.Minute)
	const table = "outofgroup"
	tc, mc := clustertest.NewTable(t, sc, table), clustertest.MasterClient(t, c)
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tc, acked, "before", 30)
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k05", InGroup: true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	group := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	victim, vi := followerOf(t, c, mc, group)
	t.Logf("stopping %s across the split out of group %d", victim, group.GetRangeId())
	if err := c.StopServer(vi); err != nil {
		t.Fatal(err)
	}
	right := splitListing(t, ctx, mc, table, "k13", victim, false)
	if right.GetGroupId() != 0 {
		t.Fatalf("the split out of the group made %s", describe([]*pb.RangeDescriptor{right}))
	}
	clustertest.WriteSeq(t, tc, acked, "after", 200)
	waitCompacted(t, c, vi, group.GetRangeId())
	if err := c.RestartServer(vi); err != nil {
		t.Fatal(err)
	}
	for _, r := range clustertest.TableRanges(clustertest.PartitionMap(t, mc), table) {
		waitCaughtUp(t, c, vi, r.GetRangeId())
	}
	other := (vi + 1) % len(c.Servers)
	t.Logf("stopping %s", c.Servers[other].Config.ID)
	if err := c.StopServer(other); err != nil {
		t.Fatal(err)
	}
	clustertest.WriteSeq(t, tc, acked, "degraded", 30)
	clustertest.VerifyExactlyOnce(t, tc, acked)
}

// TestGroupLeadershipBalanced: the master's leader-load balancing moves the
// leadership of a Raft group that serves two ranges as one unit
// (docs/range-groups.md, stage 6): one server leads a loaded table split in
// its group and two lighter tables; once the policies run, the group's
// leadership moves whole, both spans led by one other server, without a
// group split; every acknowledged write reads back exactly once.
func TestGroupLeadershipBalanced(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// Not beside other tests: the group moves whole only while the two
	// light tables' single writers lead more than half the master's
	// LeaderMinGap (100 entities/s) together; beside another test of this
	// binary on a loaded machine it timed out in 2 of 2 runs of the package.
	c := clustertest.StartTuned(t, 3, func(m *master.Config) {
		m.Policy.Enabled = false // until the layout is set up
		m.Policy.SplitLoad = 1e9
		m.Policy.MergeLoad = 0
		// One Raft group per table: the leader counts the balance is
		// to even out are laid out by hand; light tables that land in
		// the spare anchor's group (when it is up first) are one more
		// unit led by the same server, and the awaited move never came
		// in one run of make test.
		m.TableGroups = false
	}, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 3*time.Minute)
	mc := clustertest.MasterClient(t, c)
	op := func(what string, fn func(ctx context.Context, m pb.MasterServiceClient) error) {
		t.Helper()
		if err := mc.Call(ctx, fn); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	const table = "grouplead"
	tc := clustertest.NewTable(t, sc, table)
	light := []string{"lightone", "lighttwo"}
	var lightClients []*aztables.Client
	for _, name := range light {
		lightClients = append(lightClients, clustertest.NewTable(t, sc, name))
	}
	var leader string
	clustertest.WaitFor(t, 10*time.Second, "every table led", func() bool {
		m := clustertest.PartitionMap(t, mc)
		leader = m.GetLeaders()[clustertest.TableRanges(m, table)[0].GetRangeId()]
		for _, name := range light {
			if m.GetLeaders()[clustertest.TableRanges(m, name)[0].GetRangeId()] == "" {
				return false
			}
		}
		return leader != ""
	})
	for _, name := range light {
		id := clustertest.TableRanges(clustertest.PartitionMap(t, mc), name)[0].GetRangeId()
		op("lead "+name+" where the table is led", func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: id, ToServerId: leader})
			return err
		})
	}
	var split *pb.SplitResponse
	op("split in the group", func(ctx context.Context, m pb.MasterServiceClient) error {
		var err error
		split, err = m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k13", InGroup: true})
		return err
	})
	left, right := split.GetLeft().GetRangeId(), split.GetRight().GetRangeId()
	clustertest.WaitFor(t, 10*time.Second, "one server leads everything", func() bool {
		m := clustertest.PartitionMap(t, mc)
		for _, name := range append([]string{table}, light...) {
			for _, r := range clustertest.TableRanges(m, name) {
				if m.GetLeaders()[r.GetRangeId()] != leader {
					return false
				}
			}
		}
		return true
	})
	w := clustertest.StartWorkload(t, tc, 8, clustertest.SpreadKeys)
	var lights []*clustertest.Workload
	for _, lc := range lightClients {
		lights = append(lights, clustertest.StartWorkload(t, lc, 1, clustertest.SpreadKeys))
	}

	// The policies on: a restart of the master with them enabled.
	if err := c.StopMaster(0); err != nil {
		t.Fatal(err)
	}
	c.Masters[0].Config.Policy.Enabled = true
	if err := c.RestartMaster(0); err != nil {
		t.Fatal(err)
	}
	var to string
	clustertest.WaitFor(t, 60*time.Second, "the group's leadership moved whole", func() bool {
		m := clustertest.PartitionMap(t, mc)
		to = m.GetLeaders()[left]
		groups := groupsOf(clustertest.TableRanges(m, table))
		return to != "" && to != leader && m.GetLeaders()[right] == to && groups[left] == left && groups[right] == left
	})
	t.Logf("group %d (ranges %d, %d) moved from %s to %s", left, left, right, leader, to)
	// Polled: the master records the transfer's event once the transfer
	// returns, which can be after the new leader's report moved the map
	// (one run of make test read the events between the two).
	clustertest.WaitFor(t, 10*time.Second, "a policy leadership transfer event naming both ranges of the group", func() bool {
		for _, e := range clustertest.MasterEvents(mc) {
			if e.GetKind() == pb.EventKind_EVENT_KIND_LEADER_TRANSFER && e.GetCause() == "policy" && len(e.GetRangeIds()) == 2 {
				t.Logf("event: %s", e.GetMessage())
				return true
			}
		}
		return false
	})
	for _, l := range lights {
		l.Halt()
	}
	acked := w.Halt()
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}
	t.Logf("%d writes acknowledged, %d failed; longest pause: %v", len(acked), w.Failed.Load(), time.Duration(w.MaxGap.Load()))
	clustertest.VerifyExactlyOnce(t, tc, acked)
}
