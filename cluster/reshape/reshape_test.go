package reshape

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// TestManualSplitMergeMove drives every reshaping operation through the
// master's operator API while clients write, and checks the data after.
func TestManualSplitMergeMove(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 4, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 3*time.Minute)
	const table = "manual"
	tc := clustertest.NewTable(t, sc, table)
	mc := clustertest.MasterClient(t, c)
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	time.Sleep(300 * time.Millisecond)
	t.Logf("pause before split: %v", time.Duration(w.MaxGap.Swap(0)))

	var split *pb.SplitResponse
	t.Run("split", func(t *testing.T) {
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			var err error
			split, err = m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k13"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if split.GetLeft().GetEnd() != "k13" || split.GetRight().GetStart() != "k13" {
			t.Fatalf("split = %v / %v", split.GetLeft(), split.GetRight())
		}
		clustertest.WaitFor(t, 5*time.Second, "two ranges in the map", func() bool { return len(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)) == 2 })
		m := clustertest.PartitionMap(t, mc)
		if l, r := m.GetLeaders()[split.GetLeft().GetRangeId()], m.GetLeaders()[split.GetRight().GetRangeId()]; l == r {
			t.Errorf("both halves led by %s after the split", l)
		}
	})
	time.Sleep(300 * time.Millisecond)
	t.Logf("pause after split: %v", time.Duration(w.MaxGap.Swap(0)))

	t.Run("move", func(t *testing.T) {
		right := split.GetRight()
		have := map[string]bool{}
		for _, r := range right.GetReplicas() {
			have[r.GetServerId()] = true
		}
		to := ""
		for _, n := range c.Servers {
			if !have[n.Config.ID] {
				to = n.Config.ID
			}
		}
		var moved *pb.MoveResponse
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			var err error
			moved, err = m.Move(ctx, &pb.MoveRequest{RangeId: right.GetRangeId(), ToServerId: to})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if !clustertest.HasServer(moved.GetRange(), to) || len(moved.GetRange().GetReplicas()) != 3 {
			t.Fatalf("after move: replicas %v, want %s among 3", moved.GetRange().GetReplicas(), to)
		}
	})
	time.Sleep(300 * time.Millisecond)
	t.Logf("pause after move: %v", time.Duration(w.MaxGap.Swap(0)))

	t.Run("transfer leader", func(t *testing.T) {
		right := split.GetRight()
		m := clustertest.PartitionMap(t, mc)
		var d *pb.RangeDescriptor
		for _, r := range m.GetRanges() {
			if r.GetRangeId() == right.GetRangeId() {
				d = r
			}
		}
		to := ""
		for _, r := range d.GetReplicas() {
			if r.GetServerId() != m.GetLeaders()[d.GetRangeId()] {
				to = r.GetServerId()
			}
		}
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: d.GetRangeId(), ToServerId: to})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		clustertest.WaitFor(t, 5*time.Second, "the new leader reported", func() bool { return clustertest.PartitionMap(t, mc).GetLeaders()[d.GetRangeId()] == to })
	})
	time.Sleep(300 * time.Millisecond)
	t.Logf("pause after transfer: %v", time.Duration(w.MaxGap.Swap(0)))

	t.Run("merge", func(t *testing.T) {
		if _, err := clustertest.MergeRetrying(ctx, t, mc, split.GetLeft().GetRangeId()); err != nil {
			t.Fatal(err)
		}
		rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)
		if len(rs) != 1 || rs[0].GetStart() != "" || rs[0].GetEnd() != "" {
			t.Fatalf("after merge: %v", rs)
		}
	})
	time.Sleep(300 * time.Millisecond)
	acked := w.Halt()
	t.Logf("pause after merge: %v", time.Duration(w.MaxGap.Swap(0)))
	if w.Failed.Load() > 0 {
		t.Errorf("%d client writes failed during reshaping", w.Failed.Load())
	}
	t.Logf("%d writes acknowledged; longest pause between writes of one client: %v", len(acked), time.Duration(w.MaxGap.Load()))
	clustertest.VerifyExactlyOnce(t, tc, acked)
	checkEvents(t, mc, pb.EventKind_EVENT_KIND_SPLIT, pb.EventKind_EVENT_KIND_MOVE, pb.EventKind_EVENT_KIND_LEADER_TRANSFER, pb.EventKind_EVENT_KIND_MERGE)
}

