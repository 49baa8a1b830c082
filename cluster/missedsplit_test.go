package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"tablestore/partitionserver"
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
	besideOneOther(t)
	c := startTuned(t, 3, quietPolicies, func(s *partitionserver.Config) {
		s.SnapshotThreshold = 64
		s.SnapshotInterval = 100 * time.Millisecond
		s.TrailingLogs = 8
	})
	sc := serviceClient(t, c, 0)
	ctx := ctxT(t, 3*time.Minute)
	const table = "missedsplit"
	tc := newTable(t, sc, table)
	mc := masterClient(t, c)
	acked := map[string]int64{}
	writeSeq(t, tc, acked, "before", 30)

	left := tableRanges(partitionMap(t, mc), table)[0]
	victim, vi := followerOf(t, c, mc, left)
	t.Logf("stopping %s across the split", victim)
	if err := c.StopServer(vi); err != nil {
		t.Fatal(err)
	}
	right := splitListing(t, ctx, mc, table, "k13", victim)
	writeSeq(t, tc, acked, "after", 200)
	// Both live replicas of the left range snapshotted after the split:
	// the victim cannot replay it.
	waitFor(t, 30*time.Second, "the left range's log compacted", func() bool {
		for i, n := range c.Servers {
			if i != vi && !hasSnapshot(n.Config.DataDir, left.GetRangeId()) {
				return false
			}
		}
		return true
	})

	// Another member of both ranges goes down before the victim is back.
	other := (vi + 1) % len(c.Servers)
	t.Logf("stopping %s, restarting %s", c.Servers[other].Config.ID, victim)
	if err := c.StopServer(other); err != nil {
		t.Fatal(err)
	}
	// Not before the new range's survivor knows it leads no more: a
	// leader still within its lease could give the victim a join floor.
	survivor := 3 - vi - other
	waitFor(t, 10*time.Second, fmt.Sprintf("range %d leaderless on %s", right.GetRangeId(), c.Servers[survivor].Config.ID), func() bool {
		st := rangeInfo(c.Servers[survivor].Server, right.GetRangeId())
		return st != nil && !st.GetLeader()
	})
	const atBirth = "tablestore_partitionserver_join_at_birth_total"
	births := metricValue(t, atBirth, nil)
	back := time.Now()
	if err := c.RestartServer(vi); err != nil {
		t.Fatal(err)
	}
	// A write into the new range: it needs the victim's replica of it.
	const within = 5 * time.Second
	for i := 0; ; i++ {
		pk, rk := "k20", fmt.Sprintf("back-%04d", i)
		v := int64(len(acked) + 1)
		body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "V": fmt.Sprint(v), "V@odata.type": "Edm.Int64"})
		wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := tc.UpsertEntity(wctx, body, nil)
		cancel()
		if err == nil {
			acked[pk+"/"+rk] = v
			break
		}
		if time.Since(back) > within {
			t.Fatalf("range %d (a majority of its servers up: %s and one more) took no write within %v of %s's return: %v", right.GetRangeId(), victim, within, victim, err)
		}
	}
	t.Logf("the new range took a write %v after %s's return", time.Since(back).Round(time.Millisecond), victim)
	// By the path under test, not another (the victim replaying the split
	// from a log not compacted after all, or a leader's floor).
	if n := metricValue(t, atBirth, nil) - births; n < 1 {
		t.Fatalf("%s's replica of range %d not created at its birth floor (%s %v)", victim, right.GetRangeId(), atBirth, n)
	}
	writeSeq(t, tc, acked, "degraded", 30)
	verifyExactlyOnce(t, tc, acked)
}
