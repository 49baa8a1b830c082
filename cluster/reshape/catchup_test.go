package reshape

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/masterclient"
	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// TestReplicaDownAcrossSplit: a replica that is down while its range splits
// must host the split-off range within 10 s of coming back, with the data,
// whether it catches up by replaying the log (which carries the split) or by
// a snapshot taken after the split (the log was compacted meanwhile). The
// proof is that the split-off range then keeps a quorum and its data with
// another of its replicas stopped.
func TestReplicaDownAcrossSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	for _, kind := range []struct {
		name    string
		compact bool
		way     splitWay
	}{
		{"log replay", false, splitOut},
		{"snapshot after a log compaction", true, splitOut},
		// The split keeps the right range in the left's group: the
		// victim's group learns of the new span from a snapshot of
		// both spans (TSRNG003).
		{"in group, snapshot after a log compaction", true, splitIn},
		// The right span leaves the group (a group split) while the
		// victim is down: the victim's snapshot of the group no longer
		// holds it, and the left span's record of the birth has the
		// victim create its replica of the new group.
		{"group split, snapshot after a log compaction", true, splitThenDetach},
		{"group split, log replay", false, splitThenDetach},
	} {
		t.Run(kind.name, func(t *testing.T) {
			sn := splitPastDownFollower(t, "downsplit", kind.compact, kind.way)
			c, tc, acked, right, victim, vi := sn.c, sn.tc, sn.acked, sn.right, sn.victim, sn.vi

			back := time.Now()
			if err := c.RestartServer(vi); err != nil {
				t.Fatal(err)
			}
			waitCaughtUp(t, c, vi, right.GetRangeId())
			t.Logf("split-off range on %s after %v", victim, time.Since(back).Round(time.Millisecond))

			// Stop another replica: the split-off range lives on the victim
			// and one more server.
			degradedReadBack(t, c, tc, acked, func(i int) bool { return i != vi })
		})
	}
}

// hasSnapshot reports whether the replica of range id in dataDir has taken
// a Raft snapshot.
func hasSnapshot(dataDir string, id uint64) bool {
	ents, err := os.ReadDir(filepath.Join(dataDir, "ranges", fmt.Sprint(id), "snapshots"))
	return err == nil && len(ents) > 0
}

// TestRemovedAcrossGroupSplit: a follower is down while a span leaves its
// group (a group split, so the new group lists the follower) and while
// the group's namesake is moved off it onto a fourth server. Back, its
// copy of the old group is stale whole: it holds the span in a group it
// is no longer a member of, and never applies the split. The master's
// delete of the namesake's replica takes the stale group, and the
// follower joins the span's new group afresh and catches up (chaos seed
// 2262: the delete was refused for the group's other span, and the
// span's new group never started there). With another server then
// stopped, every acknowledged write reads back exactly once.
func TestRemovedAcrossGroupSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	sn := splitPastDownFollower(t, "removedsplit", false, splitThenDetach)
	movedOffWhileDown(t, sn.c, sn.mc, sn.tc, sn.acked, sn.left.GetRangeId(), sn.right, sn.vi)
}

// movedOffWhileDown moves range moved off stopped server vi onto a server
// it adds, restarts vi, and waits until vi's stale copy of moved's group
// is gone and vi caught up on range rejoined (a span that left that group
// while vi was down, whose new group lists vi); then degradedReadBack with
// one of rejoined's other servers stopped.
func movedOffWhileDown(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, tc *aztables.Client, acked map[string]int64, moved uint64, rejoined *pb.RangeDescriptor, vi int) {
	t.Helper()
	victim := c.Servers[vi].Config.ID
	fourth, err := c.AddServer()
	if err != nil {
		t.Fatal(err)
	}
	to := c.Servers[fourth].Config.ID
	if err := c.WaitServersRegistered(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	ctx := clustertest.Context(t, 2*time.Minute)
	err = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: moved, FromServerId: victim, ToServerId: to})
		return err
	})
	if err != nil {
		t.Fatalf("move range %d off %s onto %s: %v", moved, victim, to, err)
	}
	clustertest.WriteSeq(t, tc, acked, "moved", 30)
	if err := c.RestartServer(vi); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 40*time.Second, "the stale group gone from "+victim, func() bool {
		return c.Servers[vi].Server.ReplicaState(moved) == "absent"
	})
	waitCaughtUp(t, c, vi, rejoined.GetRangeId())
	degradedReadBack(t, c, tc, acked, func(i int) bool {
		return i != vi && i != fourth && clustertest.HasServer(rejoined, c.Servers[i].Config.ID)
	})
}

