package cluster

import (
	"context"
	"testing"
	"time"

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
	c := startTuned(t, 5, quietPolicies, nil)
	sc := serviceClient(t, c, 0)
	ctx := ctxT(t, 3*time.Minute)
	const table = "movecrash"
	tcl := newTable(t, sc, table)
	mc := masterClient(t, c)
	w := startWorkload(t, tcl, 3, spreadKeys)
	time.Sleep(300 * time.Millisecond)

	rng := tableRanges(partitionMap(t, mc), table)[0]
	var leader string
	waitFor(t, 10*time.Second, "a range leader", func() bool {
		leader = partitionMap(t, mc).GetLeaders()[rng.GetRangeId()]
		return leader != ""
	})
	from, to := "", ""
	for _, r := range rng.GetReplicas() {
		if r.GetServerId() != leader {
			from = r.GetServerId()
		}
	}
	for _, n := range c.Servers {
		if !hasServer(rng, n.Config.ID) {
			to = n.Config.ID
			break
		}
	}
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
	waitFor(t, 20*time.Second, "the range with four voters reported (the add survived)", func() bool {
		got = tableRanges(partitionMap(t, mc), table)[0]
		return len(got.GetReplicas()) == 4 || (len(got.GetReplicas()) == 3 && hasServer(got, to))
	})
	start := time.Now()
	waitFor(t, 30*time.Second, "the interrupted move finished: three replicas", func() bool {
		got = tableRanges(partitionMap(t, mc), table)[0]
		return len(got.GetReplicas()) == 3
	})
	t.Logf("back to 3 replicas %v in %v (moved %s -> %s)", got.GetReplicas(), time.Since(start).Round(time.Millisecond), from, to)
	// The descriptor is the Raft configuration: the leader's own view.
	waitFor(t, 10*time.Second, "the leader's Raft configuration equal to the descriptor", func() bool {
		m := partitionMap(t, mc)
		d := tableRanges(m, table)[0]
		l := m.GetLeaders()[d.GetRangeId()]
		if l == "" {
			return false
		}
		s := c.Servers[c.ServerIndex(l)].Server
		info, err := s.Service().RangeInfo(context.Background(), &pb.RangeInfoRequest{RangeId: d.GetRangeId()})
		return err == nil && sameIDs(info.GetStatus().GetVoters(), d.GetReplicas())
	})
	// The range moves again (an interrupted move once stalled a drain:
	// the range was never movable again).
	got = tableRanges(partitionMap(t, mc), table)[0]
	to = ""
	for _, n := range c.Servers {
		if !hasServer(got, n.Config.ID) {
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
	if got = tableRanges(partitionMap(t, mc), table)[0]; len(got.GetReplicas()) != 3 || !hasServer(got, to) {
		t.Fatalf("after the second move: replicas %v, want %s among 3", got.GetReplicas(), to)
	}
	acked := w.halt()
	t.Logf("%d acknowledged writes, %d failed", len(acked), w.failed.Load())
	verifyExactlyOnce(t, tcl, acked)
}

func sameIDs(ids []string, reps []*pb.Replica) bool {
	if len(ids) != len(reps) {
		return false
	}
	for _, id := range ids {
		found := false
		for _, r := range reps {
			found = found || r.GetServerId() == id
		}
		if !found {
			return false
		}
	}
	return true
}
