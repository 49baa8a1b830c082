package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"tablestore/internal/failpoint"
	pb "tablestore/proto/tablestorepb"
)

// TestMergeAbortedWhenAReplicaMissesTheFreeze: one server of the right
// range is cut off from every other server's Raft traffic (it still
// answers the master) just before the freeze (failpoint
// master/merge/before-freeze), after the master's pre-freeze checks and
// within the leader's heard-from window, so its replica never applies the
// freeze (chaos seed 202: a failing fsync there held the range's writes
// 4.9 s).
// The master records the merge as aborted after its bounded wait and
// unfreezes the range: the right half takes writes again at once, without
// the cut server, and the merge goes through once the cut heals, with
// every acknowledged write there exactly once.
func TestMergeAbortedWhenAReplicaMissesTheFreeze(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startTuned(t, 3, quietPolicies, nil)
	sc := serviceClient(t, c, 0)
	const table = "mergeabort"
	tcl := newTable(t, sc, table)
	mc := masterClient(t, c)
	acked := map[string]int64{}
	writeSeq(t, tcl, acked, "before", 26)
	ctx := ctxT(t, 3*time.Minute)
	split := splitRange(t, ctx, mc, table, "k13")
	left, right := split.GetLeft().GetRangeId(), split.GetRight().GetRangeId()
	// Cut a server that leads neither half (3 servers, RF 3: every server
	// holds a replica of both): the right half keeps a leader and a
	// follower, a majority.
	cut := -1
	waitFor(t, 10*time.Second, "both halves led", func() bool {
		l := partitionMap(t, mc).GetLeaders()
		ll, rl := l[left], l[right]
		for i, s := range c.Servers {
			if id := s.Server.ID(); ll != "" && rl != "" && id != ll && id != rl {
				cut = i
				return true
			}
		}
		return false
	})
	heal := func() {
		for _, s := range c.Servers {
			s.Server.SetRaftFault(nil)
		}
	}
	defer heal()
	var once sync.Once
	failpoint.Enable("master/merge/before-freeze", func() error {
		once.Do(func() {
			for i, s := range c.Servers {
				if i == cut {
					s.Server.SetRaftFault(dropAll{})
				} else {
					s.Server.SetRaftFault(dropTo{c.Servers[cut].Server.RaftAddr()})
				}
			}
		})
		return nil
	})
	start := time.Now()
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Merge(ctx, &pb.MergeRequest{RangeId: left})
		return err
	})
	failpoint.Disable("master/merge/before-freeze")
	aborted := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "merge aborted") {
		t.Fatalf("merge with ps%d cut off right before the freeze: %v, want an abort", cut+1, err)
	}
	t.Logf("merge aborted after %v: %v", aborted, err)
	// Unfrozen: the right half takes writes again (without the cut server).
	var firstWrite time.Duration
	waitFor(t, 20*time.Second, "a write to the right half after the abort", func() bool {
		body, _ := json.Marshal(map[string]any{"PartitionKey": "k20", "RowKey": "probe", "V": "1000000", "V@odata.type": "Edm.Int64"})
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := tcl.UpsertEntity(wctx, body, nil)
		if err == nil {
			firstWrite = time.Since(start)
		}
		return err == nil
	})
	t.Logf("right half writable %v after the merge began", firstWrite)
	if rs := tableRanges(partitionMap(t, mc), table); len(rs) != 2 {
		// Aborted means not merged: both halves stay in the map.
		t.Fatalf("after the abort: %s, want both halves", describe(rs))
	}
	writeSeq(t, tcl, acked, "during", 26)
	heal()
	waitFor(t, 60*time.Second, "the merge after the cut healed", func() bool {
		return mergeDone(ctx, t, mc, table, left)
	})
	writeSeq(t, tcl, acked, "after", 26)
	acked["k20/probe"] = 1000000
	verifyExactlyOnce(t, tcl, acked)
}
