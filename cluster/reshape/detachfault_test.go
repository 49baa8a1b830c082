package reshape

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// The group-mode variants of TestSplitStartFailsThenOpens and
// TestStaleParentDoesNotHoldUpSplitRange (docs/reliability.md, section
// 60). With --table-groups a table's first range is a span of an anchor
// group, and the master's split of it detaches it first (leaveAnchorGroup:
// one DETACH_SPAN entry in the anchor group's log, the span then a Raft
// group of its own on the same replicas), so the faults those tests place
// on the split land on the detach.

// anchorSpanOf returns table's only range, which must be a span of an
// anchor group (the cluster started with AwaitHomeGroup).
func anchorSpanOf(t *testing.T, m *pb.PartitionMap, table string) *pb.RangeDescriptor {
	t.Helper()
	rs := clustertest.TableRanges(m, table)
	if len(rs) != 1 {
		t.Fatalf("table %s has ranges %s, want one", table, describe(rs))
	}
	if g := rangegroup.GroupOf(rs[0]); g == rs[0].GetRangeId() {
		t.Fatalf("range %d of table %s is a group of its own, not a span of an anchor group", g, table)
	}
	return rs[0]
}

// TestDetachStartFailsThenOpens: the split of a span of an anchor group
// first detaches it, and the detach's new group starts through the same
// after-commit hook as a split's new range (RangeCreated), so the
// failpoint partitionserver/split/start-fails strikes the detach: on one
// server the detached range's group is not started after DETACH_SPAN
// applied there (no crash), and the anchor group no longer serves it.
// That server's heartbeat reconcile finds the range stored, assigned and
// unserved, and opens it (lifecycle.OpenStored) after 5 s, with no
// restart; the range then applies the split there as well. With another
// server stopped, that replica and the last one serve every
// acknowledged write.
func TestDetachStartFailsThenOpens(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// Not beside other tests: the failpoint is the process's.
	c := clustertest.StartTunedOpts(t, 3, clustertest.QuietPolicies, nil, true)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 2*time.Minute)
	mc := clustertest.MasterClient(t, c)
	const table = "strandeddetach"
	tc := clustertest.NewTable(t, sc, table)
	span := anchorSpanOf(t, clustertest.PartitionMap(t, mc), table)
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	time.Sleep(300 * time.Millisecond)

	// The detach before the split is the first start: the failpoint
	// strikes the detached range's group.
	right, absent := splitFailingFirstStart(ctx, t, c, mc, table, "k13")
	left := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	if left.GetRangeId() != span.GetRangeId() || rangegroup.GroupOf(left) != left.GetRangeId() {
		t.Fatalf("after the split the table's first range is %s, want range %d in a group of its own", describe([]*pb.RangeDescriptor{left}), span.GetRangeId())
	}
	clustertest.WaitFor(t, 30*time.Second, "every replica of both ranges serving", func() bool {
		for _, n := range c.Servers {
			st := n.Server
			if st == nil || st.ReplicaState(left.GetRangeId()) == "absent" || st.ReplicaState(right.GetRangeId()) == "absent" {
				return false
			}
		}
		return true
	})
	stranded, longest := absent(left.GetRangeId())
	if longest < time.Second {
		t.Fatalf("no replica of the detached range %d was missing for a second while another served (longest %v): the failpoint did not strike the detach", left.GetRangeId(), longest)
	}
	t.Logf("server %d's replica of the detached range %d was missing for %v", stranded, left.GetRangeId(), longest.Round(time.Millisecond))
	openedReplicaServes(t, c, tc, w, stranded)
}

