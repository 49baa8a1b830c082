package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "tablestore/proto/tablestorepb"
)

// TestSplitInGroup: an operator's split in the range's group
// (docs/range-groups.md, stage 3) under a write load: the right range
// becomes a second span of the left's Raft group, led by the same server;
// a move of one span is refused; the leader's server crashes and the
// group, one election, serves both ranges from the survivors; restarted,
// it catches up; the spans merge back in their group (stage 5); every
// acknowledged write reads back exactly once.
func TestSplitInGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	besideOneOther(t)
	c := startTuned(t, 3, quietPolicies, nil)
	sc := serviceClient(t, c, 0)
	ctx := ctxT(t, 3*time.Minute)
	const table = "ingroup"
	tc := newTable(t, sc, table)
	mc := masterClient(t, c)
	w := startWorkload(t, tc, 4, spreadKeys)
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
	waitFor(t, 5*time.Second, "two ranges in the map", func() bool { return len(tableRanges(partitionMap(t, mc), table)) == 2 })
	var leader string
	waitFor(t, 5*time.Second, "both spans led by one server", func() bool {
		m := partitionMap(t, mc)
		leader = m.GetLeaders()[left.GetRangeId()]
		return leader != "" && leader == m.GetLeaders()[right.GetRangeId()]
	})
	time.Sleep(300 * time.Millisecond)
	t.Logf("pause across the split: %v", time.Duration(w.maxGap.Swap(0)))

	// Not built yet (docs/range-groups.md, stage 4), and refused before
	// anything changes: moving one span (the membership change is the
	// group's).
	err = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: right.GetRangeId(), ToServerId: leader})
		return err
	})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "shares its Raft group") {
		t.Fatalf("move of a span: %v", err)
	}

	i := c.ServerIndex(leader)
	if err := c.CrashServer(i); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a new leader of both spans", func() bool {
		m := partitionMap(t, mc)
		l := m.GetLeaders()[left.GetRangeId()]
		return l != "" && l != leader && l == m.GetLeaders()[right.GetRangeId()]
	})
	time.Sleep(500 * time.Millisecond)
	if err := c.RestartServer(i); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	t.Logf("pause across the crash and restart: %v", time.Duration(w.maxGap.Swap(0)))
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
	waitFor(t, 5*time.Second, "one range in the map", func() bool { return len(tableRanges(partitionMap(t, mc), table)) == 1 })
	time.Sleep(300 * time.Millisecond)
	t.Logf("pause across the merge: %v", time.Duration(w.maxGap.Swap(0)))
	acked := w.halt()
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}
	t.Logf("%d writes acknowledged, %d failed; longest pause: %v", len(acked), w.failed.Load(), time.Duration(w.maxGap.Load()))
	verifyExactlyOnce(t, tc, acked)
	// Every server, the restarted one too, serves the merged range and no
	// longer the right one.
	waitFor(t, 20*time.Second, "every server holds the merged range alone", func() bool {
		for _, n := range c.Servers {
			if st := n.Server; st == nil || st.ReplicaState(left.GetRangeId()) == "absent" || st.ReplicaState(right.GetRangeId()) != "absent" {
				return false
			}
		}
		return true
	})
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
	besideOneOther(t)
	c := startTuned(t, 3, quietPolicies, compactingLogs)
	sc := serviceClient(t, c, 0)
	ctx := ctxT(t, 3*time.Minute)
	const table = "outofgroup"
	tc, mc := newTable(t, sc, table), masterClient(t, c)
	acked := map[string]int64{}
	writeSeq(t, tc, acked, "before", 30)
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k05", InGroup: true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	group := tableRanges(partitionMap(t, mc), table)[0]
	victim, vi := followerOf(t, c, mc, group)
	t.Logf("stopping %s across the split out of group %d", victim, group.GetRangeId())
	if err := c.StopServer(vi); err != nil {
		t.Fatal(err)
	}
	right := splitListing(t, ctx, mc, table, "k13", victim, false)
	if right.GetGroupId() != 0 {
		t.Fatalf("the split out of the group made %s", describe([]*pb.RangeDescriptor{right}))
	}
	writeSeq(t, tc, acked, "after", 200)
	waitCompacted(t, c, vi, group.GetRangeId())
	if err := c.RestartServer(vi); err != nil {
		t.Fatal(err)
	}
	for _, r := range tableRanges(partitionMap(t, mc), table) {
		waitCaughtUp(t, c, vi, r.GetRangeId())
	}
	other := (vi + 1) % len(c.Servers)
	t.Logf("stopping %s", c.Servers[other].Config.ID)
	if err := c.StopServer(other); err != nil {
		t.Fatal(err)
	}
	writeSeq(t, tc, acked, "degraded", 30)
	verifyExactlyOnce(t, tc, acked)
}
