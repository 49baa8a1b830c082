package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"tablestore/internal/failpoint"
	pb "tablestore/proto/tablestorepb"
)

// TestSplitStartFailsThenOpens: a split applies on every replica, but on
// one server starting the new range fails without a crash (RangeCreated:
// reading or registering its state). That server's heartbeat reconcile
// finds the assigned range stored and unserved, and opens it as a restart
// would (lifecycle.OpenStored), so the range regains its third replica
// with no restart; with another server stopped, that replica and the last
// one serve every acknowledged write. Before, the range stayed unstarted
// there until the server restarted (the reconcile waited for a split that
// had applied).
func TestSplitStartFailsThenOpens(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// Not beside other tests: the failpoint is the process's.
	c := startTuned(t, 3, quietPolicies, nil)
	sc := serviceClient(t, c, 0)
	ctx := ctxT(t, 2*time.Minute)
	mc := masterClient(t, c)
	const table = "strandedsplit"
	tc := newTable(t, sc, table)
	w := startWorkload(t, tc, 4, spreadKeys)
	time.Sleep(300 * time.Millisecond)

	var fails atomic.Int32
	failpoint.Enable("partitionserver/split/start-fails", func() error {
		if fails.Add(1) == 1 {
			return errors.New("failpoint: starting the split range failed")
		}
		return nil
	})
	t.Cleanup(func() { failpoint.Disable("partitionserver/split/start-fails") })
	var right *pb.RangeDescriptor
	splitAt := time.Now()
	err := mc.Call(ctx, func(_ context.Context, m pb.MasterServiceClient) error {
		// The test's deadline, not the client's 5 s per attempt: when the
		// failpoint strikes the new range's preferred leader, the master
		// waits for it to lead before it answers (leadRight), and a retry
		// of a split that happened is refused.
		resp, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k13"})
		right = resp.GetRight()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("split answered after %v", time.Since(splitAt).Round(time.Millisecond))
	waitFor(t, 5*time.Second, "the failpoint struck", func() bool { return fails.Load() >= 1 })
	start := time.Now()
	stranded := -1
	waitFor(t, 30*time.Second, "every replica of the new range serving", func() bool {
		for i, n := range c.Servers {
			if st := n.Server; st == nil || st.ReplicaState(right.GetRangeId()) == "absent" {
				if stranded < 0 && time.Since(start) > time.Second {
					stranded = i // absent well after the split: the struck one
				}
				return false
			}
		}
		return true
	})
	if stranded < 0 {
		t.Fatal("every replica started within a second of the split: the failpoint proved nothing")
	}
	t.Logf("server %d's replica of range %d opened %v after the split", stranded, right.GetRangeId(), time.Since(start).Round(time.Millisecond))

	// The opened replica serves: stop another server; it and the last
	// one are a majority of every range.
	other := (stranded + 1) % len(c.Servers)
	if err := c.StopServer(other); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	acked := w.halt()
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}
	t.Logf("%d writes acknowledged, %d failed; longest pause: %v", len(acked), w.failed.Load(), time.Duration(w.maxGap.Load()))
	verifyExactlyOnce(t, tc, acked)
}
