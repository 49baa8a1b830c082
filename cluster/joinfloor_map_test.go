package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// TestMapRecreatedMemberRefusesStaleMember is section 19's hazard through
// the heartbeat's Join placement instead of a move (reliability.md, "Join
// floor for heartbeat re-creations"): the map lists a server in a range,
// the server hosts no replica of it (its data was lost; here its replica
// is deleted directly, as a delete that ran under a recorded add would),
// and its heartbeat re-creates the replica empty. An empty member grants
// any candidate its vote.
//
// The range is on {L, S, D} led by L. S is cut off, and writes are
// acknowledged by L and D. Then L is cut off from D too, S and D reach
// each other, and D's replica is lost. Before the fix D's heartbeat
// re-created it empty and floorless at once, S (whose log lacks the
// writes) won its vote and led {S, D}: the writes lost. With the fix D
// waits for a join floor from a leader that can confirm its leadership;
// none can while L is cut off, so D stays absent and S cannot win. Once
// healed, D is created with the floor and catches up, and every
// acknowledged write is there.
func TestMapRecreatedMemberRefusesStaleMember(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// The range under test is a split's right half, section 19's second
	// hazard (a split-born range re-created after its birth log was
	// compacted).
	mapRecreatedRefusesStale(t, "joinfloormap", true)
}

// TestMapRecreatedGen1MemberRefusesStaleMember is the same sequence on a
// table's first range, still at generation 1 (reliability.md, "A floor for
// generation-1 re-creations"): its lost replica was re-created by the
// heartbeat's Bootstrap placement, with the descriptor's voters and log
// entry 1 and no floor, and voted for S. Once its range has started, the
// master no longer lets it bootstrap: it joins with a floor.
func TestMapRecreatedGen1MemberRefusesStaleMember(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	mapRecreatedRefusesStale(t, "joinfloorgen1", false)
}

