package cluster_test

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/internal/masterclient"
	"tablestore/internal/rpcerr"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// handTable starts four partition servers with the master's policies off
// (tuneS, when set, tunes them), creates table and writes n entities into
// it; it returns the cluster, the table's client, a master client, the
// acknowledged writes and a context of two minutes.
func handTable(t *testing.T, table string, n int, tuneS func(*partitionserver.Config)) (*cluster.Cluster, *aztables.Client, *masterclient.Client, map[string]int64, context.Context) {
	t.Helper()
	return handTableM(t, table, n, clustertest.QuietPolicies, tuneS)
}

// handTableM is handTable with the master tuned by tuneM.
func handTableM(t *testing.T, table string, n int, tuneM func(*master.Config), tuneS func(*partitionserver.Config)) (*cluster.Cluster, *aztables.Client, *masterclient.Client, map[string]int64, context.Context) {
	t.Helper()
	c := clustertest.StartTuned(t, 4, tuneM, tuneS)
	tcl := clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), table)
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tcl, acked, "before", n)
	return c, tcl, clustertest.MasterClient(t, c), acked, clustertest.Context(t, 2*time.Minute)
}

// moveDirect asks master 0 for a move in one RPC bounded by ctx alone
// (masterclient bounds each attempt to 5 s, shorter than the holds here).
func moveDirect(ctx context.Context, c *cluster.Cluster, id uint64, from, to string) error {
	conn, err := grpc.NewClient(c.Masters[0].Config.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pb.NewMasterServiceClient(conn).Move(ctx, &pb.MoveRequest{RangeId: id, ToServerId: to, FromServerId: from})
	return err
}

// leaderMembers waits until range id's current leader (the map's) reports
// its members and returns them.
func leaderMembers(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, id uint64) (voters, nonvoters []string) {
	t.Helper()
	clustertest.WaitFor(t, 10*time.Second, "the range's leader reporting its members", func() bool {
		l := clustertest.PartitionMap(t, mc).GetLeaders()[id]
		if l == "" {
			return false
		}
		info := clustertest.RangeInfo(c.Servers[c.ServerIndex(l)].Server, id)
		if info == nil || len(info.GetVoters()) == 0 {
			return false
		}
		voters, nonvoters = info.GetVoters(), info.GetNonvoters()
		return true
	})
	return voters, nonvoters
}

// leaveNonvoter interrupts a move of range id of table after its
// non-voter add (the failpoint fails it, as if the master died there) and
// returns the server holding the non-voter the move left.
func leaveNonvoter(ctx context.Context, t *testing.T, c *cluster.Cluster, mc *masterclient.Client, table string, id uint64) string {
	t.Helper()
	var d *pb.RangeDescriptor
	for _, r := range clustertest.TableRanges(clustertest.PartitionMap(t, mc), table) {
		if r.GetRangeId() == id {
			d = r
		}
	}
	_, from, to := clustertest.RangeRoles(t, c, mc, d)
	failpoint.Enable("master/add/after-nonvoter", nil)
	err := moveDirect(ctx, c, id, from, to)
	failpoint.Disable("master/add/after-nonvoter")
	if err == nil {
		t.Fatal("move succeeded through the failpoint")
	}
	if _, nonvoters := leaderMembers(t, c, mc, id); !slices.Equal(nonvoters, []string{to}) {
		t.Fatalf("range %d's leader reports non-voters %v after the interrupted move, want [%s]", id, nonvoters, to)
	}
	return to
}

// shortGrace is the replica-set check's grace in the tests that wait it
// out (the default 5 s is no more telling than 2 s).
const shortGrace = 2 * time.Second

// quietShortGrace is clustertest.QuietPolicies with the check's grace at shortGrace.
func quietShortGrace(m *master.Config) {
	clustertest.QuietPolicies(m)
	m.ReconcileGrace = shortGrace
}

// TestMoveAddsNonvoterFirst moves a range's replica off a server that is
// down onto one whose Raft traffic is stalled, so the new replica cannot
// catch up. Added as a voter, it would make four voters of which two are
// live, and the range could commit nothing until the stall ended. Added as
// a non-voter, it leaves the quorum to the two live voters: writes go on
// while the move waits, and once the stall ends the move promotes the
// caught-up member and removes the down one. The move is held past the
// replica-set check's grace: the check must leave a running move's
// non-voter alone.
func TestMoveAddsNonvoterFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "nonvoterfirst"
	c, tcl, mc, acked, ctx := handTableM(t, table, 20, quietShortGrace, nil)
	rng := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	id := rng.GetRangeId()
	_, from, to := clustertest.RangeRoles(t, c, mc, rng)
	fi, ti := c.ServerIndex(from), c.ServerIndex(to)
	if err := c.StopServer(fi); err != nil {
		t.Fatal(err)
	}
	c.PauseServer(ti, true)
	added, release := make(chan struct{}), make(chan struct{})
	failpoint.Enable("master/add/after-nonvoter", func() error {
		close(added)
		<-release
		return nil
	})
	t.Cleanup(func() { failpoint.Disable("master/add/after-nonvoter") })
	moved := make(chan error, 1)
	go func() { moved <- moveDirect(ctx, c, id, from, to) }()
	select {
	case <-added:
	case err := <-moved:
		t.Fatalf("the move %s -> %s ended before adding its non-voter: %v", from, to, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the move added no non-voter within 30 s")
	}
	if voters, nonvoters := leaderMembers(t, c, mc, id); !slices.Equal(nonvoters, []string{to}) || !clustertest.SameIDs(voters, rng.GetReplicas()) {
		t.Fatalf("the leader reports voters %v, non-voters %v; want voters %v and the non-voter %s", voters, nonvoters, rng.GetReplicas(), to)
	}
	// Committed by the leader and the one live follower, the stalled
	// non-voter counting toward no quorum.
	clustertest.WriteSeq(t, tcl, acked, "stalled", 20)
	// Held past the replica-set check's grace (shortGrace) and a policy
	// tick: the non-voter was added before the writes above.
	time.Sleep(shortGrace + time.Second)
	if _, nonvoters := leaderMembers(t, c, mc, id); !slices.Equal(nonvoters, []string{to}) {
		t.Fatalf("the running move's non-voter %s is gone after the check's grace: non-voters %v", to, nonvoters)
	}
	close(release)
	c.PauseServer(ti, false)
	if err := <-moved; err != nil {
		t.Fatalf("move %s -> %s: %v", from, to, err)
	}
	got := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	if len(got.GetReplicas()) != 3 || clustertest.HasServer(got, from) || !clustertest.HasServer(got, to) {
		t.Fatalf("replicas %v after the move %s -> %s", got.GetReplicas(), from, to)
	}
	clustertest.WaitFor(t, 10*time.Second, "the leader's configuration: the descriptor's voters, no non-voter", func() bool {
		voters, nonvoters := leaderMembers(t, c, mc, id)
		return len(nonvoters) == 0 && clustertest.SameIDs(voters, clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetReplicas())
	})
	clustertest.WriteSeq(t, tcl, acked, "after", 20)
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// TestNonvoterOfInterruptedMoveRemoved stops a move after it added its
// non-voter (a failpoint, as if the master died there) and keeps the
// master down longer than the idle range takes to go quiet, then restarts
// it: the new leading master must remove the non-voter the move left
// (nothing would promote it, and the leader would replicate to it for
// ever; a quiet range reports no members, so it must stay open while it
// has one), keep the range's three voters and its data, and the range must
// move again.
func TestNonvoterOfInterruptedMoveRemoved(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "nonvoterleft"
	// The grace at shortGrace: the restarted master removes the
	// non-voter that much after it sees it.
	c, tcl, mc, acked, ctx := handTableM(t, table, 20, quietShortGrace, func(s *partitionserver.Config) { s.QuiesceAfter = time.Second })
	rng := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	id := rng.GetRangeId()
	_, from, _ := clustertest.RangeRoles(t, c, mc, rng)
	to := leaveNonvoter(ctx, t, c, mc, table, id)
	if err := c.StopMaster(0); err != nil {
		t.Fatal(err)
	}
	// No master and no request for three times QuiesceAfter: an idle
	// range without a non-voter would be quiet by now.
	time.Sleep(3 * time.Second)
	if err := c.RestartMaster(0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	clustertest.WaitFor(t, 30*time.Second, "the non-voter removed, the descriptor's three voters kept", func() bool {
		d := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
		voters, nonvoters := leaderMembers(t, c, mc, id)
		return len(nonvoters) == 0 && len(d.GetReplicas()) == 3 && !clustertest.HasServer(d, to) && clustertest.SameIDs(voters, d.GetReplicas())
	})
	t.Logf("non-voter on %s removed %v after the master's restart", to, time.Since(start).Round(time.Millisecond))
	clustertest.WaitFor(t, 20*time.Second, "the non-voter's replica on "+to+" deleted", func() bool {
		return c.Servers[c.ServerIndex(to)].Server.ReplicaState(id) == "absent"
	})
	// The interrupted move's master, were it still running, could not
	// bring the removed member back as a voter.
	l := clustertest.PartitionMap(t, mc).GetLeaders()[id]
	_, err := c.Servers[c.ServerIndex(l)].Server.Service().ChangeReplicas(ctx, &pb.ChangeReplicasRequest{
		RangeId: id, AddServerId: to, AddMode: pb.AddMode_ADD_MODE_PROMOTE})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("promoting %s, no longer a member, on the leader %s: %v, want FAILED_PRECONDITION", to, l, err)
	}
	if err := moveDirect(ctx, c, id, from, to); err != nil {
		t.Fatalf("move %s -> %s after the recovery: %v", from, to, err)
	}
	if got := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]; len(got.GetReplicas()) != 3 || !clustertest.HasServer(got, to) || clustertest.HasServer(got, from) {
		t.Fatalf("replicas %v after the second move %s -> %s", got.GetReplicas(), from, to)
	}
	// A promotion retried after it succeeded (onLeader retries a call
	// whose answer was lost) succeeds and keeps the voters; a clean-up of
	// a non-voter that has been promoted meanwhile is refused.
	l = clustertest.PartitionMap(t, mc).GetLeaders()[id]
	ls := c.Servers[c.ServerIndex(l)].Server.Service()
	resp, err := ls.ChangeReplicas(ctx, &pb.ChangeReplicasRequest{RangeId: id, AddServerId: to, AddMode: pb.AddMode_ADD_MODE_PROMOTE})
	if err != nil || len(resp.GetRange().GetReplicas()) != 3 || !clustertest.HasServer(resp.GetRange(), to) {
		t.Fatalf("promoting %s again on the leader %s: %v, replicas %v", to, l, err, resp.GetRange().GetReplicas())
	}
	_, err = ls.ChangeReplicas(ctx, &pb.ChangeReplicasRequest{RangeId: id, RemoveServerId: to, RemoveOnlyNonvoter: true})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("removing the voter %s as a non-voter on the leader %s: %v, want FAILED_PRECONDITION", to, l, err)
	}
	clustertest.WriteSeq(t, tcl, acked, "after", 20)
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// TestReshapeDropsNonvoter splits and merges ranges that hold a non-voter
// an interrupted move left (before the master's check removed it). A
// non-voter applies the split and the merge like the voters, but is in no
// descriptor: it started the split's new range on its server, listed
// nowhere, and a merge stopped its server (its fsm found no replica of the
// merged neighbour there). The leader now removes every member its
// descriptor does not list before it proposes either: a non-voter, or a
// voter whose promotion's record a crash cut off.
func TestReshapeDropsNonvoter(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// A removed non-voter's replica reports no change after its removal:
	// the master learns it is stale from its server's next full report,
	// which at the default interval (10 s) came up to 10 s after the
	// removal depending on when the cluster started.
	const table = "nonvoterreshape"
	c, tcl, mc, acked, ctx := handTable(t, table, 40, func(s *partitionserver.Config) { s.FullReportInterval = 2 * time.Second })
	leave := func(id uint64) string { return leaveNonvoter(ctx, t, c, mc, table, id) }

	parent := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()
	nv := leave(parent)
	split, err := clustertest.SplitRetrying(ctx, t, mc, table, "k13")
	if err != nil {
		t.Fatalf("split with a non-voter on %s: %v", nv, err)
	}
	child := split.GetRight().GetRangeId()
	if _, nonvoters := leaderMembers(t, c, mc, parent); len(nonvoters) != 0 {
		t.Fatalf("range %d's non-voters after the split: %v", parent, nonvoters)
	}
	clustertest.WriteSeq(t, tcl, acked, "split", 20)
	if st := c.Servers[c.ServerIndex(nv)].Server.ReplicaState(child); st != "absent" {
		t.Fatalf("the split's new range %d is %s on %s, which held only a non-voter of its parent", child, st, nv)
	}

	nv = leave(parent)
	if _, err := clustertest.MergeRetrying(ctx, t, mc, parent); err != nil {
		t.Fatalf("merge with a non-voter on %s: %v", nv, err)
	}
	if _, nonvoters := leaderMembers(t, c, mc, parent); len(nonvoters) != 0 {
		t.Fatalf("range %d's non-voters after the merge: %v", parent, nonvoters)
	}
	clustertest.WriteSeq(t, tcl, acked, "merged", 20)
	clustertest.WaitFor(t, 30*time.Second, "the dropped non-voters' replicas deleted", func() bool {
		return c.Servers[c.ServerIndex(nv)].Server.ReplicaState(parent) == "absent"
	})

	// A voter the descriptor does not list (a promotion whose record a
	// crash cut off) would take over the merged neighbour it holds no
	// replica of, as the non-voter did.
	if _, err := clustertest.SplitRetrying(ctx, t, mc, table, "k13"); err != nil {
		t.Fatal(err)
	}
	nv = leave(parent)
	l := clustertest.PartitionMap(t, mc).GetLeaders()[parent]
	failpoint.Enable("partitionserver/change-replicas/before-record", nil)
	_, err = c.Servers[c.ServerIndex(l)].Server.Service().ChangeReplicas(ctx, &pb.ChangeReplicasRequest{
		RangeId: parent, AddServerId: nv, AddMode: pb.AddMode_ADD_MODE_PROMOTE})
	failpoint.Disable("partitionserver/change-replicas/before-record")
	if err == nil {
		t.Fatal("the promotion was recorded through the failpoint")
	}
	if voters, _ := leaderMembers(t, c, mc, parent); len(voters) != 4 {
		t.Fatalf("range %d's voters %v after the unrecorded promotion of %s, want four", parent, voters, nv)
	}
	// The unrecorded voter leads (elected after the crash that cut its
	// record off): it cannot remove itself, so it hands the lead to a
	// listed voter, which does.
	if _, err := c.Servers[c.ServerIndex(l)].Server.Service().TransferLeader(ctx, &pb.TransferLeaderRequest{RangeId: parent, ToServerId: nv}); err != nil {
		t.Fatalf("transfer range %d's lead to %s: %v", parent, nv, err)
	}
	clustertest.WaitFor(t, 10*time.Second, nv+" leading range "+strconv.FormatUint(parent, 10), func() bool {
		return clustertest.PartitionMap(t, mc).GetLeaders()[parent] == nv
	})
	// The leader removes the unlisted voter before it proposes the merge
	// (the master also retries a committed merge that failed).
	start := time.Now()
	var last time.Time
	clustertest.WaitFor(t, 45*time.Second, "the merge done despite the unrecorded voter", func() bool {
		if len(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)) == 1 {
			return true
		}
		if time.Since(last) > 3*time.Second {
			last = time.Now()
			err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
				_, err := m.Merge(ctx, &pb.MergeRequest{RangeId: parent})
				return err
			})
			t.Logf("merge of range %d: %v", parent, err)
		}
		return false
	})
	t.Logf("merged %v after the unrecorded promotion", time.Since(start).Round(time.Millisecond))
	clustertest.WriteSeq(t, tcl, acked, "merged2", 20)
	clustertest.VerifyExactlyOnce(t, tcl, acked)

	// A voter whose removal's record a crash cut off: the descriptor
	// still lists it. A split copied it into the new range's voters,
	// which it never joins (it gets none of the parent's entries): the
	// new range had a phantom voter, one failure from no quorum. The
	// leader records the removal before it proposes the split.
	l = clustertest.PartitionMap(t, mc).GetLeaders()[parent]
	var gone string
	voters, _ := leaderMembers(t, c, mc, parent)
	for _, v := range voters {
		if v != l {
			gone = v
		}
	}
	failpoint.Enable("partitionserver/change-replicas/before-record", nil)
	_, err = c.Servers[c.ServerIndex(l)].Server.Service().ChangeReplicas(ctx, &pb.ChangeReplicasRequest{RangeId: parent, RemoveServerId: gone})
	failpoint.Disable("partitionserver/change-replicas/before-record")
	if err == nil {
		t.Fatal("the removal was recorded through the failpoint")
	}
	if voters, _ := leaderMembers(t, c, mc, parent); slices.Contains(voters, gone) {
		t.Fatalf("range %d's voters %v: %s not removed (%v)", parent, voters, gone, err)
	}
	split, err = clustertest.SplitRetrying(ctx, t, mc, table, "k13")
	if err != nil {
		t.Fatalf("split after the unrecorded removal of %s: %v", gone, err)
	}
	if clustertest.HasServer(split.GetRight(), gone) || clustertest.HasServer(split.GetLeft(), gone) {
		t.Fatalf("split after the unrecorded removal of %s from range %d: replicas %v and %v, listing it", gone, parent, split.GetLeft().GetReplicas(), split.GetRight().GetReplicas())
	}
	clustertest.WriteSeq(t, tcl, acked, "split2", 20)
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// TestUnlistedSplitChildDeleted splits a range while a member its
// descriptor does not list is still in its configuration (a failpoint
// skips the leader's settling, as a change another master raced in would):
// that member applies the split, which stores the new range's state on its
// server. The server must not start the new range, whose descriptor lists
// no replica there, and must delete that state, or a restart would open
// it: a replica no descriptor lists, at the map's generation, which the
// replica GC never collects. A crash between the split's apply and that
// delete (a failpoint skips it) leaves the state to the restart, which
// deletes it (splitLeftover).
func TestUnlistedSplitChildDeleted(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, tc := range []struct {
		name  string
		crash bool // the delete after the split's apply never runs
	}{
		{name: "after the split", crash: false},
		{name: "at the restart after a crash", crash: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := "unlistedchild"
			if tc.crash {
				table = "unlistedcrash"
			}
			c, tcl, mc, acked, ctx := handTable(t, table, 20, nil)
			d := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
			parent := d.GetRangeId()
			nv := leaveNonvoter(ctx, t, c, mc, table, parent)
			failpoint.Enable("partitionserver/split/unsettled", nil)
			var kept atomic.Bool // RangeCreated skipped its delete (after the commit)
			if tc.crash {
				failpoint.Enable("partitionserver/split/keep-unlisted", func() error {
					kept.Store(true)
					return failpoint.ErrInjected
				})
			}
			split, err := clustertest.SplitRetrying(ctx, t, mc, table, "k13")
			failpoint.Disable("partitionserver/split/unsettled")
			if err != nil {
				failpoint.Disable("partitionserver/split/keep-unlisted")
				t.Fatal(err)
			}
			child := split.GetRight().GetRangeId()
			ni := c.ServerIndex(nv)
			clustertest.WaitFor(t, 10*time.Second, "the non-voter on "+nv+" applying the split", func() bool {
				info := clustertest.RangeInfo(c.Servers[ni].Server, parent)
				return info != nil && info.GetGeneration() > d.GetGeneration()
			})
			if tc.crash {
				// The state the split's apply stored stays: the delete
				// after it is skipped, as by a crash.
				clustertest.WaitFor(t, 10*time.Second, "the new range's state committed on "+nv, func() bool {
					return kept.Load() && c.Servers[ni].Server.HasStoredState(child)
				})
				if err := c.CrashServer(ni); err != nil {
					t.Fatal(err)
				}
				failpoint.Disable("partitionserver/split/keep-unlisted")
			} else {
				clustertest.WaitFor(t, 10*time.Second, "the new range's state on "+nv+" deleted", func() bool {
					return !c.Servers[ni].Server.HasStoredState(child)
				})
				if err := c.StopServer(ni); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.RestartServer(ni); err != nil {
				t.Fatal(err)
			}
			clustertest.WaitFor(t, 10*time.Second, "the restarted "+nv+" opening its parent replica", func() bool {
				return clustertest.RangeInfo(c.Servers[ni].Server, parent) != nil
			})
			if st := c.Servers[ni].Server.ReplicaState(child); st != "absent" {
				t.Fatalf("the split's new range %d is %s on %s after its restart; its descriptor lists %v", child, st, nv, split.GetRight().GetReplicas())
			}
			if c.Servers[ni].Server.HasStoredState(child) {
				t.Fatalf("the split's new range %d still has its state on %s after its restart", child, nv)
			}
			clustertest.WriteSeq(t, tcl, acked, "after", 20)
			clustertest.VerifyExactlyOnce(t, tcl, acked)
		})
	}
}

