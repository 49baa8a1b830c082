package master_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tablestore/cluster"
	"tablestore/internal/logging"
	"tablestore/internal/masterclient"
	"tablestore/loadgen"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// findChromium returns the path of a Chromium (or Chrome), or "".
func findChromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestDashboardInBrowser loads the live dashboard in headless Chromium
// against a running cluster under load and checks that the history charts
// and the key visualizer render and grow as samples arrive, and that event
// times carry a date and a zone.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and a browser")
	}
	chrome := findChromium()
	if chrome == "" {
		t.Skip("no Chromium found (apt-get install -y chromium, or set CHROMIUM); .ci/run installs it")
	}
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv("")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	srv := httptest.NewServer(c.Masters[0].Server.DashboardHandler())
	t.Cleanup(srv.Close)

	loadCtx, stopLoad := context.WithCancel(context.Background())
	loadDone := make(chan error, 1)
	go func() {
		cfg := loadgen.DefaultConfig()
		cfg.Conn, cfg.Table, cfg.Duration, cfg.Workers, cfg.Partitions, cfg.EntitySize = c.ConnectionString(0), "dashload", time.Minute, 2, 20, 128
		_, err := loadgen.Generate(loadCtx, cfg, io.Discard)
		loadDone <- err
	}()
	t.Cleanup(func() { stopLoad(); <-loadDone })

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()

	// points is the number of samples drawn in the per-table chart's
	// longest line; cells the key visualizer's rectangles.
	const probe = `(() => {
	  const p = [...document.querySelectorAll('#h-tables path.series')].map(e => +e.getAttribute('data-points'));
	  return {points: p.length ? Math.max(...p) : 0, cells: document.querySelectorAll('#h-heat rect.cell').length,
	    servers: document.querySelectorAll('#h-servers path.series').length,
	    ranges: document.querySelectorAll('#h-ranges path.series').length,
	    latency: document.querySelectorAll('#h-tables-lat path.series, #h-servers-lat path.series').length,
	    markers: document.querySelectorAll('#h-ranges line.marker').length,
	    event: (document.querySelector('#events tbody td') || {}).textContent || ''};
	})()`
	type view struct {
		Points, Cells, Servers, Ranges, Latency, Markers int
		Event                                            string
	}
	waitFor := func(what string, ok func(view) bool) view {
		t.Helper()
		for {
			v, err := chromedp.Run(ctx, chromedp.Evaluate[view](probe))
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if ok(v) {
				return v
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: page shows %+v", what, v)
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/dashboard")); err != nil {
		t.Fatal(err)
	}
	first := waitFor("charts render", func(v view) bool {
		return v.Points >= 2 && v.Cells > 0 && v.Servers == 3 && v.Ranges > 0 && v.Latency >= 4
	})
	waitFor("charts update", func(v view) bool { return v.Points >= first.Points+2 && v.Cells > first.Cells })

	// A split under load must show on the time axis of the range chart
	// (the policies may split too; an operator's split makes one certain).
	mc, err := masterclient.New(c.MasterAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	// A split at p0020, or, if the policies split there already, the
	// answer that it is (a split at a boundary succeeds): either way a
	// split event, which the chart marks.
	err = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Split(ctx, &pb.SplitRequest{Table: "dashload", PartitionKey: "p0020"})
		return err
	})
	if err != nil {
		t.Fatalf("split at p0020: %v", err)
	}
	waitFor("a split marker on the range chart", func(v view) bool { return v.Markers > 0 })
	v := waitFor("an event with date and zone", func(v view) bool { return v.Event != "" })
	if !strings.Contains(v.Event, "20") || !(strings.Contains(v.Event, "UTC") || strings.Contains(v.Event, "GMT")) {
		t.Errorf("event time %q lacks a date or zone", v.Event)
	}
}

