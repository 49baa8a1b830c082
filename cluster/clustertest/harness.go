package clustertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/prometheus/client_golang/prometheus"

	"tablestore/cluster"
	"tablestore/internal/logging"
	"tablestore/master"
	"tablestore/partitionserver"
)

// SoleMasterElects shortens the Raft timeouts of a cluster's only master:
// with no other voter, its first election (and its election after a
// restart) wins at once, and the default heartbeat timeout (500 ms, so
// 0.5 - 1 s before it campaigns) was most of every test cluster's start.
// Nothing can contest a sole voter's leadership, so shorter timeouts
// change no outcome. Clusters of several masters keep the defaults.
func SoleMasterElects(m *master.Config) {
	if len(m.Peers) > 1 {
		return
	}
	m.RaftHeartbeatTimeout = 50 * time.Millisecond
	m.RaftElectionTimeout = 50 * time.Millisecond
	m.RaftLeaderLease = 50 * time.Millisecond
}

// Start runs a cluster for one test with fast failure detection.
func Start(t testing.TB, masters, servers int) *cluster.Cluster {
	t.Helper()
	c, err := cluster.Start(cluster.Options{
		Masters: masters, Servers: servers, Frontends: 1, DataDir: t.TempDir(),
		Logger:     logging.FromEnv(""),
		TuneMaster: SoleMasterElects,
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

// QuietPolicies turns the automatic policies off, for tests that reshape by
// hand.
func QuietPolicies(m *master.Config) { m.Policy.Enabled = false }

// StartTuned starts a cluster of one master and servers partition servers
// with fast failure detection, tuneM and tuneS (either may be nil) applied
// after the harness's own settings.
func StartTuned(t testing.TB, servers int, tuneM func(*master.Config), tuneS func(*partitionserver.Config)) *cluster.Cluster {
	t.Helper()
	return StartTunedOpts(t, servers, tuneM, tuneS, false)
}

// StartTunedOpts is StartTuned, waiting with awaitHomeGroup until a new
// table would be a span of an anchor group (Options.AwaitHomeGroup).
func StartTunedOpts(t testing.TB, servers int, tuneM func(*master.Config), tuneS func(*partitionserver.Config), awaitHomeGroup bool) *cluster.Cluster {
	t.Helper()
	c, err := cluster.Start(cluster.Options{
		AwaitHomeGroup: awaitHomeGroup,
		Masters:        1, Servers: servers, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv(""),
		TuneMaster: func(m *master.Config) {
			SoleMasterElects(m)
			m.ServerTimeout = 2 * time.Second
			if tuneM != nil {
				tuneM(m)
			}
		},
		TuneServer: func(s *partitionserver.Config) {
			s.HeartbeatInterval = 200 * time.Millisecond
			if tuneS != nil {
				tuneS(s)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// BesideOneOther lets a cluster test run beside one other such test once
// the package's sequential tests are done (go test's -parallel is
// GOMAXPROCS: two at a time on CI's two cores). The package's tests mostly
// wait (elections, leases, the master's intervals, fsyncs: ~20 % of one
// core over its whole run), so a pair finishes in little more than the
// longer one's time. Only for tests that enable no failpoint and read no
// process-wide metric (both are shared by every cluster of the binary),
// change no package variable, and assert no latency bound a neighbour's
// load could break.
func BesideOneOther(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// ServiceClient is the official SDK client on front-end i, with retries
// tuned so a failover shows up as retried requests rather than long sleeps.
func ServiceClient(t testing.TB, c *cluster.Cluster, i int) *aztables.ServiceClient {
	t.Helper()
	opts := &aztables.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: 8, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 500 * time.Millisecond, TryTimeout: 15 * time.Second}
	sc, err := aztables.NewServiceClientFromConnectionString(c.ConnectionString(i), opts)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// NewTable creates a table through sc and returns its client.
func NewTable(t testing.TB, sc *aztables.ServiceClient, name string) *aztables.Client {
	t.Helper()
	if _, err := sc.CreateTable(Context(t, time.Minute), name, nil); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	return sc.NewClient(name)
}

// WaitFor polls cond until it holds or the deadline passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Context is a context that ends after d or with the test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// FreeBasePort is a base port for a cluster of one master, three servers
// and one front-end whose ports no other cluster of the binary gets
// (cluster.FreeBasePort).
func FreeBasePort(t testing.TB) int {
	t.Helper()
	p, err := cluster.FreeBasePort(cluster.Options{Masters: 1, Servers: 3, Frontends: 1})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// AzureCode reports whether err is an Azure answer of that status and code.
func AzureCode(err error, status int, code string) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == status && re.ErrorCode == code
}

// IsStatus reports whether err is an Azure answer of HTTP status code.
func IsStatus(err error, code int) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == code
}

// MetricValue sums the process's counter name over the series whose labels
// include want (the servers of an in-process cluster share the registry).
func MetricValue(t testing.TB, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
