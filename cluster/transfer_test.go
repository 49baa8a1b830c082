package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	pb "tablestore/proto/tablestorepb"
)

// TestTransferToUnavailableFollower asks a range leader (directly, as a
// master with a stale view would) to hand its leadership to a follower
// that is stopped or paused (SIGSTOP-like: connections open, no answer),
// several times. Writes to the range must keep succeeding within a few
// seconds: a transfer that cannot complete must not wedge the leader.
func TestTransferToUnavailableFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, mode := range []string{"stopped", "paused"} {
		t.Run(mode, func(t *testing.T) {
			c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
			sc := clustertest.ServiceClient(t, c, 0)
			const table = "transfer"
			tc := clustertest.NewTable(t, sc, table)
			mc := clustertest.MasterClient(t, c)
			acked := map[string]int64{}
			clustertest.WriteSeq(t, tc, acked, "before", 20)
			rng := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
			var leader, follower string
			clustertest.WaitFor(t, 10*time.Second, "a range leader", func() bool {
				leader = clustertest.PartitionMap(t, mc).GetLeaders()[rng.GetRangeId()]
				return leader != ""
			})
			for _, r := range rng.GetReplicas() {
				if r.GetServerId() != leader {
					follower = r.GetServerId()
					break
				}
			}
			fi := c.ServerIndex(follower)
			addr := c.Servers[fi].Config.RaftAddr
			if mode == "stopped" {
				if err := c.StopServer(fi); err != nil {
					t.Fatal(err)
				}
			} else {
				c.PauseServer(fi, true)
				defer c.PauseServer(fi, false)
			}
			clustertest.WriteSeq(t, tc, acked, "lagging", 20)
			ls := c.Servers[c.ServerIndex(leader)].Server
			for i := 0; i < 3; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				_, err := ls.Service().TransferLeader(ctx, &pb.TransferLeaderRequest{RangeId: rng.GetRangeId(), ToServerId: follower, ToRaftAddr: addr})
				cancel()
				t.Logf("transfer %d to %s %s: %v", i, mode, follower, err)
			}
			start := time.Now()
			var worst time.Duration
			for i := 0; i < 20; i++ {
				t0 := time.Now()
				clustertest.WriteSeq(t, tc, acked, fmt.Sprintf("after%02d", i), 1)
				worst = max(worst, time.Since(t0))
			}
			t.Logf("20 writes after the transfers in %v, slowest %v", time.Since(start).Round(time.Millisecond), worst.Round(time.Millisecond))
			if worst > 5*time.Second {
				t.Errorf("a write took %v after a transfer to a %s follower", worst, mode)
			}
			clustertest.VerifyExactlyOnce(t, tc, acked)
		})
	}
}