// TestStaleAnchorDoesNotHoldUpDetachedRange replays
// TestStaleParentDoesNotHoldUpSplitRange with the table a span of an
// anchor group: a server cut off while the span leaves the group
// (DETACH_SPAN), the detached range splits, and the detached range is
// moved off that server. The cut-off server's copy of the anchor group
// still serves the span and covers the split-off range's start, but it is
// no stale group: the server is still a member of the anchor group, so
// the master's replica GC is refused deleting the span alone, and the
// split-off range is not created there while it is cut off. Healed, the
// anchor group catches up and applies the detach there, which makes the
// range a group of its own on that server and no longer the anchor's;
// that copy is stale (outside its configuration since the move). The
// replica GC, refused while the copy was a span, asks again as soon as
// the copy is reported at its new generation (before, only staleRetry,
// 30 s, after the refusal: the split-off range ran a voter short that
// long) and deletes it on the generation proof. The server then joins
// the split-off range, catches up, and with the range's other replica
// stopped serves every acknowledged write.
//
// The move's own delete is held by a failpoint (the cut-off server would
// not get it in a chaos run either); replica GC's are not.
func TestStaleAnchorDoesNotHoldUpDetachedRange(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTunedOpts(t, 4, clustertest.QuietPolicies, nil, true)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 3*time.Minute)
	const table = "staleanchor"
	tc := clustertest.NewTable(t, sc, table)
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tc, acked, "before", 30)

	span := anchorSpanOf(t, clustertest.PartitionMap(t, mc), table)
	group := rangegroup.GroupOf(span)
	leader, victim, spare := clustertest.RangeRoles(t, c, mc, span)
	if spare == "" {
		t.Fatalf("no spare server for range %d", span.GetRangeId())
	}
	vi := c.ServerIndex(victim)
	t.Logf("range %d (a span of group %d): leader %s, cut off %s, moved to %s", span.GetRangeId(), group, leader, victim, spare)

	failpoint.Enable("master/delete-replica-later", nil)
	t.Cleanup(func() { failpoint.Disable("master/delete-replica-later") })
	c.IsolateServer(vi, true)
	t.Cleanup(func() { c.IsolateServer(vi, false) })

	// The detach and the split, then the move of the detached range off
	// the cut-off server.
	right := splitListing(t, ctx, mc, table, "k13", victim, false)
	if err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: span.GetRangeId(), FromServerId: victim, ToServerId: spare})
		return err
	}); err != nil {
		t.Fatalf("move range %d %s -> %s: %v", span.GetRangeId(), victim, spare, err)
	}
	clustertest.WriteSeq(t, tc, acked, "cut", 50)

	// Cut off, the server still has the span in the anchor group (it
	// missed the detach) and not the split-off range.
	vs := c.Servers[vi].Server
	if st := clustertest.RangeInfo(vs, span.GetRangeId()); st == nil {
		t.Fatalf("%s lost its copy of range %d while cut off", victim, span.GetRangeId())
	}
	if clustertest.RangeInfo(vs, right.GetRangeId()) != nil {
		t.Logf("range %d created on %s while cut off", right.GetRangeId(), victim)
	}

	// Healed, the stale copy goes and the split-off range catches up.
	c.IsolateServer(vi, false)
	healed := time.Now()
	var target uint64
	for i, n := range c.Servers {
		if i == vi {
			continue
		}
		if st := clustertest.RangeInfo(n.Server, right.GetRangeId()); st != nil && st.GetAppliedIndex() > target {
			target = st.GetAppliedIndex()
		}
	}
	// Well within staleRetry (30 s), after which the replica GC asks
	// again whatever it was refused.
	clustertest.WaitFor(t, 10*time.Second, fmt.Sprintf("%s's copy of range %d gone", victim, span.GetRangeId()), func() bool {
		return clustertest.RangeInfo(vs, span.GetRangeId()) == nil
	})
	t.Logf("range %d gone from %s %v after the heal", span.GetRangeId(), victim, time.Since(healed).Round(time.Millisecond))
	clustertest.WaitFor(t, 30*time.Second, fmt.Sprintf("range %d on %s caught up to index %d", right.GetRangeId(), victim, target), func() bool {
		st := clustertest.RangeInfo(vs, right.GetRangeId())
		return st != nil && st.GetAppliedIndex() >= target
	})
	t.Logf("range %d on %s caught up %v after the heal", right.GetRangeId(), victim, time.Since(healed).Round(time.Millisecond))
	if clustertest.RangeInfo(vs, group) == nil {
		t.Fatalf("%s no longer hosts anchor group %d, whose member it still is", victim, group)
	}
	failpoint.Disable("master/delete-replica-later")

	// The split-off range lives on the healed server and one more.
	degradedReadBack(t, c, tc, acked, func(i int) bool {
		id := c.Servers[i].Config.ID
		return id != victim && clustertest.HasServer(right, id)
	})
}