// degradedReadBack stops the first server stop picks, then writes more
// and reads every acknowledged write back exactly once.
func degradedReadBack(t *testing.T, c *cluster.Cluster, tc *aztables.Client, acked map[string]int64, stop func(i int) bool) {
	t.Helper()
	for i := range c.Servers {
		if stop(i) {
			t.Logf("stopping %s", c.Servers[i].Config.ID)
			if err := c.StopServer(i); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	clustertest.WriteSeq(t, tc, acked, "degraded", 30)
	clustertest.VerifyExactlyOnce(t, tc, acked)
}

// TestMergeTakesTheRightRangeAlone: a cross-group merge whose right range
// is the namesake of a group that serves other ranges takes it alone. Range
// B leaves A's group and splits in its group (X); A merges B, and X leaves
// group B first (master isolate), so no group outlives the range that names
// it (before, group B went on serving X under B's id: a restart dropped its
// log, and a late delete of B its log and directory; reliability.md 45).
// Then X splits in its group (Y), a follower is down while Y leaves the
// group and X is moved off it; back, its stale group X goes, it catches up
// on Y's group, and with another server stopped every acknowledged write
// reads back exactly once.
func TestMergeTakesTheRightRangeAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	const table = "namesakegone"
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
	tc := clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), table)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 3*time.Minute)
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tc, acked, "before", 30)
	groups := func() string {
		var out []string
		for _, r := range clustertest.TableRanges(clustertest.PartitionMap(t, mc), table) {
			out = append(out, fmt.Sprintf("%d[%q,%q) group %d", r.GetRangeId(), r.GetStart(), r.GetEnd(), r.GetGroupId()))
		}
		return strings.Join(out, " ")
	}
	at := func(key string) *pb.RangeDescriptor {
		t.Helper()
		for _, r := range clustertest.TableRanges(clustertest.PartitionMap(t, mc), table) {
			if r.GetStart() == key {
				return r
			}
		}
		t.Fatalf("no range starts at %q: %s", key, groups())
		return nil
	}
	call := func(what string, f func(ctx context.Context, m pb.MasterServiceClient) error) {
		t.Helper()
		if err := mc.Call(ctx, f); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	split := func(key string) {
		call("split at "+key, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: key, InGroup: true})
			return err
		})
	}
	// A transfer of a span's leadership to its own leader takes the span
	// out of its group first (master isolate), and changes nothing else.
	detach := func(id uint64) {
		call(fmt.Sprintf("detach range %d", id), func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: id, ToServerId: clustertest.PartitionMap(t, mc).GetLeaders()[id]})
			return err
		})
	}
	merge := func(left uint64) {
		call(fmt.Sprintf("merge range %d with its right neighbour", left), func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.Merge(ctx, &pb.MergeRequest{RangeId: left})
			return err
		})
	}
	a := at("").GetRangeId()
	split("k08")
	b := at("k08").GetRangeId()
	detach(b)
	split("k16")
	if x := at("k16"); x.GetGroupId() != b {
		t.Fatalf("want the range at k16 in group %d: %s", b, groups())
	}
	// A widens over B, the namesake of B's group; the range at k16 leaves
	// that group first.
	merge(a)
	x := at("k16")
	if at("").GetEnd() != "k16" || rangegroup.GroupOf(x) != x.GetRangeId() {
		t.Fatalf("want range %d merged into %d and the range at k16 in a group of its own: %s", b, a, groups())
	}
	split("k22")
	clustertest.WriteSeq(t, tc, acked, "shaped", 30)
	x, y := at("k16"), at("k22")
	if rangegroup.GroupOf(y) != x.GetRangeId() {
		t.Fatalf("want the range at k22 in group %d: %s", x.GetRangeId(), groups())
	}
	victim, vi := followerOf(t, c, mc, x)
	t.Logf("stopping %s; %s", victim, groups())
	if err := c.StopServer(vi); err != nil {
		t.Fatal(err)
	}
	detach(y.GetRangeId())
	movedOffWhileDown(t, c, mc, tc, acked, x.GetRangeId(), y, vi)
}
