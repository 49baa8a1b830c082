package reshape

import (
	"context"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	pb "tablestore/proto/tablestorepb"
)

// TestMoveInterruptedByMasterFailover stops a move after it added the new
// voter and before it removed the old one (a failpoint, as if the master
// died there), restarts the master, and requires the range back at three
// replicas with its descriptor equal to its Raft configuration (the
// leading master finishes the move), then every acknowledged write there
// once, and the range movable again (an interrupted move once stalled a
// drain).
func TestMoveInterruptedByMasterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTuned(t, 5, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 3*time.Minute)
	const table = "movecrash"
	tcl := clustertest.NewTable(t, sc, table)
	mc := clustertest.MasterClient(t, c)
	w := clustertest.StartWorkload(t, tcl, 3, clustertest.SpreadKeys)
	time.Sleep(300 * time.Millisecond)

	rng := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	_, from, to := clustertest.RangeRoles(t, c, mc, rng)
	failpoint.Enable("master/move/after-add", nil)
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: rng.GetRangeId(), ToServerId: to, FromServerId: from})
		return err
	})
	failpoint.Disable("master/move/after-add")
	if err == nil {
		t.Fatal("move succeeded through the failpoint")
	}
	if err := c.StopMaster(0); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartMaster(0); err != nil {
		t.Fatal(err)
	}
	var got *pb.RangeDescriptor
	clustertest.WaitFor(t, 20*time.Second, "the range with four voters reported (the add survived)", func() bool {
		got = clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
		return len(got.GetReplicas()) == 4 || (len(got.GetReplicas()) == 3 && clustertest.HasServer(got, to))
	})
	start := time.Now()
	clustertest.WaitFor(t, 30*time.Second, "the interrupted move finished: three replicas", func() bool {
		got = clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
		return len(got.GetReplicas()) == 3
	})
	t.Logf("back to 3 replicas %v in %v (moved %s -> %s)", got.GetReplicas(), time.Since(start).Round(time.Millisecond), from, to)
	// The descriptor is the Raft configuration: the leader's own view.
	clustertest.WaitFor(t, 10*time.Second, "the leader's Raft configuration equal to the descriptor", func() bool {
		m := clustertest.PartitionMap(t, mc)
		d := clustertest.TableRanges(m, table)[0]
		l := m.GetLeaders()[d.GetRangeId()]
		if l == "" {
			return false
		}
		s := c.Servers[c.ServerIndex(l)].Server
		info, err := s.Service().RangeInfo(context.Background(), &pb.RangeInfoRequest{RangeId: d.GetRangeId()})
		return err == nil && clustertest.SameIDs(info.GetStatus().GetVoters(), d.GetReplicas())
	})
	// The range moves again (an interrupted move once stalled a drain:
	// the range was never movable again).
	got = clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	to = ""
	for _, n := range c.Servers {
		if !clustertest.HasServer(got, n.Config.ID) {
			to = n.Config.ID
		}
	}
	err = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: got.GetRangeId(), ToServerId: to})
		return err
	})
	if err != nil {
		t.Fatalf("move to %s after recovery: %v", to, err)
	}
	if got = clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]; len(got.GetReplicas()) != 3 || !clustertest.HasServer(got, to) {
		t.Fatalf("after the second move: replicas %v, want %s among 3", got.GetReplicas(), to)
	}
	acked := w.Halt()
	t.Logf("%d acknowledged writes, %d failed", len(acked), w.Failed.Load())
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// TestLateReplicaDelete moves a range's replica off a server and back, then
// delivers the first move's delete of that replica late (as a server
// stopped with SIGSTOP runs a queued request when it resumes), at the worst
// moment: the other follower is paused, so writes are committed by the
// leader and the re-created replica alone; then the leader crashes and the
// paused follower resumes. The re-created replica is a voter: it must keep
// its log, its vote and its data, or the two survivors elect a leader
// without the acknowledged writes.
func TestLateReplicaDelete(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 4, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "latedelete"
	tcl := clustertest.NewTable(t, sc, table)
	mc := clustertest.MasterClient(t, c)
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tcl, acked, "before", 20)
	rng := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	id := rng.GetRangeId()
	leader, victim, spare := clustertest.RangeRoles(t, c, mc, rng)
	move := func(from, to string) *pb.RangeDescriptor {
		t.Helper()
		var resp *pb.MoveResponse
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			var err error
			resp, err = m.Move(ctx, &pb.MoveRequest{RangeId: id, ToServerId: to, FromServerId: from})
			return err
		})
		if err != nil {
			t.Fatalf("move %s -> %s: %v", from, to, err)
		}
		return resp.GetRange()
	}
	away := move(victim, spare)
	vi := c.ServerIndex(victim)
	clustertest.WaitFor(t, 20*time.Second, "the moved-off replica deleted", func() bool {
		return clustertest.RangeInfo(c.Servers[vi].Server, id) == nil
	})
	// Back onto the victim, off the follower that is not the victim.
	m := clustertest.PartitionMap(t, mc)
	leader = m.GetLeaders()[id]
	from := ""
	for _, r := range clustertest.TableRanges(m, table)[0].GetReplicas() {
		if r.GetServerId() != leader {
			from = r.GetServerId()
		}
	}
	back := move(from, victim)
	t.Logf("moved %s -> %s (generation %d), %s -> %s (generation %d)", victim, spare, away.GetGeneration(), from, victim, back.GetGeneration())
	m = clustertest.PartitionMap(t, mc)
	leader = m.GetLeaders()[id]
	other := ""
	for _, r := range back.GetReplicas() {
		if r.GetServerId() != leader && r.GetServerId() != victim {
			other = r.GetServerId()
		}
	}
	if leader == victim || other == "" {
		t.Fatalf("leader %s, victim %s, other %q: want the victim a follower", leader, victim, other)
	}
	li, oi := c.ServerIndex(leader), c.ServerIndex(other)
	clustertest.WaitFor(t, 20*time.Second, "the re-created replica caught up", func() bool {
		v, l := clustertest.RangeInfo(c.Servers[vi].Server, id), clustertest.RangeInfo(c.Servers[li].Server, id)
		return v != nil && l != nil && v.GetAppliedIndex() >= l.GetAppliedIndex()
	})
	// Writes committed by the leader and the victim only.
	c.PauseServer(oi, true)
	clustertest.WriteSeq(t, tcl, acked, "paused", 30)
	// The first move's delete, arriving now.
	_, err := c.Servers[vi].Server.Service().DeleteReplica(ctx, &pb.DeleteReplicaRequest{RangeId: id, BeforeGeneration: away.GetGeneration()})
	t.Logf("late delete on %s: %v", victim, err)
	if clustertest.RangeInfo(c.Servers[vi].Server, id) == nil {
		t.Errorf("the replica a move re-created on %s was deleted by a late delete", victim)
	}
	if err := c.CrashServer(li); err != nil {
		t.Fatal(err)
	}
	c.PauseServer(oi, false)
	t.Logf("crashed the leader %s, resumed %s", leader, other)
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// TestUnderReplicatedRangeRepaired removes a follower of a range straight
// on its leader (as a stray operator call or a move whose add never
// happened would leave it), so the range runs on two voters while every
// server is up. The leading master must record that and add a voter back
// (here the only server without one: the removed server, whose stale
// replica catches up), with every acknowledged write kept.
func TestUnderReplicatedRangeRepaired(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	const table = "underrep"
	tcl := clustertest.NewTable(t, sc, table)
	mc := clustertest.MasterClient(t, c)
	w := clustertest.StartWorkload(t, tcl, 2, clustertest.SpreadKeys)
	rng := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	leader, removed, _ := clustertest.RangeRoles(t, c, mc, rng)
	ctx := clustertest.Context(t, time.Minute)
	ls := c.Servers[c.ServerIndex(leader)].Server
	if _, err := ls.Service().ChangeReplicas(ctx, &pb.ChangeReplicasRequest{RangeId: rng.GetRangeId(), RemoveServerId: removed}); err != nil {
		t.Fatalf("remove %s on the leader %s: %v", removed, leader, err)
	}
	start := time.Now()
	clustertest.WaitFor(t, 30*time.Second, "the descriptor at two replicas (the removal recorded)", func() bool {
		return len(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetReplicas()) == 2
	})
	clustertest.WaitFor(t, 45*time.Second, "three voters again, descriptor equal to the leader's Raft configuration", func() bool {
		m := clustertest.PartitionMap(t, mc)
		d := clustertest.TableRanges(m, table)[0]
		l := m.GetLeaders()[d.GetRangeId()]
		if len(d.GetReplicas()) != 3 || l == "" {
			return false
		}
		info := clustertest.RangeInfo(c.Servers[c.ServerIndex(l)].Server, d.GetRangeId())
		return info != nil && clustertest.SameIDs(info.GetVoters(), d.GetReplicas())
	})
	t.Logf("replication factor restored in %v", time.Since(start).Round(time.Millisecond))
	acked := w.Halt()
	t.Logf("%d acknowledged writes, %d failed", len(acked), w.Failed.Load())
	// The re-added replica holds the data: every replica reaches the
	// leader's applied index.
	clustertest.WaitFor(t, 30*time.Second, "every replica at the leader's applied index", func() bool {
		m := clustertest.PartitionMap(t, mc)
		d := clustertest.TableRanges(m, table)[0]
		li := clustertest.RangeInfo(c.Servers[c.ServerIndex(m.GetLeaders()[d.GetRangeId()])].Server, d.GetRangeId())
		if li == nil {
			return false
		}
		for _, r := range d.GetReplicas() {
			ri := clustertest.RangeInfo(c.Servers[c.ServerIndex(r.GetServerId())].Server, d.GetRangeId())
			if ri == nil || ri.GetAppliedIndex() < li.GetAppliedIndex() {
				return false
			}
		}
		return true
	})
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// TestStaleReplicaCollected moves a range's replica off a server that is
// down, so the move's delete cannot reach it, and restarts the server: its
// replica, outside the range's configuration, must be deleted by the
// master's replica GC (it would otherwise campaign for ever), while the
// range keeps its three replicas and its data.
func TestStaleReplicaCollected(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 4, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	const table = "stalegc"
	tcl := clustertest.NewTable(t, sc, table)
	mc := clustertest.MasterClient(t, c)
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tcl, acked, "before", 20)
	rng := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	id := rng.GetRangeId()
	_, from, to := clustertest.RangeRoles(t, c, mc, rng)
	fi := c.ServerIndex(from)
	if err := c.StopServer(fi); err != nil {
		t.Fatal(err)
	}
	ctx := clustertest.Context(t, time.Minute)
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: id, ToServerId: to, FromServerId: from})
		return err
	})
	if err != nil {
		t.Fatalf("move %s -> %s while %s is down: %v", from, to, from, err)
	}
	clustertest.WriteSeq(t, tcl, acked, "moved", 20)
	if err := c.RestartServer(fi); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	clustertest.WaitFor(t, 45*time.Second, "the stale replica on "+from+" deleted", func() bool {
		return c.Servers[fi].Server.ReplicaState(id) == "absent"
	})
	t.Logf("stale replica on %s deleted %v after its restart", from, time.Since(start).Round(time.Millisecond))
	got := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	if len(got.GetReplicas()) != 3 || clustertest.HasServer(got, from) || !clustertest.HasServer(got, to) {
		t.Fatalf("replicas %v after the move %s -> %s", got.GetReplicas(), from, to)
	}
	clustertest.WriteSeq(t, tcl, acked, "after", 20)
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}
