package cluster_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/masterclient"
)

// quietTable starts a 3-server cluster whose ranges go quiet after 300 ms
// and creates table with k = 0 in it.
func quietTable(t *testing.T, table string, d time.Duration) (*cluster.Cluster, *masterclient.Client, *aztables.Client, context.Context) {
	t.Helper()
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, quiesceFast)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, d)
	tc := clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), table)
	if err := putV(ctx, tc, "k", 0); err != nil {
		t.Fatal(err)
	}
	return c, mc, tc, ctx
}

// TestQuietRangeWriteWakes: a write to a quiet range wakes it and is
// acknowledged; the wake's latency is logged (the figure of issue 9's
// "first request to a quiet range", measured by the bench's tables mode).
func TestQuietRangeWriteWakes(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "wakewrite"
	c, mc, tc, ctx := quietTable(t, table, 2*time.Minute)
	votes0 := clustertest.MetricValue(t, "tablestore_partitionserver_quiet_votes_total", nil)
	stored0 := clustertest.MetricValue(t, "tablestore_partitionserver_quiet_stored_entries_total", nil)
	var took []time.Duration
	for i := 1; i <= 10; i++ {
		waitQuiet(t, c, mc, table, 15*time.Second)
		start := time.Now()
		if err := putV(ctx, tc, "k", i); err != nil {
			t.Fatalf("write %d to a quiet range: %v", i, err)
		}
		took = append(took, time.Since(start))
		if v, err := getV(ctx, tc, "k"); err != nil || v != i {
			t.Fatalf("read after write %d: %v, %v", i, v, err)
		}
	}
	// The woken member's campaign is granted, and its entries stored, by
	// the others without opening them (lifecycle.AnswerVote, Answer).
	if v := clustertest.MetricValue(t, "tablestore_partitionserver_quiet_votes_total", nil) - votes0; v == 0 {
		t.Error("no vote was granted by a quiet replica")
	}
	if v := clustertest.MetricValue(t, "tablestore_partitionserver_quiet_stored_entries_total", nil) - stored0; v == 0 {
		t.Error("no entry was stored by a quiet replica")
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("write to a quiet range through the front-end: p50 %v, all %v", took[len(took)/2], took)
}

// TestQuietWriteSurvivesCrashes: a write that woke a quiet range was made
// durable by its leader and a follower that stored it without opening;
// kill -9 the leader's server and one follower's right after the
// acknowledgement (before the followers open, most of the time), bring the
// follower back: the range elects from the two survivors' logs and the
// write is there. Each round crashes a different follower with the leader,
// so either follower's closed store is the one that must have kept it.
func TestQuietWriteSurvivesCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "wakecrash"
	c, mc, tc, ctx := quietTable(t, table, 3*time.Minute)
	stored0 := clustertest.MetricValue(t, "tablestore_partitionserver_quiet_stored_entries_total", nil)
	for round := 1; round <= 2; round++ {
		waitQuiet(t, c, mc, table, 20*time.Second)
		leader := clustertest.RangeLeader(c, table)
		if leader < 0 {
			t.Fatal("a quiet range reports no leader to the master")
		}
		if err := putV(ctx, tc, "k", round); err != nil {
			t.Fatalf("round %d: write to a quiet range: %v", round, err)
		}
		var others []int
		for i := range c.Servers {
			if i != leader {
				others = append(others, i)
			}
		}
		follower := others[round%2]
		id := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()
		t.Logf("round %d: leader %d (%s), crashing follower %d (%s), the other %s; entries stored closed so far %v", round,
			leader, c.Servers[leader].Server.ReplicaState(id), follower, c.Servers[follower].Server.ReplicaState(id),
			c.Servers[others[(round+1)%2]].Server.ReplicaState(id), clustertest.MetricValue(t, "tablestore_partitionserver_quiet_stored_entries_total", nil))
		if err := c.CrashServer(leader); err != nil {
			t.Fatal(err)
		}
		if err := c.CrashServer(follower); err != nil {
			t.Fatal(err)
		}
		if err := c.RestartServer(follower); err != nil {
			t.Fatal(err)
		}
		clustertest.WaitFor(t, 60*time.Second, "the write readable with the leader's server down", func() bool {
			v, err := getV(ctx, tc, "k")
			if err != nil {
				return false
			}
			if v != round {
				t.Fatalf("round %d: read %d after the crashes: the acknowledged write is lost", round, v)
			}
			return true
		})
		if err := c.RestartServer(leader); err != nil {
			t.Fatal(err)
		}
	}
	// The rounds' writes were stored by quiet followers (the crashes
	// then took away one of the two closed copies).
	if clustertest.MetricValue(t, "tablestore_partitionserver_quiet_stored_entries_total", nil) == stored0 {
		t.Error("no entry was stored by a quiet follower: the rounds did not exercise closed stores")
	}
	if err := putV(ctx, tc, "k", 10); err != nil {
		t.Fatal(err)
	}
	if v, err := getV(ctx, tc, "k"); err != nil || v != 10 {
		t.Fatalf("read after the last write: %v, %v", v, err)
	}
}

