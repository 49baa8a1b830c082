package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/failpoint"
	pb "tablestore/proto/tablestorepb"
)

// TestMoveAddsNonvoterFirst moves a range's replica off a server that is
// down onto one whose Raft traffic is stalled, so the new replica cannot
// catch up. Added as a voter, it would make four voters of which two are
// live, and the range could commit nothing until the stall ended. Added as
// a non-voter, it leaves the quorum to the two live voters: writes go on
// while the move waits, and once the stall ends the move promotes the
// caught-up member and removes the down one.
func TestMoveAddsNonvoterFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startTuned(t, 4, quietPolicies, nil)
	sc := serviceClient(t, c, 0)
	ctx := ctxT(t, 2*time.Minute)
	const table = "nonvoterfirst"
	tcl := newTable(t, sc, table)
	mc := masterClient(t, c)
	acked := map[string]int64{}
	writeSeq(t, tcl, acked, "before", 20)
	rng := tableRanges(partitionMap(t, mc), table)[0]
	id := rng.GetRangeId()
	leader, from, to := rangeRoles(t, c, mc, rng)
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
	go func() {
		moved <- mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.Move(ctx, &pb.MoveRequest{RangeId: id, ToServerId: to, FromServerId: from})
			return err
		})
	}()
	select {
	case <-added:
	case err := <-moved:
		t.Fatalf("the move %s -> %s ended before adding its non-voter: %v", from, to, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the move added no non-voter within 30 s")
	}
	info := rangeInfo(c.Servers[c.ServerIndex(leader)].Server, id)
	if info == nil || !slices.Equal(info.GetNonvoters(), []string{to}) || !sameIDs(info.GetVoters(), rng.GetReplicas()) {
		t.Fatalf("leader %s reports voters %v, non-voters %v; want voters %v and the non-voter %s",
			leader, info.GetVoters(), info.GetNonvoters(), rng.GetReplicas(), to)
	}
	// Committed by the leader and the one live follower, the stalled
	// non-voter counting toward no quorum.
	writeSeq(t, tcl, acked, "stalled", 20)
	close(release)
	c.PauseServer(ti, false)
	if err := <-moved; err != nil {
		t.Fatalf("move %s -> %s: %v", from, to, err)
	}
	got := tableRanges(partitionMap(t, mc), table)[0]
	if len(got.GetReplicas()) != 3 || hasServer(got, from) || !hasServer(got, to) {
		t.Fatalf("replicas %v after the move %s -> %s", got.GetReplicas(), from, to)
	}
	waitFor(t, 10*time.Second, "the leader's configuration: the descriptor's voters, no non-voter", func() bool {
		m := partitionMap(t, mc)
		l := m.GetLeaders()[id]
		if l == "" {
			return false
		}
		info := rangeInfo(c.Servers[c.ServerIndex(l)].Server, id)
		return info != nil && len(info.GetNonvoters()) == 0 && sameIDs(info.GetVoters(), tableRanges(m, table)[0].GetReplicas())
	})
	writeSeq(t, tcl, acked, "after", 20)
	verifyExactlyOnce(t, tcl, acked)
}

// TestNonvoterOfInterruptedMoveRemoved stops a move after it added its
// non-voter (a failpoint, as if the master died there) and restarts the
// master: the new leading master must remove the non-voter the move left
// (nothing would promote it, and the leader would replicate to it for
// ever), keep the range's three voters and its data, and the range must
// move again.
func TestNonvoterOfInterruptedMoveRemoved(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startTuned(t, 4, quietPolicies, nil)
	sc := serviceClient(t, c, 0)
	ctx := ctxT(t, 2*time.Minute)
	const table = "nonvoterleft"
	tcl := newTable(t, sc, table)
	mc := masterClient(t, c)
	w := startWorkload(t, tcl, 3, spreadKeys)
	rng := tableRanges(partitionMap(t, mc), table)[0]
	id := rng.GetRangeId()
	leader, from, to := rangeRoles(t, c, mc, rng)
	failpoint.Enable("master/add/after-nonvoter", nil)
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: id, ToServerId: to, FromServerId: from})
		return err
	})
	failpoint.Disable("master/add/after-nonvoter")
	if err == nil {
		t.Fatal("move succeeded through the failpoint")
	}
	if info := rangeInfo(c.Servers[c.ServerIndex(leader)].Server, id); info == nil || !slices.Equal(info.GetNonvoters(), []string{to}) {
		t.Fatalf("leader %s reports non-voters %v after the interrupted move, want [%s]", leader, info.GetNonvoters(), to)
	}
	if err := c.StopMaster(0); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartMaster(0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, 30*time.Second, "the non-voter removed, the descriptor's three voters kept", func() bool {
		m := partitionMap(t, mc)
		d := tableRanges(m, table)[0]
		l := m.GetLeaders()[id]
		if l == "" {
			return false
		}
		info := rangeInfo(c.Servers[c.ServerIndex(l)].Server, id)
		return info != nil && len(info.GetNonvoters()) == 0 && len(d.GetReplicas()) == 3 && !hasServer(d, to) &&
			sameIDs(info.GetVoters(), d.GetReplicas())
	})
	t.Logf("non-voter on %s removed %v after the master's restart", to, time.Since(start).Round(time.Millisecond))
	waitFor(t, 20*time.Second, "the non-voter's replica on "+to+" deleted", func() bool {
		return c.Servers[c.ServerIndex(to)].Server.ReplicaState(id) == "absent"
	})
	// The interrupted move's master, were it still running, could not
	// bring the removed member back as a voter.
	l := partitionMap(t, mc).GetLeaders()[id]
	_, err = c.Servers[c.ServerIndex(l)].Server.Service().ChangeReplicas(ctx, &pb.ChangeReplicasRequest{
		RangeId: id, AddServerId: to, AddMode: pb.AddMode_ADD_MODE_PROMOTE})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("promoting %s, no longer a member, on the leader %s: %v, want FAILED_PRECONDITION", to, l, err)
	}
	err = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: id, ToServerId: to, FromServerId: from})
		return err
	})
	if err != nil {
		t.Fatalf("move %s -> %s after the recovery: %v", from, to, err)
	}
	if got := tableRanges(partitionMap(t, mc), table)[0]; len(got.GetReplicas()) != 3 || !hasServer(got, to) || hasServer(got, from) {
		t.Fatalf("replicas %v after the second move %s -> %s", got.GetReplicas(), from, to)
	}
	// A promotion retried after it succeeded (onLeader retries a call
	// whose answer was lost) succeeds and keeps the voters.
	l = partitionMap(t, mc).GetLeaders()[id]
	resp, err := c.Servers[c.ServerIndex(l)].Server.Service().ChangeReplicas(ctx, &pb.ChangeReplicasRequest{
		RangeId: id, AddServerId: to, AddMode: pb.AddMode_ADD_MODE_PROMOTE})
	if err != nil || len(resp.GetRange().GetReplicas()) != 3 || !hasServer(resp.GetRange(), to) {
		t.Fatalf("promoting %s again on the leader %s: %v, replicas %v", to, l, err, resp.GetRange().GetReplicas())
	}
	acked := w.halt()
	t.Logf("%d acknowledged writes, %d failed", len(acked), w.failed.Load())
	verifyExactlyOnce(t, tcl, acked)
}
