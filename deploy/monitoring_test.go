package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
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

// query is one PromQL expression of the dashboard or the rules, with the
// templates that name its labels (a panel's legend, an alert's
// annotations).
type query struct {
	expr      string
	templates []string
	alert     bool
}

// queries returns every PromQL expression of the dashboard and the rules,
// keyed by where it is.
func queries(t *testing.T) map[string]query {
	t.Helper()
	out := map[string]query{}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(monDir, "grafana-dashboard.json"))), &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("dashboard panel %q query %d", p.Title, i+1)] = query{expr: tg.Expr, templates: []string{tg.LegendFormat}}
		}
	}
	for _, g := range alertRules(t).Groups {
		for _, r := range g.Rules {
			q := query{expr: r.Expr, alert: true}
			for _, a := range r.Annotations {
				q.templates = append(q.templates, a)
			}
			out["alert "+r.Alert] = q
		}
	}
	if len(out) == 0 {
		t.Fatal("no queries")
	}
	return out
}

func alertRules(t *testing.T) ruleFile {
	t.Helper()
	var rules ruleFile
	if err := yaml.UnmarshalStrict([]byte(readFile(t, filepath.Join(monDir, "alerts.yaml"))), &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	return rules
}

var (
	metricName = regexp.MustCompile(`\btablestore_[a-z0-9_]+\b`)
	// selectorRe is a tablestore series selector with its matchers.
	selectorRe = regexp.MustCompile(`\b(tablestore_[a-z0-9_]+)\s*\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	// groupingRe is an aggregation's by (…) or without (…).
	groupingRe = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	// templateLabelRe is a label a legend ({{server}}) or an annotation
	// ({{ $labels.server }}) names.
	templateLabelRe = regexp.MustCompile(`\{\{\s*(?:\$labels\.)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// scrapeLabels are labels Prometheus adds to every scraped series.
var scrapeLabels = map[string]bool{"instance": true, "job": true}

// TestMonitoringMetricNames checks every metric name the dashboard and the
// alert rules query against the names a running cluster exports: an
// in-process cluster (the roles' real code and registries) serving
// /metrics, after some requests so that labelled series exist. The labels
// the queries select on, group by and name in legends and annotations must
// be the series' labels, and an alert's label values must be exported ones
// (a rule on servers{state="dead"} could never fire).
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
	for where, q := range queries(t) {
		// The labels any series of the query has.
		labels := map[string]bool{}
		for _, name := range metricName.FindAllString(q.expr, -1) {
			if exported[name] == nil {
				t.Errorf("%s uses %s, which the binary does not export", where, name)
			}
			for l := range exported.labelNames(name) {
				labels[l] = true
			}
		}
		for _, m := range selectorRe.FindAllStringSubmatch(q.expr, -1) {
			name := m[1]
			if exported[name] == nil {
				continue
			}
			have := exported.labelNames(name)
			for _, mm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
				label, op, value := mm[1], mm[2], mm[3]
				if !have[label] {
					t.Errorf("%s selects %s on label %s, which it does not have (labels %v)", where, name, label, keys(have))
					continue
				}
				// Status codes appear as requests are answered; other
				// label values an alert compares with must be exported.
				if q.alert && op == "=" && label != "code" && !exported.hasValue(name, label, value) {
					t.Errorf("%s selects %s{%s=%q}, a value it never has (values %v)", where, name, label, value, exported.values(name, label))
				}
			}
		}
		if !strings.Contains(q.expr, "tablestore_") {
			continue // up{…}: Prometheus's own
		}
		var grouped []string
		for _, m := range groupingRe.FindAllStringSubmatch(q.expr, -1) {
			for _, l := range strings.Split(m[1], ",") {
				grouped = append(grouped, strings.TrimSpace(l))
			}
		}
		for _, tpl := range q.templates {
			for _, m := range templateLabelRe.FindAllStringSubmatch(tpl, -1) {
				if m[1] != "value" {
					grouped = append(grouped, m[1])
				}
			}
		}
		for _, l := range grouped {
			if l != "" && !labels[l] && !scrapeLabels[l] {
				t.Errorf("%s groups by or shows label %s, which none of its series has (labels %v)", where, l, keys(labels))
			}
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("exported tablestore_* names:\n%s", strings.Join(names, "\n"))
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sample is one series of a /metrics page.
type sample struct {
	labels map[string]string
	value  float64
}

// exposition is a /metrics page: the series of each name.
type exposition map[string][]sample

func (e exposition) labelNames(name string) map[string]bool {
	out := map[string]bool{}
	for _, s := range e[name] {
		for l := range s.labels {
			out[l] = true
		}
	}
	return out
}

func (e exposition) values(name, label string) []string {
	seen := map[string]bool{}
	for _, s := range e[name] {
		if v, ok := s.labels[label]; ok {
			seen[v] = true
		}
	}
	return keys(seen)
}

func (e exposition) hasValue(name, label, value string) bool {
	return slices.Contains(e.values(name, label), value)
}

// value is the sum of name's series whose labels include match.
func (e exposition) value(name string, match map[string]string) float64 {
	total := 0.0
	for _, s := range e[name] {
		ok := true
		for k, v := range match {
			ok = ok && s.labels[k] == v
		}
		if ok {
			total += s.value
		}
	}
	return total
}

// settled says whether a page shows the master's health figures of a
// healthy 3-server cluster (what the rules' "healthy" evaluation needs).
func (e exposition) settled() bool {
	return e.value("tablestore_master_is_leader", nil) == 1 &&
		e.value("tablestore_master_servers", map[string]string{"state": "up"}) == 3 &&
		len(e["tablestore_master_leaderless_ranges"]) > 0 && e.value("tablestore_master_leaderless_ranges", nil) == 0 &&
		len(e["tablestore_master_under_replicated_ranges"]) > 0 && e.value("tablestore_master_under_replicated_ranges", nil) == 0
}

// scrapeCluster starts a 1-master, 3-server, 1-front-end cluster, writes
// through the Azure SDK and returns its /metrics once the per-server gauges
// and the master's health figures are in (or after 20 s).
func scrapeCluster(t *testing.T) exposition {
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
	// Per-server gauges are set with each heartbeat, the master's health
	// figures each second.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := scrape(t, "http://"+ln.Addr()+"/metrics")
		if got["tablestore_partitionserver_leaders"] != nil && got["tablestore_master_under_replicated_ranges"] != nil &&
			got["tablestore_raft_replication_append_entries_seconds_bucket"] != nil && got["tablestore_partitionserver_range_entities_per_second"] != nil &&
			got.settled() {
			return got
		}
		if time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scrape reads a /metrics page.
func scrape(t *testing.T, url string) exposition {
	t.Helper()
	e, err := tryScrape(url)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// tryScrape reads a /metrics page.
func tryScrape(url string) (exposition, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := exposition{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, s, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		out[name] = append(out[name], s)
	}
	return out, sc.Err()
}

// parseLine parses `name{a="x",b="y"} value` of the text exposition
// format (client_golang writes no timestamps).
func parseLine(line string) (string, sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", s, errors.New("no value")
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for rest != "" && rest[0] != '}' {
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return "", s, errors.New("bad label")
			}
			label := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			for {
				if rest == "" {
					return "", s, errors.New("unterminated label value")
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' && rest != "" {
					c = rest[0]
					if c == 'n' {
						c = '\n'
					}
					rest = rest[1:]
				}
				v.WriteByte(c)
			}
			s.labels[label] = v.String()
			rest = strings.TrimPrefix(rest, ",")
		}
		if rest == "" {
			return "", s, errors.New("unterminated labels")
		}
		rest = rest[1:]
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
	if err != nil {
		return "", s, err
	}
	s.value = v
	return name, s, nil
}

// promSeries is one input series of a promtool rule test.
type promSeries struct {
	text    string // name{labels}
	value   float64
	counter bool
}

func seriesText(name string, labels map[string]string) string {
	if len(labels) == 0 {
		return name
	}
	var parts []string
	for k, v := range labels {
		parts = append(parts, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

// firing is an alert a rule test expects, with the value and labels of the
// sample that fires it.
type firing struct {
	alert  string
	value  float64
	labels map[string]string
}

var annotationVar = regexp.MustCompile(`\{\{\s*\$(value|labels\.([a-zA-Z_][a-zA-Z0-9_]*))\s*\}\}`)

// TestAlertRulesOnClusterFigures evaluates the alert rules with promtool's
// rule unit tests (Prometheus's own engine) on the series a healthy
// in-process cluster exports, held for 30 minutes: none may fire (the
// no-leader alert fired for good on every healthy cluster while the
// master's gauges were set by no code). Then each health figure in turn is
// set to what a sick cluster exports, on the same series, and its alert
// must fire with the labels and annotations it renders: a rule that
// selects a label or value the binary does not export could never fire.
// The counters rise by one per minute (zero ones stay flat), gauges keep
// their value; `up` is added as Prometheus makes it, for a
// ServiceMonitor's job and for a kubernetes-pods job.
func TestAlertRulesOnClusterFigures(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus; .ci/run installs it): alert rules not evaluated")
	}
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	exported := scrapeCluster(t)
	if !exported.settled() {
		t.Fatalf("the cluster's health figures did not settle in 20 s: is_leader %v, servers up %v, leaderless %v, under-replicated %v",
			exported["tablestore_master_is_leader"], exported.value("tablestore_master_servers", map[string]string{"state": "up"}),
			exported["tablestore_master_leaderless_ranges"], exported["tablestore_master_under_replicated_ranges"])
	}
	rules := alertRules(t)
	type rule struct {
		labels, annotations map[string]string
	}
	byName := map[string]rule{}
	used := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			byName[r.Alert] = rule{r.Labels, r.Annotations}
			for _, name := range metricName.FindAllString(r.Expr, -1) {
				used[name] = true
			}
		}
	}
	var input []promSeries
	for name := range used {
		for _, s := range exported[name] {
			input = append(input, promSeries{text: seriesText(name, s.labels), value: s.value, counter: strings.HasSuffix(name, "_total")})
		}
	}
	sort.Slice(input, func(i, j int) bool { return input[i].text < input[j].text })
	serviceMonitorUp := map[string]string{"job": "tablestore-metrics", "instance": "10.0.0.5:9090"}
	podsUp := map[string]string{"job": "kubernetes-pods", "instance": "10.0.0.6:9090", "app_kubernetes_io_name": "tablestore"}
	input = append(input, promSeries{text: seriesText("up", serviceMonitorUp), value: 1}, promSeries{text: seriesText("up", podsUp), value: 1})

	// The disk alerts read this machine's file system: a test machine
	// that full fires them rightly.
	healthyExempt := map[string]bool{}
	for _, s := range exported["tablestore_partitionserver_data_dir_available_bytes"] {
		ratio := s.value / exported.value("tablestore_partitionserver_data_dir_capacity_bytes", s.labels)
		if ratio < 0.15 {
			healthyExempt["TablestoreDiskFilling"] = true
			t.Logf("data directory %.0f%% free: TablestoreDiskFilling not expected quiet", 100*ratio)
		}
		if ratio < 0.05 {
			healthyExempt["TablestoreDiskFull"] = true
		}
	}
	for _, tc := range []struct {
		name string
		set  map[string]float64 // series text → value
		want []firing
		drop string // a metric none of whose series is scraped
	}{
		{name: "healthy"},
		{name: "no master leads", set: map[string]float64{"tablestore_master_is_leader": 0},
			want: []firing{{alert: "TablestoreNoMasterLeader", value: 0}}},
		{name: "no master scraped", drop: "tablestore_master_is_leader",
			want: []firing{{alert: "TablestoreNoMasterLeader", value: 1}}},
		{name: "ranges without leader", set: map[string]float64{"tablestore_master_leaderless_ranges": 2},
			want: []firing{{alert: "TablestoreRangesWithoutLeader", value: 2}}},
		{name: "under-replicated ranges", set: map[string]float64{"tablestore_master_under_replicated_ranges": 3},
			want: []firing{{alert: "TablestoreUnderReplicatedRanges", value: 3}}},
		{name: "partition server down", set: map[string]float64{`tablestore_master_servers{state="down"}`: 1, `tablestore_master_servers{state="up"}`: 2},
			want: []firing{{alert: "TablestorePartitionServerDown", value: 1}}},
		{name: "target down (ServiceMonitor job)", set: map[string]float64{seriesText("up", serviceMonitorUp): 0},
			want: []firing{{alert: "TablestoreTargetDown", value: 0, labels: serviceMonitorUp}}},
		{name: "target down (kubernetes-pods job)", set: map[string]float64{seriesText("up", podsUp): 0},
			want: []firing{{alert: "TablestoreTargetDown", value: 0, labels: podsUp}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var series []promSeries
			for _, s := range input {
				if tc.drop == "" || !strings.HasPrefix(s.text, tc.drop) {
					series = append(series, s)
				}
			}
			for text, v := range tc.set {
				found := false
				for i := range series {
					if series[i].text == text {
						series[i].value, found = v, true
					}
				}
				if !found {
					t.Fatalf("the cluster exports no series %s", text)
				}
			}
			var ins []map[string]string
			for _, s := range series {
				step := 0.0
				if s.counter && s.value > 0 {
					step = 1
				}
				ins = append(ins, map[string]string{"series": s.text,
					"values": fmt.Sprintf("%s+%sx30", strconv.FormatFloat(s.value, 'f', -1, 64), strconv.FormatFloat(step, 'f', -1, 64))})
			}
			want := map[string][]firing{}
			for _, f := range tc.want {
				want[f.alert] = append(want[f.alert], f)
			}
			var checks []map[string]any
			for _, name := range slices.Sorted(maps.Keys(byName)) {
				if tc.name == "healthy" && healthyExempt[name] {
					continue
				}
				exp := []map[string]any{}
				for _, f := range want[name] {
					labels := map[string]string{}
					maps.Copy(labels, byName[name].labels)
					maps.Copy(labels, f.labels)
					annotations := map[string]string{}
					for k, a := range byName[name].annotations {
						annotations[k] = annotationVar.ReplaceAllStringFunc(a, func(m string) string {
							sm := annotationVar.FindStringSubmatch(m)
							if sm[1] == "value" {
								return fmt.Sprint(f.value)
							}
							return f.labels[sm[2]]
						})
					}
					exp = append(exp, map[string]any{"exp_labels": labels, "exp_annotations": annotations})
				}
				checks = append(checks, map[string]any{"eval_time": "30m", "alertname": name, "exp_alerts": exp})
			}
			abs, err := filepath.Abs(filepath.Join(monDir, "alerts.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			// JSON is YAML.
			b, err := json.MarshalIndent(map[string]any{
				"rule_files":          []string{abs},
				"evaluation_interval": "1m",
				"tests":               []any{map[string]any{"interval": "1m", "input_series": ins, "alert_rule_test": checks}},
			}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "rules_test.yaml")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
				t.Fatalf("promtool test rules: %v\n%s\ninput:\n%s", err, out, b)
			}
		})
	}
}