// checkEvents asserts the event log holds each kind.
func checkEvents(t *testing.T, mc clustertest.MasterCaller, kinds ...pb.EventKind) {
	t.Helper()
	got := map[pb.EventKind]bool{}
	clustertest.WaitFor(t, 5*time.Second, "events recorded", func() bool {
		for _, e := range clustertest.MasterEvents(mc) {
			got[e.GetKind()] = true
		}
		for _, k := range kinds {
			if !got[k] {
				return false
			}
		}
		return true
	})
}

// TestHotRangeSplitsAndSpreads: load over many PartitionKeys above the
// threshold gets the range split; when the load stops, the ranges merge
// back after the cooldown. The split spreads the leaders over the servers,
// or, with --shared-host (dev's default), keeps the new range in the
// range's Raft group (one leader, one log) and the merge is of spans of
// that group.
func TestHotRangeSplitsAndSpreads(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, shared := range []bool{false, true} {
		name := "spread"
		if shared {
			name = "shared host, in group"
		}
		t.Run(name, func(t *testing.T) {
			c := clustertest.StartTuned(t, 3, func(m *master.Config) {
				m.Policy.SharedHost = shared
				m.Policy.SplitLoad = 150
				m.Policy.SplitWindow = time.Second
				m.Policy.MergeLoad = 20
				m.Policy.MergeCooldown = 3 * time.Second
			}, nil)
			sc := clustertest.ServiceClient(t, c, 0)
			const table = "hotrange"
			tc := clustertest.NewTable(t, sc, table)
			mc := clustertest.MasterClient(t, c)
			start := time.Now()
			w := clustertest.StartWorkload(t, tc, 8, clustertest.SpreadKeys)
			clustertest.WaitFor(t, 30*time.Second, "the hot range split", func() bool { return len(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)) >= 2 })
			t.Logf("split after %v of load", time.Since(start).Round(time.Millisecond))
			if shared {
				rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)
				for _, r := range rs {
					if r.GetGroupId() != rs[0].GetRangeId() {
						t.Fatalf("range %d in group %d after a split on a shared host, want %d: %s", r.GetRangeId(), r.GetGroupId(), rs[0].GetRangeId(), describe(rs))
					}
				}
			} else {
				clustertest.WaitFor(t, 30*time.Second, "leaders on several servers", func() bool {
					m := clustertest.PartitionMap(t, mc)
					leaders := map[string]bool{}
					for _, r := range clustertest.TableRanges(m, table) {
						if l := m.GetLeaders()[r.GetRangeId()]; l != "" {
							leaders[l] = true
						}
					}
					return len(leaders) >= 2
				})
			}
			acked := w.Halt()
			if w.Failed.Load() > 0 {
				t.Errorf("%d client writes failed", w.Failed.Load())
			}
			t.Logf("%d ranges while loaded; longest client write pause %v", len(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)), time.Duration(w.MaxGap.Load()))
			clustertest.WaitFor(t, 60*time.Second, "cold ranges merged back", func() bool { return len(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)) == 1 })
			clustertest.VerifyExactlyOnce(t, tc, acked)
			checkEvents(t, mc, pb.EventKind_EVENT_KIND_SPLIT, pb.EventKind_EVENT_KIND_MERGE)
		})
	}
}

// TestHotPartitionThrottledNotSplit: one PartitionKey over its target gets
// 503 ServerBusy and its range is not split.
func TestHotPartitionThrottledNotSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTuned(t, 3, func(m *master.Config) {
		m.Policy.SplitLoad = 50
		m.Policy.MergeLoad = 5
		m.Policy.SplitWindow = 500 * time.Millisecond
	}, func(s *partitionserver.Config) { s.PartitionThrottle = 100 })
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, time.Minute)
	const table = "hotkey"
	if _, err := sc.CreateTable(ctx, table, nil); err != nil {
		t.Fatal(err)
	}
	// No SDK retries: the 503s must reach the client.
	tc := noRetryClient(t, c).NewClient(table)
	// Several writers at once: one writer waiting for each insert offers
	// less than the target when an insert takes over 10 ms (a loaded 2-core
	// box: 200 accepted, none refused, in 4 s), and then nothing is over
	// the target to refuse.
	const writers = 8
	var busy, ok atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	deadline := time.Now().Add(4 * time.Second)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				body := []byte(fmt.Sprintf(`{"PartitionKey":"hot","RowKey":"%d-%06d"}`, w, i))
				_, err := tc.AddEntity(ctx, body, nil)
				switch {
				case err == nil:
					ok.Add(1)
				case clustertest.IsStatus(err, 503):
					busy.Add(1)
				default:
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		t.Fatalf("insert: %v", *err)
	}
	if busy.Load() == 0 {
		t.Fatalf("no 503 ServerBusy for one partition over its target (%d accepted)", ok.Load())
	}
	t.Logf("%d accepted, %d refused with 503", ok.Load(), busy.Load())
	mc := clustertest.MasterClient(t, c)
	if rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table); len(rs) != 1 {
		t.Fatalf("a single hot partition was split: %d ranges", len(rs))
	}
	checkEvents(t, mc, pb.EventKind_EVENT_KIND_THROTTLE)
}