// TestDashboardManyTablesAndRanges loads the page against a history of many
// busy tables and a table of many ranges (the dashboard's own data served by
// a stub, so no cluster is needed): the charts draw the busiest tables only
// and a key visualizer a bounded number of cells. Before, ten minutes of 60
// busy tables and one of 300 ranges were 216,000 rectangles redrawn each
// second: every redraw took longer than the second between them and the page
// froze (20 tables of one range: 1.7 s a redraw; one table of 100 ranges: 4.9 s).
func TestDashboardManyTablesAndRanges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	chrome := findChromium()
	if chrome == "" {
		t.Skip("no Chromium found (apt-get install -y chromium, or set CHROMIUM); .ci/run installs it")
	}
	type cell struct {
		ID uint64  `json:"id"`
		S  string  `json:"s"`
		E  string  `json:"e"`
		V  float64 `json:"v"`
	}
	type tbl struct {
		EPS    float64 `json:"eps"`
		Ranges []cell  `json:"ranges"`
	}
	type sample struct {
		T      int64          `json:"t"`
		Tables map[string]tbl `json:"tables"`
	}
	const samples, tables, bigRanges = 600, 60, 300
	now := time.Now().UnixMilli()
	var hist []sample
	for i := range samples {
		s := sample{T: now - int64(samples-i)*1000, Tables: map[string]tbl{}}
		for k := range tables {
			s.Tables[fmt.Sprintf("t%02d", k)] = tbl{EPS: float64(k), Ranges: []cell{{ID: uint64(k + 1), V: float64(k)}}}
		}
		big := tbl{EPS: 3000}
		for k := range bigRanges {
			c := cell{ID: uint64(1000 + k), S: fmt.Sprintf("k%04d", k), E: fmt.Sprintf("k%04d", k+1), V: 10}
			if k == 0 {
				c.S = ""
			}
			if k == bigRanges-1 {
				c.E = ""
			}
			big.Ranges = append(big.Ranges, c)
		}
		s.Tables["big"] = big
		hist = append(hist, s)
	}
	body, err := json.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	srv := stubDashboard(t, `{"leader":true,"tables":[],"servers":[],"events":[]}`, body)
	ctx := browser(t, chrome, 60*time.Second)
	const probe = `(() => ({
	  cells: document.querySelectorAll('#h-heat rect.cell').length,
	  heatMaps: document.querySelectorAll('#h-heat svg').length,
	  series: document.querySelectorAll('#h-tables path.series').length,
	  names: [...document.querySelectorAll('#h-heat svg > text')].map(e => e.textContent).join('|'),
	  note: document.getElementById('h-note').textContent}))()`
	type view struct {
		Cells, HeatMaps, Series int
		Names, Note             string
	}
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/dashboard")); err != nil {
		t.Fatal(err)
	}
	var v view
	for {
		if v, err = chromedp.Run(ctx, chromedp.Evaluate[view](probe)); err != nil {
			t.Fatalf("page shows %+v: %v", v, err)
		}
		if v.HeatMaps > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no key visualizer drawn: %+v", v)
		case <-time.After(100 * time.Millisecond):
		}
	}
	const maxTables, maxCells = 8, 6000
	if v.HeatMaps > maxTables || v.Series > maxTables {
		t.Errorf("%d key visualizers and %d table lines, want at most %d", v.HeatMaps, v.Series, maxTables)
	}
	if v.Cells > maxTables*(maxCells+bigRanges) {
		t.Errorf("%d key visualizer cells", v.Cells)
	}
	if !strings.Contains(v.Names, "Key visualizer: big ") || !strings.Contains(v.Note, "the 8 busiest of the 61 tables") {
		t.Errorf("the busiest table is not drawn, or the page does not say some are left out: %+v", v)
	}
	dur, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`(() => { const t0 = performance.now(); drawHistory(); return performance.now() - t0; })()`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v; a redraw took %.0f ms", v, dur)
}

// browser starts a headless Chromium for the test and returns its context,
// ending after timeout.
func browser(t *testing.T, chrome string, timeout time.Duration) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	ctx, cancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(cancel)
	return ctx
}