// mapRecreatedRefusesStale runs the sequence on table's range holding keys
// k13 - k25: the right half of a split at k13 when splitBorn, else the
// table's first range (generation 1).
func mapRecreatedRefusesStale(t *testing.T, table string, splitBorn bool) {
	// One Raft group per table: the sequence needs a table's first
	// range at generation 1, a group's namesake; a span of an anchor
	// group is born at generation 2.
	c := clustertest.StartTuned(t, 3, func(m *master.Config) { clustertest.QuietPolicies(m); m.TableGroups = false }, func(s *partitionserver.Config) { s.QuiesceAfter = 0 })
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	acked := map[string]int64{}
	tcl := clustertest.NewTable(t, sc, table)
	ctx := clustertest.Context(t, 3*time.Minute)
	// Its writes go to keys k13 - k25.
	clustertest.WriteSeq(t, tcl, acked, "before", 26)
	var rng *pb.RangeDescriptor
	if splitBorn {
		rng = clustertest.SplitRange(t, ctx, mc, table, "k13").GetRight()
	} else {
		rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)
		if len(rs) != 1 || rs[0].GetGeneration() != 1 {
			t.Fatalf("table %s: want one range at generation 1, have %v", table, rs)
		}
		rng = rs[0]
	}
	id := rng.GetRangeId()
	write := func(tag string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			pk, rk := fmt.Sprintf("k%02d", 13+i%13), fmt.Sprintf("%s-%04d", tag, i)
			v := int64(len(acked) + 1)
			body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "V": fmt.Sprint(v), "V@odata.type": "Edm.Int64"})
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := tcl.UpsertEntity(wctx, body, nil)
			cancel()
			if err != nil {
				t.Fatalf("write %s/%s: %v", pk, rk, err)
			}
			acked[pk+"/"+rk] = v
		}
	}
	write("right", 10)
	server := func(sid string) *partitionserver.Server { return c.Servers[c.ServerIndex(sid)].Server }
	raftAddr := func(sid string) string { return server(sid).RaftAddr() }
	leaderNow := func() string {
		for _, r := range rng.GetReplicas() {
			if st := clustertest.RangeInfo(server(r.GetServerId()), id); st.GetLeader() {
				return r.GetServerId()
			}
		}
		return ""
	}
	var leader string
	clustertest.WaitFor(t, 30*time.Second, "a leader of the range", func() bool { leader = leaderNow(); return leader != "" })
	var stale, lost string
	for _, r := range rng.GetReplicas() {
		switch sid := r.GetServerId(); {
		case sid == leader:
		case stale == "":
			stale = sid
		default:
			lost = sid
		}
	}
	t.Logf("range %d: leader %s, stale-to-be %s, losing its replica %s", id, leader, stale, lost)
	deleteLost := func() {
		t.Helper()
		if _, err := server(lost).Service().DeleteReplica(ctx, &pb.DeleteReplicaRequest{RangeId: id}); err != nil {
			t.Fatalf("delete %s's replica: %v", lost, err)
		}
	}
	caughtUp := func() bool {
		l := leaderNow()
		if l == "" || l == lost {
			return false
		}
		st, ls := clustertest.RangeInfo(server(lost), id), clustertest.RangeInfo(server(l), id)
		return st != nil && ls != nil && st.GetAppliedIndex() >= ls.GetAppliedIndex()
	}

	// 0. With every server reachable, a lost replica comes back (with its
	// floor) and catches up: the path's cost when the leader answers.
	// Every re-creation here must get a floor: a replica created without
	// one is counted (partitionserver join_without_floor_total; the
	// cluster's servers share the process's registry).
	const withoutFloor = "tablestore_partitionserver_join_without_floor_total"
	floorless := clustertest.MetricValue(t, withoutFloor, nil)
	checkFloored := func(when string) {
		t.Helper()
		if n := clustertest.MetricValue(t, withoutFloor, nil) - floorless; n != 0 {
			t.Fatalf("%s: %v replicas re-created without a join floor", when, n)
		}
	}
	deleteLost()
	start := time.Now()
	clustertest.WaitFor(t, 60*time.Second, lost+"'s replica re-created and caught up", caughtUp)
	checkFloored("healthy")
	t.Logf("healthy: %s's replica re-created and caught up in %v", lost, time.Since(start).Round(time.Millisecond))

	// 1. S is cut off (the hook drops a server's requests to the listed
	// peers and theirs to it), and writes are acknowledged by L and D.
	clustertest.WaitFor(t, 30*time.Second, "a leader of the range", func() bool { leader = leaderNow(); return leader != "" && leader != stale })
	if leader == lost {
		// A spurious election moved the leadership: the roles swap.
		leader, lost = lost, leader
	}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			s.Server.SetRaftFault(nil)
		}
	})
	server(leader).SetRaftFault(dropToAny{raftAddr(stale): true})
	server(lost).SetRaftFault(dropToAny{raftAddr(stale): true})
	write("cut", 10)

	// 2. L is cut off from D as well, S and D reach each other, and D's
	// replica is lost. The map still lists D, so D's heartbeat re-creates
	// it.
	server(leader).SetRaftFault(dropToAny{raftAddr(stale): true, raftAddr(lost): true})
	server(lost).SetRaftFault(nil)
	deleteLost()
	// S campaigns every election timeout (about a second); before the
	// fix it led within a few. Ten seconds is many elections.
	created := false
	watch := time.Now().Add(10 * time.Second)
	for time.Now().Before(watch) {
		if resp, err := server(stale).Service().RangeInfo(context.Background(), &pb.RangeInfoRequest{RangeId: id}); err == nil && resp.GetStatus().GetLeader() {
			t.Fatalf("%s, which missed the acknowledged writes, leads range %d with the vote of %s's re-created empty replica", stale, id, lost)
		}
		created = created || clustertest.RangeInfo(server(lost), id) != nil
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("while cut: %s's replica created: %v", lost, created)

	// 3. Heal: a leader confirms itself, D gets its floor and its
	// replica, catches up, and every acknowledged write is there.
	for _, s := range c.Servers {
		s.Server.SetRaftFault(nil)
	}
	start = time.Now()
	clustertest.WaitFor(t, 60*time.Second, lost+"'s replica created and caught up once healed", caughtUp)
	t.Logf("healed: %s's replica created and caught up in %v", lost, time.Since(start).Round(time.Millisecond))
	checkFloored("healed")
	write("after", 10)
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}
