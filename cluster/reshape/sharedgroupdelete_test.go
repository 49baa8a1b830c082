package reshape

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// TestDroppedTableSpanLeavesSharedGroup: a range of a deleted table that
// lands in another table's Raft group (a late AddSpan, as a deposed
// master's would be; docs/range-groups.md, stage 7, step 5) leaves the
// group through the group's leader and is then deleted alone on every
// server, under a write load to the other table: the other table's range
// stays on every server and every acknowledged write reads back exactly
// once. Before, every server's next heartbeat deleted the group whole,
// the live table's range with it. (The master creating tables in shared
// groups is step 4; until then the span is added through the partition
// servers' RPC directly.)
func TestDroppedTableSpanLeavesSharedGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 2*time.Minute)
	tc := clustertest.NewTable(t, sc, "keep")
	clustertest.NewTable(t, sc, "gone")
	mc := clustertest.MasterClient(t, c)
	m := clustertest.PartitionMap(t, mc)
	keep, gone := clustertest.TableRanges(m, "keep")[0], clustertest.TableRanges(m, "gone")[0]
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	if _, err := sc.DeleteTable(ctx, "gone", nil); err != nil {
		t.Fatal(err)
	}
	const late = 1000 // an id the master never allocates here
	span := &pb.RangeDescriptor{RangeId: late, GroupId: keep.GetRangeId(), Table: "gone", TableId: gone.GetTableId(),
		Generation: 1, Replicas: keep.GetReplicas()}
	addSpanOnLeader(t, c, keep.GetRangeId(), span, late)
	waitReplicas(t, c, 30*time.Second, "the dropped span gone from every server, keep's range on every server", []uint64{late}, []uint64{keep.GetRangeId()})
	acked := w.Halt()
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}
	t.Logf("%d writes acknowledged, %d failed", len(acked), w.Failed.Load())
	clustertest.VerifyExactlyOnce(t, tc, acked)
	// A follower that applied the add late detaches and deletes it too.
	waitReplicas(t, c, 20*time.Second, "still: the dropped span on no server, keep's range on every server", []uint64{late}, []uint64{keep.GetRangeId()})
}

// TestDeleteTableOfSharedGroup: table "gone"'s only range is a span of
// table "keep"'s Raft group (added through the partition servers' RPC,
// the map adopting it from heartbeats, until step 4 creates such tables
// through the master). Deleting "gone" under writes to "keep" detaches
// its range before the freeze (the master's isolateDeleted, or the
// group leader's own detach, whichever comes first), answers the delete,
// and deletes the range alone: "keep"'s range stays on every server, in
// its group, and every acknowledged write reads back exactly once.
// Before, the freeze was allowed on the shared span and every server's
// next heartbeat deleted the group whole, "keep"'s range with it.
func TestDeleteTableOfSharedGroup(t *testing.T) {
	// The shared group is built by hand (sharedGroupTables), so the
	// tables start in groups of their own (TestDeleteTableOfAnchorGroup
	// is the master's path).
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, func(m *master.Config) { clustertest.QuietPolicies(m); m.TableGroups = false }, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 2*time.Minute)
	tc, keep := sharedGroupTables(t, c, sc)
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	if _, err := sc.DeleteTable(ctx, "gone", nil); err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, c, 30*time.Second, "gone's span deleted on every server, keep's range on every server", []uint64{added}, []uint64{keep.GetRangeId()})
	acked := w.Halt()
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}
	t.Logf("%d writes acknowledged, %d failed", len(acked), w.Failed.Load())
	clustertest.VerifyExactlyOnce(t, tc, acked)
	if rs := clustertest.TableRanges(clustertest.PartitionMap(t, clustertest.MasterClient(t, c)), "keep"); len(rs) != 1 || rs[0].GetRangeId() != keep.GetRangeId() {
		t.Errorf("keep's ranges after the delete: %v", rs)
	}
}

// added is the id of table "gone"'s range that sharedGroupTables adds to
// table "keep"'s group: an id the master never allocates in these tests.
const added = 1000

