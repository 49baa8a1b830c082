package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"sigs.k8s.io/yaml"

	"tablestore/cluster"
	"tablestore/internal/metricsbridge"
)

const monDir = "monitoring"

// TestAlertRulesPromtool runs Prometheus's own checker on the rule file.
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus; .ci/run installs it): alert rules not checked")
	}
	out, err := exec.Command(promtool, "check", "rules", filepath.Join(monDir, "alerts.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// queries returns every PromQL expression of the dashboard and the rules,
// keyed by where it is.
func queries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(monDir, "grafana-dashboard.json"))), &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("dashboard panel %q query %d", p.Title, i+1)] = tg.Expr
		}
	}
	var rules ruleFile
	if err := yaml.UnmarshalStrict([]byte(readFile(t, filepath.Join(monDir, "alerts.yaml"))), &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert] = r.Expr
		}
	}
	if len(out) == 0 {
		t.Fatal("no queries")
	}
	return out
}

var metricName = regexp.MustCompile(`\btablestore_[a-z0-9_]+\b`)

// TestMonitoringMetricNames checks every metric name the dashboard and the
// alert rules query against the names a running cluster exports: an
// in-process cluster (the roles' real code and registries) serving
// /metrics, after some requests so that labelled series exist.
func TestMonitoringMetricNames(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	exported := scrapeCluster(t)
	var names []string
	for name := range exported {
		names = append(names, name)
	}
	sort.Strings(names)
	for where, expr := range queries(t) {
		for _, name := range metricName.FindAllString(expr, -1) {
			if !exported[name] {
				t.Errorf("%s uses %s, which the binary does not export", where, name)
			}
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("exported tablestore_* names:\n%s", strings.Join(names, "\n"))
	}
}

// scrapeCluster starts a 1-master, 3-server, 1-front-end cluster, writes
// through the Azure SDK and returns the series names of its /metrics.
func scrapeCluster(t *testing.T) map[string]bool {
	t.Helper()
	metricsbridge.InstallRaftSink()
	ln, err := metricsbridge.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc, err := aztables.NewServiceClientFromConnectionString(c.ConnectionString(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.CreateTable(ctx, "metricsnames", nil); err != nil {
		t.Fatalf("create table: %v", err)
	}
	tc := sc.NewClient("metricsnames")
	for i := range 20 {
		body, _ := json.Marshal(map[string]any{"PartitionKey": fmt.Sprintf("p%d", i%4), "RowKey": fmt.Sprint(i)})
		if _, err := tc.AddEntity(ctx, body, nil); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	if _, err := tc.GetEntity(ctx, "p0", "0", nil); err != nil {
		t.Fatalf("get: %v", err)
	}
	// A 404 for the error series.
	if _, err := tc.GetEntity(ctx, "p0", "missing", nil); err == nil {
		t.Fatal("get of a missing entity succeeded")
	}
	// Per-server gauges are set with each heartbeat.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := scrape(t, "http://"+ln.Addr()+"/metrics")
		if got["tablestore_partitionserver_leaders"] && got["tablestore_master_under_replicated_ranges"] &&
			got["tablestore_raft_replication_append_entries_seconds_bucket"] && got["tablestore_partitionserver_range_entities_per_second"] {
			return got
		}
		if time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scrape returns the series names of a /metrics page.
func scrape(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		out[name] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
