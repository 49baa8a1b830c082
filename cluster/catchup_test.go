package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// TestReplicaDownAcrossSplit: a replica that is down while its range splits
// must host the split-off range within 10 s of coming back, with the data,
// whether it catches up by replaying the log (which carries the split) or by
// a snapshot taken after the split (the log was compacted meanwhile). The
// proof is that the split-off range then keeps a quorum and its data with
// another of its replicas stopped.
func TestReplicaDownAcrossSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	besideOneOther(t)
	for _, compact := range []bool{false, true} {
		name := "log replay"
		if compact {
			name = "snapshot after a log compaction"
		}
		t.Run(name, func(t *testing.T) {
			var tuneS func(*partitionserver.Config)
			if compact {
				tuneS = func(s *partitionserver.Config) {
					s.SnapshotThreshold = 64
					s.SnapshotInterval = 100 * time.Millisecond
					s.TrailingLogs = 8
				}
			}
			c := startTuned(t, 3, quietPolicies, tuneS)
			sc := serviceClient(t, c, 0)
			ctx := ctxT(t, 3*time.Minute)
			const table = "downsplit"
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
			if compact {
				// Both live replicas of the left range have snapshotted
				// after the split: the victim cannot replay it.
				waitFor(t, 30*time.Second, "the left range's log compacted", func() bool {
					for i, n := range c.Servers {
						if i != vi && !hasSnapshot(n.Config.DataDir, left.GetRangeId()) {
							return false
						}
					}
					return true
				})
			}

			back := time.Now()
			if err := c.RestartServer(vi); err != nil {
				t.Fatal(err)
			}
			var target uint64
			for i, n := range c.Servers {
				if i == vi {
					continue
				}
				if st := rangeInfo(n.Server, right.GetRangeId()); st != nil && st.GetAppliedIndex() > target {
					target = st.GetAppliedIndex()
				}
			}
			waitFor(t, 10*time.Second, fmt.Sprintf("range %d on %s caught up to index %d", right.GetRangeId(), victim, target), func() bool {
				st := rangeInfo(c.Servers[vi].Server, right.GetRangeId())
				return st != nil && st.GetAppliedIndex() >= target
			})
			t.Logf("split-off range on %s after %v", victim, time.Since(back).Round(time.Millisecond))

			// Stop another replica: the split-off range lives on the victim
			// and one more server.
			for i := range c.Servers {
				if i != vi {
					t.Logf("stopping %s", c.Servers[i].Config.ID)
					if err := c.StopServer(i); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			writeSeq(t, tc, acked, "degraded", 30)
			verifyExactlyOnce(t, tc, acked)
		})
	}
}

// writeSeq upserts n entities spread over the keys k00..k25, each within a
// bounded time, and records them in acked.
func writeSeq(t *testing.T, tc *aztables.Client, acked map[string]int64, tag string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		pk, rk := fmt.Sprintf("k%02d", i%26), fmt.Sprintf("%s-%04d", tag, i)
		v := int64(len(acked) + 1)
		body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "V": fmt.Sprint(v), "V@odata.type": "Edm.Int64"})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := tc.UpsertEntity(ctx, body, nil)
		cancel()
		if err != nil {
			t.Fatalf("write %s/%s: %v", pk, rk, err)
		}
		acked[pk+"/"+rk] = v
	}
}

// rangeInfo is server s's view of one of its replicas, nil if it hosts none.
func rangeInfo(s *partitionserver.Server, id uint64) *pb.RangeStatus {
	if s == nil {
		return nil
	}
	resp, err := s.Service().RangeInfo(context.Background(), &pb.RangeInfoRequest{RangeId: id})
	if err != nil {
		return nil
	}
	return resp.GetStatus()
}

// hasSnapshot reports whether the replica of range id in dataDir has taken
// a Raft snapshot.
func hasSnapshot(dataDir string, id uint64) bool {
	ents, err := os.ReadDir(filepath.Join(dataDir, "ranges", fmt.Sprint(id), "snapshots"))
	return err == nil && len(ents) > 0
}