// stubDashboard serves the dashboard's page with state as /dashboard/state
// and history as the first /dashboard/history (later ones: nothing new).
func stubDashboard(t *testing.T, state string, history []byte) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	// The page needs no running master.
	mux.Handle("/dashboard", new(master.Server).DashboardHandler())
	mux.HandleFunc("/dashboard/state", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, state)
	})
	mux.HandleFunc("/dashboard/history", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("after") == "0" {
			w.Write(history)
			return
		}
		io.WriteString(w, "[]")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestDashboardServersAndEscaping: a draining server shows as draining, as
// in ctl servers (the page said only "yes"), with its zone; server ids,
// zones, keys, event
// messages, causes and figure names (none limited to letters and digits) are
// shown as text, never run as HTML, and the state's bounds (merged ranges,
// tables left out) are shown.
func TestDashboardServersAndEscaping(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	chrome := findChromium()
	if chrome == "" {
		t.Skip("no Chromium found (apt-get install -y chromium, or set CHROMIUM); .ci/run installs it")
	}
	bad := func(n int) string { return fmt.Sprintf(`<img src=x onerror=\"window.pwned=%d\">`, n) }
	state := fmt.Sprintf(`{"leader":true,"tables":[{"name":"orders","ranges":[{"id":1,"start":"","end":"%s","generation":1,
	  "replicas":["%s"],"leader":"%s","entities_per_sec":1,"throttled_per_sec":0,"entities":1,"bytes":1,"hot_keys":["%s"]},
	  {"id":2,"group":1,"group_spans":2,"start":"%s","end":"z","generation":1,"replicas":["ps2"],"leader":"ps2","entities_per_sec":1,"throttled_per_sec":0,"entities":1,"bytes":1,"hot_keys":null},
	  {"id":3,"start":"z","end":"","generation":1,"replicas":[],"leader":"","entities_per_sec":1,"throttled_per_sec":0,"entities":1,"bytes":1,"hot_keys":null,"merged":25}]},
	  {"name":"_groups/30","ranges":[{"id":30,"group":30,"anchor":true,"group_spans":4,"start":"","end":"","generation":2,"replicas":["ps2"],"leader":"ps2","entities_per_sec":0,"throttled_per_sec":0,"entities":0,"bytes":0,"hot_keys":null}]}],
	  "tables_total":150,
	  "servers":[{"id":"%s","zone":"%s","alive":true,"draining":true,"replicas":1,"leaders":0,"entities_per_sec":0},
	    {"id":"ps2","zone":"eu-west-1b","alive":false,"draining":false,"replicas":1,"leaders":1,"entities_per_sec":0}],
	  "events":[{"seq":1,"time":"2026-11-27T14:00:00Z","kind":"%s","table":"orders","message":"%s","cause":"%s","duration_seconds":0,"figures":{"%s":1}}]}`,
		bad(1), bad(2), bad(3), bad(4), bad(1), bad(5), bad(10), bad(6), bad(7), bad(8), bad(9))
	var check map[string]any
	if err := json.Unmarshal([]byte(state), &check); err != nil {
		t.Fatalf("stub state: %v", err)
	}
	srv := stubDashboard(t, state, []byte("[]"))
	ctx := browser(t, chrome, 30*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/dashboard")); err != nil {
		t.Fatal(err)
	}
	type view struct {
		Servers, Events, Bars string
		Imgs                  int
		Pwned                 bool
	}
	const probe = `(() => ({servers: document.querySelector('#servers tbody').textContent,
	  events: document.querySelector('#events tbody').textContent, bars: document.getElementById('tables').textContent,
	  imgs: document.querySelectorAll('img').length, pwned: window.pwned !== undefined}))()`
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[view](probe))
		if err != nil {
			t.Fatal(err)
		}
		if v.Imgs > 0 || v.Pwned {
			t.Fatalf("markup from the data became elements: %+v", v)
		}
		if strings.Contains(v.Servers, "ps2") && v.Events != "" {
			if !strings.Contains(v.Servers, "yes, draining") || !strings.Contains(v.Servers, "DOWN") || !strings.Contains(v.Servers, "ps2eu-west-1b") {
				t.Errorf("servers table %q: want the first yes, draining and ps2 in zone eu-west-1b, DOWN", v.Servers)
			}
			if !strings.Contains(v.Servers, "<img src=x") || !strings.Contains(v.Events, "<img src=x") || !strings.Contains(v.Bars, "<img src=x") {
				t.Errorf("the ids and messages are not shown as text: %+v", v)
			}
			// The state's bounds: an entry for 25 neighbouring ranges, and
			// tables left out.
			if !strings.Contains(v.Bars, "#3+24") || !strings.Contains(v.Bars, "27 range(s)") || !strings.Contains(v.Bars, "showing the 2 busiest of 150 tables") {
				t.Errorf("merged ranges or omitted tables not shown: %q", v.Bars)
			}
			// Range 2 is a span of range 1's group; range 1 names none
			// (its own).
			if !strings.Contains(v.Bars, "#2 g1 ps2") || strings.Contains(v.Bars, "#1 g") {
				t.Errorf("range 2's group (1) not shown, or range 1's own shown: %q", v.Bars)
			}
			// Range 30 is an anchor, of a group of 4 spans; no other range
			// is marked.
			if !strings.Contains(v.Bars, "#30 anchor of 4 ps2") || strings.Count(v.Bars, "anchor") != 1 {
				t.Errorf("the anchor not marked, or another range marked: %q", v.Bars)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("page shows %+v", v)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestDashboardOnFollower: a follower's page says it is one and names the
// leader, and shows no server DOWN (it knows no liveness; it showed every
// server DOWN in red).
func TestDashboardOnFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	chrome := findChromium()
	if chrome == "" {
		t.Skip("no Chromium found (apt-get install -y chromium, or set CHROMIUM); .ci/run installs it")
	}
	srv := stubDashboard(t, `{"leader":false,"leader_id":"m2","tables":[],"servers":[{"id":"ps1","alive":false,"draining":false,"replicas":1,"leaders":0,"entities_per_sec":0}],"events":[]}`, []byte("[]"))
	ctx := browser(t, chrome, 30*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/dashboard")); err != nil {
		t.Fatal(err)
	}
	type view struct{ Status, Servers string }
	const probe = `(() => ({status: document.getElementById('status').textContent, servers: document.querySelector('#servers tbody').textContent}))()`
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[view](probe))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(v.Servers, "ps1") {
			if strings.Contains(v.Servers, "DOWN") || !strings.Contains(v.Status, "not the leader") || !strings.Contains(v.Status, "the leader is m2") {
				t.Errorf("follower's page: %+v", v)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("page shows %+v", v)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
