package cluster_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster/clustertest"
	"tablestore/internal/metricsbridge"
)

// promSample is one line of a Prometheus text exposition.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// promPage is a parsed /metrics page.
type promPage struct {
	samples []promSample
	types   map[string]string // family name → counter, gauge, histogram, …
}

// scrapeMetrics reads url (a /metrics endpoint) and parses it.
func scrapeMetrics(url string) (promPage, error) {
	resp, err := http.Get(url)
	if err != nil {
		return promPage{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return promPage{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	page := promPage{types: map[string]string{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			page.types[f[2]] = f[3]
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return promPage{}, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		page.samples = append(page.samples, s)
	}
	return page, sc.Err()
}

// parseSample parses `name{a="x",b="y"} value` (no timestamps: client_golang
// writes none).
func parseSample(line string) (promSample, error) {
	s := promSample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, errors.New("no value")
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for len(line) > 0 && line[0] != '}' {
			eq := strings.Index(line, `="`)
			if eq < 0 {
				return s, errors.New("bad label")
			}
			name := line[:eq]
			line = line[eq+2:]
			var v strings.Builder
			for {
				if line == "" {
					return s, errors.New("unterminated label value")
				}
				c := line[0]
				line = line[1:]
				if c == '"' {
					break
				}
				if c == '\\' && line != "" {
					switch line[0] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(line[0])
					}
					line = line[1:]
					continue
				}
				v.WriteByte(c)
			}
			s.labels[name] = v.String()
			line = strings.TrimPrefix(line, ",")
		}
		if line == "" {
			return s, errors.New("unterminated labels")
		}
		line = line[1:]
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(line), 64)
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

// sum adds the samples of name whose labels match every pair of match
// (a value ending in "*" matches by prefix); found says whether any did.
func (p promPage) sum(name string, match map[string]string) (total float64, found bool) {
	for _, s := range p.samples {
		if s.name != name || !labelsMatch(s.labels, match) {
			continue
		}
		total += s.value
		found = true
	}
	return total, found
}

func labelsMatch(labels, match map[string]string) bool {
	for k, want := range match {
		got, ok := labels[k]
		if !ok {
			return false
		}
		if p, isPrefix := strings.CutSuffix(want, "*"); isPrefix {
			if !strings.HasPrefix(got, p) {
				return false
			}
		} else if got != want {
			return false
		}
	}
	return true
}

// value is the sum of name's matching samples; a missing series is an
// error, since a series that should be exported and is not is what this
// test is for.
func (p promPage) value(name string, match map[string]string) (float64, error) {
	v, ok := p.sum(name, match)
	if !ok {
		return 0, fmt.Errorf("no series %s", selector(name, match))
	}
	return v, nil
}

// selector writes name and match as PromQL would.
func selector(name string, match map[string]string) string {
	if len(match) == 0 {
		return name
	}
	var parts []string
	for k, v := range match {
		parts = append(parts, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

// metricCheck is one figure of a page: its value must satisfy ok.
type metricCheck struct {
	name  string
	match map[string]string
	want  string // what ok accepts, for the message
	ok    func(v float64) bool
}

func equals(n float64) (string, func(float64) bool) {
	return fmt.Sprintf("== %v", n), func(v float64) bool { return v == n }
}

// checkPage runs checks on page and returns the failures.
func checkPage(page promPage, checks []metricCheck) error {
	var errs []error
	for _, c := range checks {
		v, err := page.value(c.name, c.match)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !c.ok(v) {
			errs = append(errs, fmt.Errorf("%s = %v, want %s", selector(c.name, c.match), v, c.want))
		}
	}
	return errors.Join(errs...)
}

// waitMetrics scrapes url until check passes or timeout.
func waitMetrics(t *testing.T, url string, timeout time.Duration, what string, check func(promPage) error) promPage {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		page, err := scrapeMetrics(url)
		if err == nil {
			if err = check(page); err == nil {
				return page
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after %v:\n%v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Families whose name says a unit other than the base one, or a count
// where the convention wants _total.
var (
	familyName    = regexp.MustCompile(`^tablestore_(frontend|router|partitionserver|raftlog|master|raft)_[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	labelName     = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	nonBaseSuffix = regexp.MustCompile(`_(ms|milliseconds|us|microseconds|ns|nanoseconds|minutes|hours|kb|kib|mb|mib|gb|percent)(_total)?$`)
)

// checkConventions checks every tablestore_* family of page against
// shared/DESIGN.md's rules: namespace tablestore, subsystem the role,
// snake_case, base units, _total on counters and only there.
func checkConventions(page promPage) error {
	var errs []error
	for fam, typ := range page.types {
		if !strings.HasPrefix(fam, "tablestore") {
			continue // go_*, process_*, promhttp_*: client_golang's own
		}
		if !familyName.MatchString(fam) {
			errs = append(errs, fmt.Errorf("%s: not tablestore_<role>_<snake_case>", fam))
		}
		if nonBaseSuffix.MatchString(fam) {
			errs = append(errs, fmt.Errorf("%s: not in base units", fam))
		}
		if counter := typ == "counter"; counter != strings.HasSuffix(fam, "_total") {
			errs = append(errs, fmt.Errorf("%s is a %s: _total belongs on counters and only there", fam, typ))
		}
	}
	for _, s := range page.samples {
		if !strings.HasPrefix(s.name, "tablestore") {
			continue
		}
		for l := range s.labels {
			if !labelName.MatchString(l) {
				errs = append(errs, fmt.Errorf("%s: label %q not snake_case", s.name, l))
			}
		}
	}
	return errors.Join(errs...)
}

// TestMetricsOfHealthyCluster scrapes the /metrics listener the roles
// serve (metricsbridge, as `tablestore dev` and every role's binary mount
// it; an in-process cluster has one registry, so one page holds every
// role's series) around a few SDK writes and reads, and checks the figures
// a healthy cluster must show, not only that the names exist: the master's
// health gauges were registered and set by no code for weeks while the
// deploy test, which checked names, passed. Checked: one master leads
// (is_leader), every partition server up and none down, no
// under-replicated or leaderless range, the map's range count; request
// counters of the front-end and the partition servers, write/apply
// counters (Raft log, state commits, raft applies) and range groups' Raft
// replication to the servers grew; per-server replicas and leaders add up
// to the map once every range is quiet; the names and units follow the
// conventions.
func TestMetricsOfHealthyCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	metricsbridge.InstallRaftSink()
	ln, err := metricsbridge.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr() + "/metrics"
	// Counters are the process's: earlier tests of this binary counted
	// too, so growth is measured from here.
	before, err := scrapeMetrics(url)
	if err != nil {
		t.Fatal(err)
	}
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, quiesceFast)
	servers := make([]string, len(c.Servers))
	for i, n := range c.Servers {
		servers[i] = n.Server.ID()
	}
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, time.Minute)
	const tables, writesPerTable, reads = 2, 10, 5
	var clients []*aztables.Client
	for i := range tables {
		clients = append(clients, clustertest.NewTable(t, sc, fmt.Sprintf("metrics%d", i)))
	}
	for _, tc := range clients {
		for i := range writesPerTable {
			body, _ := json.Marshal(map[string]any{"PartitionKey": fmt.Sprint("p", i%3), "RowKey": fmt.Sprint(i), "V": i})
			if _, err := tc.AddEntity(ctx, body, nil); err != nil {
				t.Fatalf("insert: %v", err)
			}
		}
	}
	for i := range reads {
		if _, err := clients[0].GetEntity(ctx, fmt.Sprint("p", i%3), fmt.Sprint(i), nil); err != nil {
			t.Fatalf("get: %v", err)
		}
	}
	pager := clients[1].NewListEntitiesPager(nil)
	for pager.More() {
		if _, err := pager.NextPage(ctx); err != nil {
			t.Fatalf("query: %v", err)
		}
	}
	const writes = tables * writesPerTable
	mc := clustertest.MasterClient(t, c)
	ranges := len(clustertest.PartitionMap(t, mc).GetRanges())
	if ranges < tables {
		t.Fatalf("%d ranges for %d tables", ranges, tables)
	}

	grew := func(name string, match map[string]string, by float64) metricCheck {
		was, _ := before.sum(name, match)
		return metricCheck{name, match, fmt.Sprintf("grown by >= %v from %v", by, was), func(v float64) bool { return v-was >= by }}
	}
	is := func(name string, match map[string]string, n float64) metricCheck {
		want, ok := equals(n)
		return metricCheck{name, match, want, ok}
	}
	checks := []metricCheck{
		// The master's cluster health (Server.health, published each second).
		is("tablestore_master_is_leader", nil, 1),
		is("tablestore_master_servers", map[string]string{"state": "up"}, float64(len(servers))),
		is("tablestore_master_servers", map[string]string{"state": "down"}, 0),
		is("tablestore_master_under_replicated_ranges", nil, 0),
		is("tablestore_master_leaderless_ranges", nil, 0),
		is("tablestore_master_ranges", nil, float64(ranges)),
		is("tablestore_master_unstarted_ranges", nil, 0),
		grew("tablestore_master_events_total", map[string]string{"kind": "EVENT_KIND_TABLE_CREATED"}, tables),
		// Requests: every SDK call is counted by the front-end; the
		// partition servers count the range requests behind them.
		grew("tablestore_frontend_requests_total", map[string]string{"method": "POST", "code": "2*"}, tables+writes),
		grew("tablestore_frontend_requests_total", map[string]string{"method": "GET", "code": "200"}, reads+1),
		grew("tablestore_frontend_request_seconds_count", map[string]string{"method": "POST"}, tables+writes),
		grew("tablestore_partitionserver_requests_total", map[string]string{"op": "write", "code": "OK"}, writes),
		grew("tablestore_partitionserver_requests_total", map[string]string{"op": "get", "code": "OK"}, reads),
		grew("tablestore_partitionserver_requests_total", map[string]string{"op": "query", "code": "OK"}, 1),
		grew("tablestore_partitionserver_request_seconds_count", map[string]string{"op": "write"}, writes),
		grew("tablestore_partitionserver_read_index_total", nil, 1),
		// Writes reach the logs and the state machines of all replicas.
		grew("tablestore_raftlog_records_total", nil, writes),
		grew("tablestore_raftlog_written_bytes_total", nil, 1),
		grew("tablestore_raftlog_sync_seconds_count", nil, 1),
		grew("tablestore_raft_apply_total", nil, 1),
		grew("tablestore_raft_commit_seconds_count", nil, 1),
		grew("tablestore_raft_fsm_apply_batch_entries_sum", nil, writes),
		grew("tablestore_partitionserver_heartbeat_reports_total", nil, 1),
	}
	for _, id := range servers {
		checks = append(checks,
			// Every replica applies every write into the server's state
			// file.
			grew("tablestore_partitionserver_state_commit_seconds_total", map[string]string{"server": id}, 1e-9),
			metricCheck{"tablestore_partitionserver_data_dir_available_bytes", map[string]string{"server": id}, "> 0", func(v float64) bool { return v > 0 }},
			metricCheck{"tablestore_partitionserver_data_dir_capacity_bytes", map[string]string{"server": id}, "> 0", func(v float64) bool { return v > 0 }},
			metricCheck{"tablestore_partitionserver_disk_commits_window", map[string]string{"server": id, "commit": "log"}, ">= 0", func(v float64) bool { return v >= 0 }},
		)
	}
	// perServer checks that a per-server gauge of this cluster's servers
	// adds up to want (servers of earlier clusters in this binary are
	// forgotten at Close, but the sum names the servers anyway).
	perServer := func(page promPage, name string, want int) error {
		total := 0.0
		for _, id := range servers {
			v, err := page.value(name, map[string]string{"server": id})
			if err != nil {
				return err
			}
			total += v
		}
		if total != float64(want) {
			return fmt.Errorf("%s summed over %v = %v, want %d", name, servers, total, want)
		}
		return nil
	}
	rf := min(len(servers), c.Masters[0].Config.ReplicationFactor)
	replicas := ranges * rf
	// The range groups' Raft figures: their leaders replicate to the
	// other rf-1 servers at least (the peers are partition servers; the
	// one master has no peer).
	replicated := func(page promPage) error {
		var to []string
		for _, id := range servers {
			was, _ := before.sum("tablestore_raft_replication_append_entries_logs_total", map[string]string{"peer": id})
			if v, _ := page.sum("tablestore_raft_replication_append_entries_logs_total", map[string]string{"peer": id}); v > was {
				to = append(to, id)
			}
		}
		if len(to) < rf-1 {
			return fmt.Errorf("tablestore_raft_replication_append_entries_logs_total grew for peers %v, want >= %d of %v", to, rf-1, servers)
		}
		return nil
	}
	waitMetrics(t, url, 10*time.Second, "figures of a healthy cluster after the requests", func(page promPage) error {
		return errors.Join(checkPage(page, checks), replicated(page), perServer(page, "tablestore_partitionserver_replicas", replicas),
			perServer(page, "tablestore_partitionserver_leaders", ranges))
	})

	// Idle ranges go quiet; a quiet leader still leads its range (the
	// master counts it so: leaderless stays 0), and the per-server leader
	// gauges must keep adding up to the map.
	for i := range tables {
		waitQuiet(t, c, mc, fmt.Sprintf("metrics%d", i), 10*time.Second)
	}
	page := waitMetrics(t, url, 5*time.Second, "figures of a healthy cluster with every range quiet", func(page promPage) error {
		return errors.Join(checkPage(page, checks), perServer(page, "tablestore_partitionserver_replicas", replicas),
			perServer(page, "tablestore_partitionserver_leaders", ranges))
	})
	if err := checkConventions(page); err != nil {
		t.Errorf("metric conventions (shared/DESIGN.md):\n%v", err)
	}
}

// TestCheckConventions: the convention check refuses what DESIGN.md rules
// out (it passes on every family the roles export, so its refusals are
// shown here).
func TestCheckConventions(t *testing.T) {
	for _, tc := range []struct {
		name, family, typ, label string
		ok                       bool
	}{
		{"counter", "tablestore_master_events_total", "counter", "kind", true},
		{"gauge", "tablestore_partitionserver_data_dir_available_bytes", "gauge", "server", true},
		{"histogram", "tablestore_raft_commit_seconds", "histogram", "", true},
		{"counter without _total", "tablestore_master_events", "counter", "", false},
		{"gauge with _total", "tablestore_master_ranges_total", "gauge", "", false},
		{"milliseconds", "tablestore_frontend_request_ms", "histogram", "", false},
		{"no role", "tablestore_requests_total", "counter", "", false},
		{"camelCase", "tablestore_master_isLeader", "gauge", "", false},
		{"label camelCase", "tablestore_master_servers", "gauge", "serverState", false},
		{"other namespace ignored", "go_goroutines", "gauge", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := promSample{name: tc.family, labels: map[string]string{}}
			if tc.label != "" {
				s.labels[tc.label] = "x"
			}
			err := checkConventions(promPage{samples: []promSample{s}, types: map[string]string{tc.family: tc.typ}})
			if (err == nil) != tc.ok {
				t.Fatalf("checkConventions(%s %s) = %v, want ok=%v", tc.typ, tc.family, err, tc.ok)
			}
		})
	}
}

func TestParseSample(t *testing.T) {
	s, err := parseSample(`tablestore_x_total{a="1",b="q\"x,y}",c="\\"} 2.5e+10`)
	if err != nil {
		t.Fatal(err)
	}
	if s.name != "tablestore_x_total" || s.value != 2.5e10 || s.labels["a"] != "1" || s.labels["b"] != `q"x,y}` || s.labels["c"] != `\` {
		t.Fatalf("parsed %+v", s)
	}
	if s, err = parseSample("tablestore_y 3"); err != nil || s.name != "tablestore_y" || s.value != 3 || len(s.labels) != 0 {
		t.Fatalf("parsed %+v, %v", s, err)
	}
}
