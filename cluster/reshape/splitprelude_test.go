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
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// splitScene is a table whose only range split at k13 while a follower of
// it (the victim) was stopped: the victim is still down, and the writes
// acknowledged before and after the split are in acked.
type splitScene struct {
	c           *cluster.Cluster
	tc          *aztables.Client
	mc          *masterclient.Client
	acked       map[string]int64
	left, right *pb.RangeDescriptor
	victim      string
	vi          int
}

// splitWay is how splitPastDownFollower's split is made.
type splitWay int

const (
	// splitOut: the right range is a Raft group of its own (a split).
	splitOut splitWay = iota
	// splitIn: the right range stays in the left's Raft group
	// (docs/range-groups.md): the victim then learns of it from its
	// group's log or snapshot alone.
	splitIn
	// splitThenDetach: the split in the group is made before the victim
	// stops (it holds both spans), and the right span leaves the group
	// for one of its own while the victim is down (stage 4, an operator's
	// leadership transfer, here to the group's own leader): the victim
	// learns of the new group from the record of its birth in the left
	// span.
	splitThenDetach
)

// splitPastDownFollower starts three servers and sets the scene. With
// compact, the servers snapshot and compact their logs within a few
// writes, and the scene waits until both live replicas of the left range
// have: the victim cannot replay the split from their logs.
func splitPastDownFollower(t *testing.T, table string, compact bool, way splitWay) *splitScene {
	t.Helper()
	var tune func(*partitionserver.Config)
	if compact {
		tune = compactingLogs
	}
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, tune)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 3*time.Minute)
	sn := &splitScene{c: c, tc: clustertest.NewTable(t, sc, table), mc: clustertest.MasterClient(t, c), acked: map[string]int64{}}
	clustertest.WriteSeq(t, sn.tc, sn.acked, "before", 30)
	sn.left = clustertest.TableRanges(clustertest.PartitionMap(t, sn.mc), table)[0]
	sn.victim, sn.vi = followerOf(t, c, sn.mc, sn.left)
	if way == splitThenDetach {
		sn.right = splitListing(t, ctx, sn.mc, table, "k13", sn.victim, true)
		clustertest.WriteSeq(t, sn.tc, sn.acked, "in group", 30)
	}
	t.Logf("stopping %s across the split", sn.victim)
	if err := c.StopServer(sn.vi); err != nil {
		t.Fatal(err)
	}
	if way == splitThenDetach {
		id := sn.right.GetRangeId()
		err := sn.mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: id, ToServerId: clustertest.PartitionMap(t, sn.mc).GetLeaders()[id]})
			return err
		})
		if err != nil {
			t.Fatalf("range %d out of its group: %v", id, err)
		}
	} else {
		sn.right = splitListing(t, ctx, sn.mc, table, "k13", sn.victim, way == splitIn)
	}
	clustertest.WriteSeq(t, sn.tc, sn.acked, "after", 200)
	if compact {
		waitCompacted(t, c, sn.vi, sn.left.GetRangeId())
	}
	return sn
}

// compactingLogs has partition servers snapshot and compact their logs
// within a few writes.
func compactingLogs(s *partitionserver.Config) {
	s.SnapshotThreshold = 64
	s.SnapshotInterval = 100 * time.Millisecond
	s.TrailingLogs = 8
}

// waitCompacted waits until every server but the one at index down holds a
// snapshot of group id: a replica down meanwhile cannot replay the log
// before it.
func waitCompacted(t *testing.T, c *cluster.Cluster, down int, id uint64) {
	t.Helper()
	clustertest.WaitFor(t, 30*time.Second, fmt.Sprintf("the log of group %d compacted", id), func() bool {
		for i, n := range c.Servers {
			if i != down && !hasSnapshot(n.Config.DataDir, id) {
				return false
			}
		}
		return true
	})
}

// waitCaughtUp waits until the server at index vi has applied range id as
// far as the furthest of the others had when asked.
func waitCaughtUp(t *testing.T, c *cluster.Cluster, vi int, id uint64) {
	t.Helper()
	var target uint64
	for i, n := range c.Servers {
		if st := clustertest.RangeInfo(n.Server, id); i != vi && st != nil && st.GetAppliedIndex() > target {
			target = st.GetAppliedIndex()
		}
	}
	clustertest.WaitFor(t, 20*time.Second, fmt.Sprintf("range %d on %s caught up to index %d", id, c.Servers[vi].Config.ID, target), func() bool {
		st := clustertest.RangeInfo(c.Servers[vi].Server, id)
		return st != nil && st.GetAppliedIndex() >= target
	})
}

// followerOf waits for range d's leader and returns a replica of d that
// does not lead it, and its server index.
func followerOf(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, d *pb.RangeDescriptor) (string, int) {
	t.Helper()
	var victim string
	clustertest.WaitFor(t, 10*time.Second, "a range leader", func() bool {
		l := clustertest.PartitionMap(t, mc).GetLeaders()[d.GetRangeId()]
		for _, r := range d.GetReplicas() {
			if l != "" && r.GetServerId() != l {
				victim = r.GetServerId()
				return true
			}
		}
		return false
	})
	return victim, c.ServerIndex(victim)
}

// splitListing splits table at key through the master and returns the
// range that starts there, which must list server victim.
func splitListing(t *testing.T, ctx context.Context, mc *masterclient.Client, table, key, victim string, inGroup bool) *pb.RangeDescriptor {
	t.Helper()
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: key, InGroup: inGroup})
		return err
	})
	var right *pb.RangeDescriptor
	for _, r := range clustertest.TableRanges(clustertest.PartitionMap(t, mc), table) {
		if r.GetStart() == key {
			right = r
		}
	}
	if right == nil {
		// A retried split whose first attempt succeeded reports the key
		// taken; only a missing range is a failure.
		t.Fatalf("split at %s: %v", key, err)
	}
	if !clustertest.HasServer(right, victim) {
		t.Fatalf("split-off range %s does not list %s", describe([]*pb.RangeDescriptor{right}), victim)
	}
	return right
}