// TestFailedAddDeletesItsReplica: a move whose non-voter add fails after
// the new replica was created (the leader refused, or could not be
// reached) deletes that replica. Kept, it sat on the target at the range's
// generation, in no configuration and no descriptor, and the replica GC
// would take it only once the range's generation moved on. A later move
// onto the same server then works.
func TestFailedAddDeletesItsReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "failedadd"
	c, tcl, mc, acked, ctx := handTable(t, table, 10, nil)
	rng := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	id := rng.GetRangeId()
	_, from, to := clustertest.RangeRoles(t, c, mc, rng)
	failpoint.Enable("master/add/before-nonvoter", nil)
	err := moveDirect(ctx, c, id, from, to)
	failpoint.Disable("master/add/before-nonvoter")
	if err == nil {
		t.Fatal("move succeeded through master/add/before-nonvoter")
	}
	clustertest.WaitFor(t, 10*time.Second, "the failed add's replica on "+to+" deleted", func() bool {
		return c.Servers[c.ServerIndex(to)].Server.ReplicaState(id) == "absent"
	})
	if err := moveDirect(ctx, c, id, from, to); err != nil {
		t.Fatalf("move %s -> %s after the failed one: %v", from, to, err)
	}
	if got := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]; !clustertest.HasServer(got, to) || clustertest.HasServer(got, from) {
		t.Fatalf("replicas %v after the second move %s -> %s", got.GetReplicas(), from, to)
	}
	clustertest.WriteSeq(t, tcl, acked, "after", 10)
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// TestFollowerReadNeedsListedReplica: a replica serves the read-access
// secondary only once its own state lists it in the range's descriptor.
// A replica added by a move catches up as a non-voter and is promoted and
// recorded (SET_REPLICAS) afterwards; a front-end learns of it from the
// map only once the record committed, but the replica itself may not
// have applied it yet. Serving then could return a state older than a
// LastSyncTime another front-end confirmed over the descriptor before it
// (that probe's index is below the record's: the replicas it asked had
// not applied the record). A replica that has applied the record holds
// every such index.
func TestFollowerReadNeedsListedReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "listedread"
	c, tcl, mc, acked, ctx := handTable(t, table, 10, nil)
	id := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()
	nv := leaveNonvoter(ctx, t, c, mc, table, id)
	svc := c.Servers[c.ServerIndex(nv)].Server.Service()
	read := func() error {
		_, err := svc.Get(ctx, &pb.GetRequest{RangeId: id, PartitionKey: "k00", RowKey: "before-0000", FollowerRead: true})
		return err
	}
	// The non-voter holds the entity (it applied the log) but is in no
	// descriptor.
	clustertest.WaitFor(t, 10*time.Second, "the non-voter "+nv+" to hold the range's entries", func() bool {
		info := clustertest.RangeInfo(c.Servers[c.ServerIndex(nv)].Server, id)
		return info != nil && info.GetAppliedIndex() > 0
	})
	if err := read(); rpcerr.Parse(err).Reason != rpcerr.ReasonStaleRange {
		t.Fatalf("follower read on the unlisted non-voter %s: %v, want %s", nv, err, rpcerr.ReasonStaleRange)
	}
	l := clustertest.PartitionMap(t, mc).GetLeaders()[id]
	resp, err := c.Servers[c.ServerIndex(l)].Server.Service().ChangeReplicas(ctx, &pb.ChangeReplicasRequest{RangeId: id, AddServerId: nv, AddMode: pb.AddMode_ADD_MODE_PROMOTE})
	if err != nil || !clustertest.HasServer(resp.GetRange(), nv) {
		t.Fatalf("promoting %s on the leader %s: %v, replicas %v", nv, l, err, resp.GetRange().GetReplicas())
	}
	var last error
	clustertest.WaitFor(t, 10*time.Second, "a follower read on "+nv+" once its state lists it", func() bool {
		last = read()
		return last == nil
	})
	clustertest.WriteSeq(t, tcl, acked, "after", 10)
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}