// TestDeadServerReplicasRecreated: the replicas of a server that stays
// down are re-created on another server.
func TestDeadServerReplicasRecreated(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTuned(t, 4, func(m *master.Config) {
		m.ServerTimeout = time.Second
		m.Policy.ReplicateAfter = 2 * time.Second
		m.Policy.BalanceLeaders = false
	}, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	const table = "rerep"
	tc := clustertest.NewTable(t, sc, table)
	mc := clustertest.MasterClient(t, c)
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	time.Sleep(500 * time.Millisecond)
	rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)
	victim := rs[0].GetReplicas()[0].GetServerId()
	t.Logf("stopping %s", victim)
	if err := c.StopServer(c.ServerIndex(victim)); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 60*time.Second, "replicas re-created away from the dead server", func() bool {
		for _, r := range clustertest.TableRanges(clustertest.PartitionMap(t, mc), table) {
			if clustertest.HasServer(r, victim) || len(r.GetReplicas()) != 3 {
				return false
			}
		}
		return true
	})
	acked := w.Halt()
	if w.Failed.Load() > 0 {
		t.Errorf("%d client writes failed", w.Failed.Load())
	}
	clustertest.VerifyExactlyOnce(t, tc, acked)
	checkEvents(t, mc, pb.EventKind_EVENT_KIND_SERVER_DOWN, pb.EventKind_EVENT_KIND_RE_REPLICATE)
}

func noRetryClient(t *testing.T, c *cluster.Cluster) *aztables.ServiceClient {
	t.Helper()
	opts := &aztables.ClientOptions{}
	opts.Retry.MaxRetries = -1
	sc, err := aztables.NewServiceClientFromConnectionString(c.ConnectionString(0), opts)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestContinuationAcrossSplitAndMerge pages through a table while its range
// is split and merged between pages: every entity comes back exactly once.
func TestContinuationAcrossSplitAndMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "paging"
	tc := clustertest.NewTable(t, sc, table)
	want := map[string]bool{}
	for i := 0; i < 260; i++ {
		pk, rk := fmt.Sprintf("k%02d", i%26), fmt.Sprintf("r%03d", i)
		// 409: the SDK retried an insert whose first answer was lost (a
		// loaded machine); the entity is there, which is all this needs.
		if _, err := tc.AddEntity(ctx, []byte(fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q}`, pk, rk)), nil); err != nil && !clustertest.IsStatus(err, http.StatusConflict) {
			t.Fatal(err)
		}
		want[pk+"/"+rk] = true
	}
	mc := clustertest.MasterClient(t, c)
	reshape := []func() error{
		func() error { // split ahead of the cursor
			return mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
				_, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k13"})
				return err
			})
		},
		func() error { // split behind and around it
			return mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
				_, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k05"})
				return err
			})
		},
		func() error { // merge everything back
			for {
				rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)
				if len(rs) == 1 {
					return nil
				}
				sort.Slice(rs, func(i, j int) bool { return rs[i].GetStart() < rs[j].GetStart() })
				if _, err := clustertest.MergeRetrying(ctx, t, mc, rs[0].GetRangeId()); err != nil {
					return err
				}
			}
		},
	}
	seen := map[string]int{}
	top := int32(23)
	pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top})
	for page := 0; pager.More(); page++ {
		resp, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		for _, raw := range resp.Entities {
			var e aztables.EDMEntity
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			seen[e.PartitionKey+"/"+e.RowKey]++
		}
		if page < len(reshape) {
			if err := reshape[page](); err != nil {
				t.Fatalf("reshape after page %d: %v", page, err)
			}
		}
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("%s seen %d times", k, seen[k])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d distinct entities, want %d", len(seen), len(want))
	}
}
