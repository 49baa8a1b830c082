package cluster_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/anishathalye/porcupine"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/masterclient"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// quiesceFast makes ranges go quiet after a short idle time.
func quiesceFast(s *partitionserver.Config) { s.QuiesceAfter = 300 * time.Millisecond }

// waitQuiet waits until every replica of table's ranges on a running
// server is quiet.
func waitQuiet(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, table string, timeout time.Duration) {
	t.Helper()
	clustertest.WaitFor(t, timeout, "table "+table+" quiet on every replica", func() bool {
		m := clustertest.PartitionMap(t, mc)
		for _, d := range clustertest.TableRanges(m, table) {
			for _, r := range d.GetReplicas() {
				i := c.ServerIndex(r.GetServerId())
				if i < 0 || c.Servers[i].Server == nil {
					continue
				}
				if st := c.Servers[i].Server.ReplicaState(d.GetRangeId()); st != "quiet" {
					if time.Now().Second()%3 == 0 {
						t.Logf("range %d on %s: %s", d.GetRangeId(), r.GetServerId(), st)
					}
					return false
				}
			}
		}
		return true
	})
}

func putV(ctx context.Context, tc *aztables.Client, pk string, v int) error {
	body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": "r", "V": v})
	_, err := tc.UpsertEntity(ctx, body, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	return err
}

func getV(ctx context.Context, tc *aztables.Client, pk string) (int, error) {
	resp, err := tc.GetEntity(ctx, pk, "r", nil)
	if err != nil {
		return 0, err
	}
	var e struct{ V int }
	if err := json.Unmarshal(resp.Value, &e); err != nil {
		return 0, err
	}
	return e.V, nil
}

// TestQuietRangeWakesAndFailsOver: an idle range goes quiet on every
// replica; a read is served quickly (by the quiet leader without waking it,
// see quietread_test.go); with the quiet leader's server killed the range
// is writable again (woken elsewhere) within the election time plus the
// master's server timeout.
func TestQuietRangeWakesAndFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// Quiet reads off: the reads here are to wake the range (a quiet
	// leader would serve them without waking, cluster/quietread_test.go).
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, func(s *partitionserver.Config) { quiesceFast(s); s.QuietReadTimeout = 0 })
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "quiet"
	tc := clustertest.NewTable(t, sc, table)
	if err := putV(ctx, tc, "k", 1); err != nil {
		t.Fatal(err)
	}
	// Once quiet it stays quiet: nothing reopens it (a follower that
	// missed the marker's commit would time out and wake the others).
	waitQuiet(t, c, mc, table, 10*time.Second)
	time.Sleep(1500 * time.Millisecond)
	for i, n := range c.Servers {
		if st := n.Server.ReplicaState(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()); st != "quiet" {
			t.Errorf("server %d: replica %s 1.5s after the range went quiet", i, st)
		}
	}
	var wakes []time.Duration
	for i := 0; i < 5; i++ {
		waitQuiet(t, c, mc, table, 10*time.Second)
		start := time.Now()
		v, err := getV(ctx, tc, "k")
		wakes = append(wakes, time.Since(start))
		if err != nil || v != 1 {
			t.Fatalf("read after quiet: %v, %v", v, err)
		}
	}
	sort.Slice(wakes, func(i, j int) bool { return wakes[i] < wakes[j] })
	t.Logf("first read of a quiet range through the front-end: %v", wakes)

	waitQuiet(t, c, mc, table, 10*time.Second)
	leader := clustertest.RangeLeader(c, table)
	if leader < 0 {
		t.Fatal("a quiet range reports no leader to the master")
	}
	if err := c.CrashServer(leader); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Election (500 ms) + the master's server timeout (2 s) + routing.
	const bound = 2*time.Second + 500*time.Millisecond + 2*time.Second
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := putV(wctx, tc, "k", 2)
		if err == nil {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("range not writable after its quiet leader's server died: %v", err)
		}
	}
	took := time.Since(start)
	t.Logf("writable %v after the quiet leader's server was killed", took)
	if took > bound {
		t.Errorf("writable after %v, want within %v", took, bound)
	}
	if v, err := getV(ctx, tc, "k"); err != nil || v != 2 {
		t.Fatalf("read after failover: %v, %v", v, err)
	}
}

// TestQuietRangeSplitMergeMove: each reshaping operation is applied to a
// quiet range, and every entity stays readable.
func TestQuietRangeSplitMergeMove(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 4, clustertest.QuietPolicies, quiesceFast)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "quietreshape"
	tc := clustertest.NewTable(t, sc, table)
	keys := []string{"a", "c", "e", "g", "m", "p", "t", "x"}
	for i, k := range keys {
		if err := putV(ctx, tc, k, i); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string) {
		t.Helper()
		for i, k := range keys {
			if v, err := getV(ctx, tc, k); err != nil || v != i {
				t.Fatalf("after %s: %s = %v, %v", step, k, v, err)
			}
		}
	}
	call := func(fn func(ctx context.Context, m pb.MasterServiceClient) error) {
		t.Helper()
		if err := mc.Call(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	waitQuiet(t, c, mc, table, 10*time.Second)
	var split *pb.SplitResponse
	call(func(ctx context.Context, m pb.MasterServiceClient) error {
		var err error
		split, err = m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "m"})
		return err
	})
	check("split")

	waitQuiet(t, c, mc, table, 15*time.Second)
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
	call(func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Move(ctx, &pb.MoveRequest{RangeId: right.GetRangeId(), ToServerId: to})
		return err
	})
	check("move")

	waitQuiet(t, c, mc, table, 15*time.Second)
	if _, err := clustertest.MergeRetrying(ctx, t, mc, split.GetLeft().GetRangeId()); err != nil {
		t.Fatal(err)
	}
	check("merge")
	clustertest.WaitFor(t, 10*time.Second, "one range in the map", func() bool { return len(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)) == 1 })
	waitQuiet(t, c, mc, table, 15*time.Second)
	check("quiet again")
}

