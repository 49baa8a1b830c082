package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	"tablestore/partitionserver"
)

// TestReshapeAnnouncesCommits: reshaping does not wait for raft's commit
// tick. With a commit timeout of a minute, a follower of an idle range
// would learn that an entry committed only a minute after it was sent; yet
// a split's followers start the new range (they do when they apply the
// split) and a merge completes (the master waits until every replica
// applied the freeze) within seconds, because the leader announces each
// reshaping commit with a barrier.
func TestReshapeAnnouncesCommits(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, func(s *partitionserver.Config) {
		s.RaftCommitTimeout = time.Minute
		s.QuiesceAfter = 0
	})
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 3*time.Minute)
	const table = "announced"
	tc := clustertest.NewTable(t, sc, table)
	for i := 0; i < 26; i++ {
		body := fmt.Sprintf(`{"PartitionKey":"k%02d","RowKey":"r"}`, i)
		if _, err := tc.AddEntity(ctx, []byte(body), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Well below the commit timeout, and generous for a loaded machine.
	const bound = 20 * time.Second

	split := clustertest.SplitRange(t, ctx, mc, table, "k13")
	right := split.GetRight().GetRangeId()
	clustertest.WaitFor(t, bound, "the split-off range open on every server", func() bool {
		for _, n := range c.Servers {
			if st := n.Server.ReplicaState(right); st != "active" {
				return false
			}
		}
		return true
	})

	mctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	_, err := clustertest.MergeRetrying(mctx, t, mc, split.GetLeft().GetRangeId())
	if err != nil {
		t.Fatalf("merge after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("merge took %v", time.Since(start).Round(time.Millisecond))
	for i := 0; i < 26; i++ {
		if _, err := tc.GetEntity(ctx, fmt.Sprintf("k%02d", i), "r", nil); err != nil {
			t.Fatalf("k%02d after the merge: %v", i, err)
		}
	}
}
