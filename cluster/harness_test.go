package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/internal/logging"
	"tablestore/internal/masterclient"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// soleMasterElects shortens the Raft timeouts of a cluster's only master:
// with no other voter, its first election (and its election after a
// restart) wins at once, and the default heartbeat timeout (500 ms, so
// 0.5 - 1 s before it campaigns) was most of every test cluster's start.
// Nothing can contest a sole voter's leadership, so shorter timeouts
// change no outcome. Clusters of several masters keep the defaults.
func soleMasterElects(m *master.Config) {
	if len(m.Peers) > 1 {
		return
	}
	m.RaftHeartbeatTimeout = 50 * time.Millisecond
	m.RaftElectionTimeout = 50 * time.Millisecond
	m.RaftLeaderLease = 50 * time.Millisecond
}

// startCluster runs a cluster for one test with fast failure detection.
func startCluster(t *testing.T, masters, servers int) *Cluster {
	t.Helper()
	c, err := Start(Options{
		Masters: masters, Servers: servers, Frontends: 1, DataDir: t.TempDir(),
		Logger:     logging.FromEnv(""),
		TuneMaster: soleMasterElects,
		TuneServer: func(cfg *partitionserver.Config) {
			cfg.HeartbeatInterval = 200 * time.Millisecond
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// besideOneOther lets a cluster test run beside one other such test once
// the package's sequential tests are done (go test's -parallel is
// GOMAXPROCS: two at a time on CI's two cores). The package's tests mostly
// wait (elections, leases, the master's intervals, fsyncs: ~20 % of one
// core over its whole run), so a pair finishes in little more than the
// longer one's time. Only for tests that enable no failpoint and read no
// process-wide metric (both are shared by every cluster of the binary),
// change no package variable, and assert no latency bound a neighbour's
// load could break.
func besideOneOther(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// serviceClient is the official SDK client on front-end i, with retries
// tuned so a failover shows up as retried requests rather than long sleeps.
func serviceClient(t *testing.T, c *Cluster, i int) *aztables.ServiceClient {
	t.Helper()
	opts := &aztables.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: 8, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 500 * time.Millisecond, TryTimeout: 15 * time.Second}
	sc, err := aztables.NewServiceClientFromConnectionString(c.ConnectionString(i), opts)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rangeLeader returns the index of the partition server leading the first
// range of table, as the master leader reports it.
func rangeLeader(c *Cluster, table string) int {
	for _, m := range c.Masters {
		if m.Server == nil || !m.Server.IsLeader() {
			continue
		}
		pm := m.Server.PartitionMap()
		for _, r := range pm.GetRanges() {
			if r.GetTable() == table {
				if l, ok := pm.GetLeaders()[r.GetRangeId()]; ok {
					return c.ServerIndex(l)
				}
			}
		}
	}
	return -1
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// freeBasePort is a base port for a cluster of one master, three servers
// and one front-end whose ports no other cluster of the binary gets
// (cluster.FreeBasePort).
func freeBasePort(t *testing.T) int {
	t.Helper()
	p, err := FreeBasePort(Options{Masters: 1, Servers: 3, Frontends: 1})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newTable creates a table through sc and returns its client.
func newTable(t *testing.T, sc *aztables.ServiceClient, name string) *aztables.Client {
	t.Helper()
	if _, err := sc.CreateTable(ctxT(t, time.Minute), name, nil); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	return sc.NewClient(name)
}

// masterCaller is what the event helpers need of a master client.
type masterCaller interface {
	Call(context.Context, func(context.Context, pb.MasterServiceClient) error) error
}

// masterEvents returns the master's event log (nil if it could not be
// read within 5 s).
func masterEvents(mc masterCaller) []*pb.Event {
	var out []*pb.Event
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		var err error
		out, err = masterclient.ReadEvents(ctx, m) // a cut stream is retried whole
		return err
	})
	if err != nil {
		return nil
	}
	return out
}
