package cluster_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/cluster/clustertest"
	"tablestore/internal/rpcerr"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// TestRemoveServer takes a partition server out of the registry after a
// scale-in: refused while ranges list the server or while it is up, done
// once it is down and empty, after which the map no longer shows it; a
// server started again under the id registers anew.
func TestRemoveServer(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	// One Raft group per table: the test needs a server no range lists,
	// and a spare anchor group (founded even with the policies off) may
	// take the fourth server.
	c, tcl, mc, acked, ctx := handTableM(t, "removeserver", 5, func(m *master.Config) { clustertest.QuietPolicies(m); m.TableGroups = false }, nil)
	d := clustertest.TableRanges(clustertest.PartitionMap(t, mc), "removeserver")[0]
	var empty string
	for _, sv := range clustertest.PartitionMap(t, mc).GetServers() {
		if !clustertest.HasServer(d, sv.GetServerId()) {
			empty = sv.GetServerId()
		}
	}
	if empty == "" {
		t.Fatalf("every server holds range %d: %v", d.GetRangeId(), d.GetReplicas())
	}
	remove := func(id string) error {
		return mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.RemoveServer(ctx, &pb.RemoveServerRequest{ServerId: id})
			return err
		})
	}
	if err := remove(d.GetReplicas()[0].GetServerId()); rpcerr.Parse(err).Code != codes.FailedPrecondition {
		t.Fatalf("removing %s, which range %d lists: %v, want FAILED_PRECONDITION", d.GetReplicas()[0].GetServerId(), d.GetRangeId(), err)
	}
	if err := remove(empty); rpcerr.Parse(err).Code != codes.FailedPrecondition {
		t.Fatalf("removing %s while it is up: %v, want FAILED_PRECONDITION", empty, err)
	}
	if err := remove("ps-nobody"); rpcerr.Parse(err).Code != codes.NotFound {
		t.Fatalf("removing an unknown server: %v, want NOT_FOUND", err)
	}
	i := c.ServerIndex(empty)
	if err := c.StopServer(i); err != nil {
		t.Fatal(err)
	}
	// Once the master counts it down, an operator's move onto it is
	// refused at once (moveTargetRefusal), not after a CreateReplica that
	// cannot answer.
	clustertest.WaitFor(t, 20*time.Second, "the master counting the stopped "+empty+" down", func() bool {
		for _, sv := range clustertest.PartitionMap(t, mc).GetServers() {
			if sv.GetServerId() == empty {
				return !sv.GetAlive()
			}
		}
		return false
	})
	start := time.Now()
	if err := moveDirect(ctx, c, d.GetRangeId(), "", empty); rpcerr.Parse(err).Code != codes.FailedPrecondition || time.Since(start) > 5*time.Second {
		t.Fatalf("moving range %d onto the stopped %s: %v after %v, want FAILED_PRECONDITION at once", d.GetRangeId(), empty, err, time.Since(start))
	}
	var last error
	clustertest.WaitFor(t, 20*time.Second, "the stopped "+empty+" removed", func() bool {
		last = remove(empty)
		return last == nil
	})
	for _, sv := range clustertest.PartitionMap(t, mc).GetServers() {
		if sv.GetServerId() == empty {
			t.Fatalf("%s still in the map's servers after its removal", empty)
		}
	}
	clustertest.WriteSeq(t, tcl, acked, "after", 5)
	if err := c.RestartServer(i); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 20*time.Second, empty+" registered again after its restart", func() bool {
		for _, sv := range clustertest.PartitionMap(t, mc).GetServers() {
			if sv.GetServerId() == empty {
				return true
			}
		}
		return false
	})
}
