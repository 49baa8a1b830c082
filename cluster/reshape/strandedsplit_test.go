package reshape

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/internal/masterclient"
	"tablestore/master"
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
	// Not beside other tests: the failpoint is the process's. One Raft
	// group per table: a span of an anchor group is detached first, and
	// the failpoint strikes that start (TestDetachStartFailsThenOpens).
	c := clustertest.StartTuned(t, 3, func(m *master.Config) { clustertest.QuietPolicies(m); m.TableGroups = false }, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 2*time.Minute)
	mc := clustertest.MasterClient(t, c)
	const table = "strandedsplit"
	tc := clustertest.NewTable(t, sc, table)
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	time.Sleep(300 * time.Millisecond)

	right, absent := splitFailingFirstStart(ctx, t, c, mc, table, "k13")
	clustertest.WaitFor(t, 30*time.Second, "every replica of the new range serving", func() bool {
		for _, n := range c.Servers {
			if st := n.Server; st == nil || st.ReplicaState(right.GetRangeId()) == "absent" {
				return false
			}
		}
		return true
	})
	stranded, longest := absent(right.GetRangeId())
	if longest < time.Second {
		t.Fatalf("no replica of range %d was missing for a second while another served (longest %v): the failpoint proved nothing", right.GetRangeId(), longest)
	}
	t.Logf("server %d's replica of range %d was missing for %v", stranded, right.GetRangeId(), longest.Round(time.Millisecond))
	openedReplicaServes(t, c, tc, w, stranded)
}

// splitFailingFirstStart splits table at pk with the failpoint
// partitionserver/split/start-fails failing the first range start after
// it is armed (a split's new range, or the group a detach before the
// split makes), and returns the split's right range and watchAbsent's
// report, watched from before the split: when the failpoint strikes the
// new range's preferred leader, the master answers only once that server
// leads (leadRight), which can be after the reconcile opened it.
func splitFailingFirstStart(ctx context.Context, t *testing.T, c *cluster.Cluster, mc *masterclient.Client, table, pk string) (*pb.RangeDescriptor, func(id uint64) (int, time.Duration)) {
	t.Helper()
	var fails atomic.Int32
	failpoint.Enable("partitionserver/split/start-fails", func() error {
		if fails.Add(1) == 1 {
			return errors.New("failpoint: starting the split range failed")
		}
		return nil
	})
	t.Cleanup(func() { failpoint.Disable("partitionserver/split/start-fails") })
	absent := watchAbsent(t, c, table)
	var right *pb.RangeDescriptor
	splitAt := time.Now()
	err := mc.Call(ctx, func(_ context.Context, m pb.MasterServiceClient) error {
		// The test's deadline, not the client's 5 s per attempt: the
		// answer can wait for the struck server, as above.
		resp, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: pk})
		right = resp.GetRight()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("split answered after %v", time.Since(splitAt).Round(time.Millisecond))
	clustertest.WaitFor(t, 5*time.Second, "the failpoint struck", func() bool { return fails.Load() >= 1 })
	return right, absent
}

// openedReplicaServes stops the server after stranded, whose replica the
// reconcile opened: it and the last one are a majority of every range.
// Then it halts the workload and reads every acknowledged write back
// exactly once.
func openedReplicaServes(t *testing.T, c *cluster.Cluster, tc *aztables.Client, w *clustertest.Workload, stranded int) {
	t.Helper()
	other := (stranded + 1) % len(c.Servers)
	if err := c.StopServer(other); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	acked := w.Halt()
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}
	t.Logf("%d writes acknowledged, %d failed; longest pause: %v", len(acked), w.Failed.Load(), time.Duration(w.MaxGap.Load()))
	clustertest.VerifyExactlyOnce(t, tc, acked)
}

// watchAbsent polls every server for every range of table, and returns a
// function that stops the polling and tells, for a range, which server
// lacked its replica longest while another server served one, and for
// how long.
func watchAbsent(t *testing.T, c *cluster.Cluster, table string) func(id uint64) (int, time.Duration) {
	t.Helper()
	type key struct {
		server int
		id     uint64
	}
	var mu sync.Mutex
	since := map[key]time.Time{}
	longest := map[key]time.Duration{}
	done := make(chan struct{})
	stopped := make(chan struct{})
	mc := clustertest.MasterClient(t, c)
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			m, err := clustertest.GetPartitionMap(context.Background(), mc)
			if err != nil {
				continue
			}
			now := time.Now()
			mu.Lock()
			for _, r := range clustertest.TableRanges(m, table) {
				id := r.GetRangeId()
				var hosted []bool
				any := false
				for _, n := range c.Servers {
					h := n.Server != nil && n.Server.ReplicaState(id) != "absent"
					hosted = append(hosted, h)
					any = any || h
				}
				for i, h := range hosted {
					k := key{i, id}
					if h || !any {
						delete(since, k)
						continue
					}
					if _, ok := since[k]; !ok {
						since[k] = now
					}
					longest[k] = max(longest[k], now.Sub(since[k]))
				}
			}
			mu.Unlock()
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { close(done); <-stopped }) }
	t.Cleanup(stop)
	return func(id uint64) (int, time.Duration) {
		stop() // before the test stops a server: the poller reads c.Servers
		mu.Lock()
		defer mu.Unlock()
		best, d := -1, time.Duration(0)
		for k, v := range longest {
			if k.id == id && v > d {
				best, d = k.server, v
			}
		}
		return best, d
	}
}