// sharedGroupTables creates tables "keep" and "gone" and makes "gone"'s
// only range a span of "keep"'s Raft group: a range added to the group
// through the partition servers' RPC, which the map adopts from
// heartbeats in place of "gone"'s first range (until step 4 creates such
// tables through the master). It writes an entity to "gone" there and
// returns "keep"'s client and range.
func sharedGroupTables(t *testing.T, c *cluster.Cluster, sc *aztables.ServiceClient) (*aztables.Client, *pb.RangeDescriptor) {
	t.Helper()
	ctx := clustertest.Context(t, time.Minute)
	tc := clustertest.NewTable(t, sc, "keep")
	clustertest.NewTable(t, sc, "gone")
	mc := clustertest.MasterClient(t, c)
	m := clustertest.PartitionMap(t, mc)
	keep, gone := clustertest.TableRanges(m, "keep")[0], clustertest.TableRanges(m, "gone")[0]
	span := &pb.RangeDescriptor{RangeId: added, GroupId: keep.GetRangeId(), Table: "gone", TableId: gone.GetTableId(),
		Generation: 1, Replicas: keep.GetReplicas()}
	addSpanOnLeader(t, c, keep.GetRangeId(), span, added)
	clustertest.WaitFor(t, 20*time.Second, "the map: gone's range is a span of keep's group", func() bool {
		rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), "gone")
		return len(rs) == 1 && rs[0].GetRangeId() == added && rs[0].GetGroupId() == keep.GetRangeId()
	})
	if _, err := sc.NewClient("gone").AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatalf("write to gone's span in keep's group: %v", err)
	}
	return tc, keep
}

// TestDeleteTableOfSharedGroupAcrossMasterFailover: as
// TestDeleteTableOfSharedGroup, with the leading master deposed at
// master/delete-table/after-isolate (gone's range detached, not frozen,
// nothing recorded): the next leader resumes the freezing (it isolates
// again, which the detached range answers, and freezes), the name is
// free again once it has, and "keep" loses nothing.
func TestDeleteTableOfSharedGroupAcrossMasterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// Not beside another test: the failpoint is the process's.
	// The shared group is built by hand: tables in groups of their own.
	c, err := cluster.Start(cluster.Options{Masters: 3, Servers: 3, Frontends: 1, DataDir: t.TempDir(),
		TuneMaster: func(m *master.Config) { clustertest.QuietPolicies(m); m.TableGroups = false },
		TuneServer: func(cfg *partitionserver.Config) { cfg.HeartbeatInterval = 200 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 2*time.Minute)
	tc, keep := sharedGroupTables(t, c, sc)
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	failpoint.Enable("master/delete-table/after-isolate", func() error {
		once.Do(func() { close(reached) })
		<-release
		return errors.New("the master dies after the isolate")
	})
	t.Cleanup(func() { failpoint.Disable("master/delete-table/after-isolate") })
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	go func() {
		_, err := sc.DeleteTable(ctx, "gone", nil)
		t.Logf("delete: %v", err)
	}()
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the delete never isolated gone's range")
	}
	old := clustertest.LeaderOf(t, c)
	if err := old.StepDown(); err != nil {
		t.Fatalf("step down: %v", err)
	}
	clustertest.WaitFor(t, 10*time.Second, "another master to lead", func() bool {
		l := clustertest.LeaderOf(t, c)
		return l != old
	})
	failpoint.Disable("master/delete-table/after-isolate")
	close(release)
	clustertest.WaitFor(t, 30*time.Second, "the name free again (the new leader froze and confirmed)", func() bool {
		_, err := sc.CreateTable(ctx, "gone", nil)
		return err == nil || clustertest.AzureCode(err, http.StatusConflict, "TableAlreadyExists")
	})
	waitReplicas(t, c, 30*time.Second, "gone's old span deleted on every server, keep's range on every server", []uint64{added}, []uint64{keep.GetRangeId()})
	acked := w.Halt()
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}
	t.Logf("%d writes acknowledged, %d failed", len(acked), w.Failed.Load())
	clustertest.VerifyExactlyOnce(t, tc, acked)
	if _, err := sc.NewClient("gone").GetEntity(ctx, "p", "r", nil); err == nil {
		t.Error("the new table holds the deleted table's entity")
	}
}

// addSpanOnLeader adds span to group through whichever server leads it
// (AddSpan), waiting until one applied it.
func addSpanOnLeader(t *testing.T, c *cluster.Cluster, group uint64, span *pb.RangeDescriptor, floor uint64) {
	t.Helper()
	ctx := clustertest.Context(t, time.Minute)
	clustertest.WaitFor(t, 20*time.Second, fmt.Sprintf("range %d added to group %d on its leader", span.GetRangeId(), group), func() bool {
		for _, n := range c.Servers {
			if _, err := n.Server.Service().AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: group, Range: span, Floor: floor}); err == nil {
				return true
			}
		}
		return false
	})
}
