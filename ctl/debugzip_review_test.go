package ctl

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebugZipFetchesOnlyTheRegisteredListeners (review): the metrics and
// pprof addresses come from partition servers' heartbeats, which the
// master registers as any string. ctl builds "http://"+addr+path, so an
// address carrying a path ("host:port/private?") makes ctl GET another
// URL of that host, and ctl's http.Client follows redirects, so a
// listener answering 302 sends ctl to any URL it likes (another host, or
// ctl's own loopback, which loopbackElsewhere means to keep out). Either
// way something other than the process's /metrics, /healthz, /readyz,
// /version and goroutine dump ends up in the bug report.
func TestDebugZipFetchesOnlyTheRegisteredListeners(t *testing.T) {
	const secret = "PRIVATE-DATA-NOT-A-METRICS-PAGE"
	private := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/private" {
			io.WriteString(w, secret+"\n")
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(private.Close)
	privateAddr := strings.TrimPrefix(private.URL, "http://")
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, private.URL+"/private", http.StatusFound)
	}))
	t.Cleanup(redirector.Close)

	pm := sampleMap()
	for _, sv := range pm.Servers {
		switch sv.GetServerId() {
		case "ps1": // an address with a path in it
			sv.MetricsAddr = privateAddr + "/private?"
		case "ps2": // a listener that redirects
			sv.MetricsAddr = strings.TrimPrefix(redirector.URL, "http://")
		}
	}
	addr := startFake(t, &fakeMaster{pm: pm, events: sampleEvents()})
	path := filepath.Join(t.TempDir(), "out.zip")
	if _, stderr, err := runCtl(t, context.Background(), "--master", addr, "--timeout", "5s", "debug", "zip", path, "--request-timeout", "2s"); err != nil {
		t.Fatalf("debug zip: %v (%s)", err, stderr)
	}
	for name, body := range readZip(t, path) {
		if strings.Contains(body, secret) {
			t.Errorf("%s holds a page no registered endpoint serves (%q)", name, strings.TrimSpace(body))
		}
	}
}

// TestDedupeTargetsUniqueDirs (review): dedupeTargets renames a second
// process of one directory to DIR-2 but does not remember DIR-2, so a
// process whose own name is DIR-2 gets the same directory: the zip then
// holds two entries of one name (debug/servers/ps_1-2/metrics.txt twice),
// and unzip keeps one server's pages only.
func TestDedupeTargetsUniqueDirs(t *testing.T) {
	var ts []zipTarget
	for _, id := range []string{"ps:1", "ps_1", "ps_1-2"} { // safeName: ps_1, ps_1, ps_1-2
		ts = append(ts, zipTarget{proc: ZipProcess{Dir: "servers/" + safeName(id), Source: "partition map", MetricsAddr: id + ".svc:9090"}})
	}
	seen := map[string]bool{}
	for _, tg := range dedupeTargets(ts) {
		if seen[tg.proc.Dir] {
			t.Errorf("two processes share the directory %s", tg.proc.Dir)
		}
		seen[tg.proc.Dir] = true
	}
}

// TestSafeNameIsOneElement (review): safeName keeps '.', so a server id
// (the master takes any non-empty one) or a master id of ".." or "." is a
// zip directory "servers/..": entries named debug/servers/../metrics.txt,
// which Go's archive/zip reports as insecure (zip.ErrInsecurePath under
// GODEBUG=zipinsecurepath=0) and unzip tools warn about or skip, and
// which land beside manifest.json.
func TestSafeNameIsOneElement(t *testing.T) {
	for _, id := range []string{"..", ".", "..."} {
		if n := safeName(id); n == ".." || n == "." {
			t.Errorf("safeName(%q) = %q: not a directory of its own", id, n)
		}
	}
}