// TestLinearizableAcrossQuiesce: clients work in bursts separated by idle
// gaps long enough for the range to go quiet, so every burst starts by
// waking it (several clients at once); one gap also loses the quiet
// leader's server. Each burst opens with reads of every key by every
// client, which the quiet leader serves without waking (quiet reads),
// racing the burst's first writes, which wake it. The history must be
// linearizable.
func TestLinearizableAcrossQuiesce(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, quietReads)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	const table = "linearquiet"
	served := quietReadCount(t, "served")
	tc := clustertest.NewTable(t, sc, table)
	ctx := clustertest.Context(t, 2*time.Minute)
	keys := []string{"k0", "k1", "k2"}
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	burst := func(round int) {
		var wg sync.WaitGroup
		for client := 0; client < 4; client++ {
			wg.Add(1)
			go func(client int) {
				defer wg.Done()
				for i := -len(keys); i < 12; i++ {
					key := keys[(client+i+len(keys))%len(keys)]
					if i >= 0 && (client+i)%2 == 0 {
						v := round*1_000_000 + client*1000 + i
						call := now()
						err := putV(ctx, tc, key, v)
						ret := now()
						if err != nil {
							ret = math.MaxInt64
						}
						record(porcupine.Operation{ClientId: client, Input: registerInput{key: key, put: true, value: v}, Call: call, Output: registerOutput{}, Return: ret})
						continue
					}
					call := now()
					v, err := getV(ctx, tc, key)
					ret := now()
					out := registerOutput{value: v}
					switch {
					case err == nil:
					case clustertest.IsStatus(err, http.StatusNotFound):
						out.value = -1
					default:
						continue
					}
					record(porcupine.Operation{ClientId: client, Input: registerInput{key: key}, Call: call, Output: out, Return: ret})
				}
			}(client)
		}
		wg.Wait()
	}
	for round := 0; round < 4; round++ {
		burst(round)
		waitQuiet(t, c, mc, table, 15*time.Second)
		if round == 2 {
			leader := clustertest.RangeLeader(c, table)
			if leader < 0 {
				t.Fatal("no leader reported for the quiet range")
			}
			if err := c.StopServer(leader); err != nil {
				t.Fatal(err)
			}
			burst(10 + round)
			if err := c.RestartServer(leader); err != nil {
				t.Fatal(err)
			}
		}
	}
	if quietReadCount(t, "served") == served {
		t.Error("no read of the quiet range was served without waking it")
	}
	checkLinearizable(t, history)
}

// dropUntil drops this server's Raft traffic to one peer address until a
// time: a follower that misses a moment of its leader's traffic, as one on
// a loaded machine falls behind.
type dropUntil struct {
	addr  string
	until time.Time
}

func (f dropUntil) Outgoing(peer string) (time.Duration, bool) {
	return 0, peer == f.addr && time.Now().Before(f.until)
}

// TestQuiesceWaitsForSlowFollower: the leader's traffic to one open
// follower is lost for 1.2 s, across the moment its QUIESCE marker
// commits (the range was written just before, so the marker comes
// QuiesceAfter, 300 ms, later). The leader now closes only once every
// voter acknowledged learning the marker's commit (or markerWait, 2 s,
// passed), so the follower goes quiet with it once the traffic flows;
// before, the leader closed 250 ms after the commit, the follower never
// learned it and stayed open without a leader (its pre-votes refused by
// the closed members) until a request woke the range: a moved replica not
// quiet within 15 s on a loaded machine (TestQuietRangeSplitMergeMove).
func TestQuiesceWaitsForSlowFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "slowquiet"
	c, mc, tc, ctx := quietTable(t, table, 2*time.Minute)
	waitQuiet(t, c, mc, table, 20*time.Second)
	leader := clustertest.RangeLeader(c, table)
	if leader < 0 {
		t.Fatal("a quiet range reports no leader to the master")
	}
	slow := (leader + 1) % 3
	if err := putV(ctx, tc, "k", 1); err != nil {
		t.Fatal(err)
	}
	id := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()
	// Open: a quiet follower stores the write's entries closed, and it
	// closes at the marker only once open.
	clustertest.WaitFor(t, 10*time.Second, "the follower open", func() bool {
		return c.Servers[slow].Server.ReplicaState(id) == "active"
	})
	c.Servers[leader].Server.SetRaftFault(dropUntil{addr: c.Servers[slow].Server.RaftAddr(), until: time.Now().Add(1200 * time.Millisecond)})
	defer c.Servers[leader].Server.SetRaftFault(nil)
	clustertest.WaitFor(t, 30*time.Second, "the leader's replica quiet", func() bool {
		return c.Servers[leader].Server.ReplicaState(id) == "quiet"
	})
	// The follower closes when it applies the marker, which the leader
	// waited for. Never, before.
	start := time.Now()
	clustertest.WaitFor(t, 5*time.Second, "the follower quiet", func() bool {
		return c.Servers[slow].Server.ReplicaState(id) == "quiet"
	})
	t.Logf("follower quiet %v after the leader", time.Since(start))
}
