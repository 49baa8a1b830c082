package reshape

import (
	"fmt"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
)

// TestSplitMissedBySnapshotWithMemberDown is chaos seed 2181's wait
// (reliability.md 38): a server down across a split whose parent replica
// is then caught up by a snapshot taken after the split (the left half
// only: the split's entry, which creates the right half on every replica
// of the parent, never applies there), while another member of the new
// range is down. The new range's servers up are a majority (the victim
// and one more), so it must take writes within a few seconds of the
// victim's return, and every acknowledged write must read back. Before
// the fix the victim's replica of the new range waited for a join floor
// from the new range's leader, which could not be elected without it.
func TestSplitMissedBySnapshotWithMemberDown(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	sn := splitPastDownFollower(t, "missedsplit", true, splitOut)
	c, tc, acked, right, victim, vi := sn.c, sn.tc, sn.acked, sn.right, sn.victim, sn.vi

	// Another member of both ranges goes down before the victim is back.
	other := (vi + 1) % len(c.Servers)
	t.Logf("stopping %s, restarting %s", c.Servers[other].Config.ID, victim)
	if err := c.StopServer(other); err != nil {
		t.Fatal(err)
	}
	// Not before the new range's survivor knows it leads no more: a
	// leader still within its lease could give the victim a join floor.
	survivor := 3 - vi - other
	clustertest.WaitFor(t, 10*time.Second, fmt.Sprintf("range %d leaderless on %s", right.GetRangeId(), c.Servers[survivor].Config.ID), func() bool {
		st := clustertest.RangeInfo(c.Servers[survivor].Server, right.GetRangeId())
		return st != nil && !st.GetLeader()
	})
	const atBirth = "tablestore_partitionserver_join_at_birth_total"
	births := clustertest.MetricValue(t, atBirth, nil)
	back := time.Now()
	if err := c.RestartServer(vi); err != nil {
		t.Fatal(err)
	}
	// A write into the new range: it needs the victim's replica of it.
	const within = 5 * time.Second
	for i := 0; ; i++ {
		err := clustertest.WriteOne(tc, acked, "k20", fmt.Sprintf("back-%04d", i), 2*time.Second)
		if err == nil {
			break
		}
		if time.Since(back) > within {
			t.Fatalf("range %d (a majority of its servers up: %s and one more) took no write within %v of %s's return: %v", right.GetRangeId(), victim, within, victim, err)
		}
	}
	t.Logf("the new range took a write %v after %s's return", time.Since(back).Round(time.Millisecond), victim)
	// By the path under test, not another (the victim replaying the split
	// from a log not compacted after all, or a leader's floor).
	if n := clustertest.MetricValue(t, atBirth, nil) - births; n < 1 {
		t.Fatalf("%s's replica of range %d not created at its birth floor (%s %v)", victim, right.GetRangeId(), atBirth, n)
	}
	clustertest.WriteSeq(t, tc, acked, "degraded", 30)
	clustertest.VerifyExactlyOnce(t, tc, acked)
}
