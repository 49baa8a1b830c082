package master_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/cluster"
	"tablestore/internal/logging"
	"tablestore/internal/masterclient"
	"tablestore/loadgen"
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
	// The policies may have split at a key already: the first key that
	// starts no range is split.
	split := ""
	for i := 10; i < 40 && split == ""; i++ {
		key := fmt.Sprintf("p%04d", i)
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.Split(ctx, &pb.SplitRequest{Table: "dashload", PartitionKey: key})
			return err
		})
		switch {
		case err == nil:
			split = key
		case status.Code(err) == codes.InvalidArgument && strings.Contains(err.Error(), "already starts"):
		default:
			t.Fatalf("split at %s: %v", key, err)
		}
	}
	if split == "" {
		t.Fatal("every key p0010-p0039 already starts a range")
	}
	waitFor("a split marker on the range chart", func(v view) bool { return v.Markers > 0 })
	v := waitFor("an event with date and zone", func(v view) bool { return v.Event != "" })
	if !strings.Contains(v.Event, "20") || !(strings.Contains(v.Event, "UTC") || strings.Contains(v.Event, "GMT")) {
		t.Errorf("event time %q lacks a date or zone", v.Event)
	}
}
