package cluster_test

import (
	"context"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	pb "tablestore/proto/tablestorepb"
)

// TestLeaseEndsWhenLeaderIsCutOff: a range leader answers linearizable
// reads under its read lease; cut off the Raft network (its gRPC service
// still answering), it stops doing so before the other two elect a leader,
// so once the new leader acknowledged a write the old one never answers
// the value before it. Read straight from each server's service, without
// the front-end's retries.
func TestLeaseEndsWhenLeaderIsCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "leasecut"
	tc := clustertest.NewTable(t, sc, table)
	if err := putV(ctx, tc, "a", 1); err != nil {
		t.Fatal(err)
	}
	rangeID := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()
	get := &pb.GetRequest{RangeId: rangeID, PartitionKey: "a", RowKey: "r"}
	leaseReads := func() float64 {
		return clustertest.MetricValue(t, "tablestore_partitionserver_read_index_total", map[string]string{"path": "lease"})
	}
	old := -1
	clustertest.WaitFor(t, 30*time.Second, "a leader answering under its lease", func() bool {
		for i := range c.Servers {
			before := leaseReads()
			resp, err := c.Servers[i].Server.Service().Get(ctx, get)
			if err == nil && entityV(t, resp.GetEntity()) == 1 && leaseReads() > before {
				old = i
				return true
			}
		}
		return false
	})
	t.Logf("ps%d leads under a lease; cutting it off", old+1)
	c.IsolateServer(old, true)
	defer c.IsolateServer(old, false)
	// Taken once the cut is in place: appends sent while it was being made
	// may still have been promised.
	cut := time.Now()

	// Its followers' promises were given on appends sent before the cut,
	// so no lease check passes 80 % of --read-lease (200 ms) after it, and
	// a round of heartbeats cannot pass while it is cut off: no read that
	// starts 300 ms after the cut succeeds, whatever raft's own leader
	// lease (500 ms) still lets the member believe.
	for time.Since(cut) < 1500*time.Millisecond {
		start := time.Since(cut)
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := c.Servers[old].Server.Service().Get(rctx, get)
		cancel()
		if err == nil && start >= 300*time.Millisecond {
			t.Fatalf("the cut-off leader ps%d answered a linearizable read started %v after the cut", old+1, start)
		}
		if err != nil {
			time.Sleep(10 * time.Millisecond) // refused at once once it stepped down
		}
	}

	// Writes go on through a new leader (the front-end retries).
	clustertest.WaitFor(t, 30*time.Second, "a write acknowledged without the old leader", func() bool {
		return putV(ctx, tc, "a", 2) == nil
	})
	// The old leader, still believing it leads until its raft lease runs
	// out, must not answer 1; asked over and over for a while.
	deadline := time.Now().Add(2 * time.Second)
	answered := 0
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		resp, err := c.Servers[old].Server.Service().Get(rctx, get)
		cancel()
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		answered++
		if v := entityV(t, resp.GetEntity()); v != 2 {
			t.Fatalf("the cut-off leader ps%d answered a=%d after a=2 was acknowledged", old+1, v)
		}
	}
	t.Logf("the cut-off leader answered %d reads (none stale)", answered)
}