// TestClosedFollowersElectWithoutRequests: the leader a write woke dies
// right after the write, before its commit tick opened the followers that
// voted for it and stored its entries closed. With no request to wake the
// range, those followers open by themselves (checkClosedLater) and elect a
// leader among the survivors.
func TestClosedFollowersElectWithoutRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	const table = "closedelect"
	c, mc, tc, ctx := quietTable(t, table, 2*time.Minute)
	waitQuiet(t, c, mc, table, 20*time.Second)
	leader := clustertest.RangeLeader(c, table)
	if leader < 0 {
		t.Fatal("a quiet range reports no leader to the master")
	}
	if err := putV(ctx, tc, "k", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.CrashServer(leader); err != nil {
		t.Fatal(err)
	}
	id := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()
	clustertest.WaitFor(t, 20*time.Second, "a leader among the survivors, with no request", func() bool {
		for i, n := range c.Servers {
			if i == leader || n.Server == nil {
				continue
			}
			if n.Server.ReplicaState(id) != "active" {
				return false
			}
		}
		l := clustertest.RangeLeader(c, table)
		return l >= 0 && l != leader
	})
	if v, err := getV(ctx, tc, "k"); err != nil || v != 1 {
		t.Fatalf("read after the survivors elected: %v, %v", v, err)
	}
}

// TestQuiesceBesidePausedFollower: a range quiesces with one follower's
// server paused (SIGSTOP-like: its connections stay open, nothing
// answers). The leader's close must not wait for its replication to the
// paused follower, stuck in an RPC until the Raft RPC timeout: raft's
// Shutdown waits for its goroutines, so the member's group transport is
// closed first, which fails the RPCs at once (replica.close). Before, a
// close (a quiesce, a delete, a restart) beside a paused peer took the
// whole RPC timeout, and a stale replica's delete held up its server's
// member of a split-born range for that long (chaos seed 106).
func TestQuiesceBesidePausedFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "pausedquiet"
	c, mc, tc, ctx := quietTable(t, table, 2*time.Minute)
	waitQuiet(t, c, mc, table, 20*time.Second)
	leader := clustertest.RangeLeader(c, table)
	if leader < 0 {
		t.Fatal("a quiet range reports no leader to the master")
	}
	paused := (leader + 1) % 3
	if err := putV(ctx, tc, "k", 1); err != nil {
		t.Fatal(err)
	}
	c.PauseServer(paused, true)
	defer c.PauseServer(paused, false)
	// The paused follower's replication and heartbeats now hang; a write
	// keeps the leader's replication busy towards it.
	if err := putV(ctx, tc, "k", 2); err != nil {
		t.Fatal(err)
	}
	id := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()
	start := time.Now()
	clustertest.WaitFor(t, 30*time.Second, "the leader's replica quiet beside a paused follower", func() bool {
		return c.Servers[leader].Server.ReplicaState(id) == "quiet"
	})
	took := time.Since(start)
	t.Logf("leader's replica quiet %v after the last write, one follower paused", took)
	// Quiesce after 300 ms, the marker's commit, and the leader's wait
	// for the paused follower to acknowledge it (markerWait, 2 s; it never
	// does): well under the 10 s RPC timeout a blocked close used to wait
	// out.
	if took > 5*time.Second {
		t.Errorf("the leader's replica took %v to close beside a paused follower", took)
	}
}
