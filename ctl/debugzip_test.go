package ctl

import (
	"archive/zip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tablestore/internal/masterclient"
	pb "tablestore/proto/tablestorepb"
)

// readZip returns a zip's files by name.
func readZip(t *testing.T, path string) map[string]string {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer zr.Close()
	out := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[f.Name] = string(b)
	}
	return out
}

func zipManifest(t *testing.T, files map[string]string) Manifest {
	t.Helper()
	var m Manifest
	if err := json.Unmarshal([]byte(files["debug/manifest.json"]), &m); err != nil {
		t.Fatalf("manifest: %v\n%s", err, files["debug/manifest.json"])
	}
	return m
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// testKey is an account key the fake master's map carries.
var testKey = []byte("not-a-real-key-but-a-secret-one!")

// fakeProcess serves a role's HTTP pages; its /metrics leaks the account
// key the way a careless label or flag dump would.
func fakeProcess(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	key := base64.StdEncoding.EncodeToString(testKey)
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "tablestore_partitionserver_replicas{server=\"ps2\"} 3\nleak{key=\""+key+"\"} 1\n# cmdline --account-key="+"c2VjcmV0Cg== --x\n")
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "not ready: starting\n")
	})
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "tablestore test\n") })
	mux.HandleFunc("/debug/pprof/goroutine", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "goroutine 1 [running]:\n") })
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// TestDebugZipRecordsUnreachable: a partition server whose metrics
// address answers nothing, one with no address, and a master that does
// not answer ListMembers are recorded in the manifest; the zip is written
// with everything else, and no account key is in it.
func TestDebugZipRecordsUnreachable(t *testing.T) {
	live, dead := fakeProcess(t), deadAddr(t)
	pm := sampleMap()
	pm.Accounts = []*pb.StorageAccount{{Name: "acct", Keys: [][]byte{testKey}}}
	for _, sv := range pm.Servers {
		switch sv.GetServerId() {
		case "ps1":
			sv.MetricsAddr = dead
		case "ps2":
			sv.MetricsAddr, sv.PprofAddr = live, live
		}
	}
	addr := startFake(t, &fakeMaster{pm: pm, events: sampleEvents()})
	path := filepath.Join(t.TempDir(), "out.zip")
	out, stderr, err := runCtl(t, context.Background(), "--master", addr, "--timeout", "5s", "debug", "zip", path, "--request-timeout", "2s")
	if err != nil {
		t.Fatalf("debug zip: %v (%s)", err, stderr)
	}
	if !strings.HasPrefix(out, "wrote "+path) {
		t.Errorf("output %q", out)
	}
	files := readZip(t, path)
	m := zipManifest(t, files)
	errorFrom := func(part string) bool {
		for _, e := range m.Errors {
			if strings.Contains(e.Source, part) {
				return true
			}
		}
		return false
	}
	if !errorFrom("http://"+dead+"/metrics") || !errorFrom("ListMembers at "+addr) {
		t.Errorf("manifest errors %+v: want the dead server's metrics and the master's ListMembers", m.Errors)
	}
	for _, name := range []string{"debug/cluster/ranges.json", "debug/cluster/servers.json", "debug/cluster/events.json",
		"debug/servers/ps2/metrics.txt", "debug/servers/ps2/readyz.txt", "debug/servers/ps2/goroutines.txt", "debug/servers/ps2/version.txt"} {
		if _, ok := files[name]; !ok {
			t.Errorf("no %s in the zip: %v", name, keysOfFiles(files))
		}
	}
	if n := strings.Count(files["debug/cluster/ranges.json"], "\n"); n != len(pm.Ranges) {
		t.Errorf("ranges.json has %d lines, want %d", n, len(pm.Ranges))
	}
	if _, ok := files["debug/servers/ps1/metrics.txt"]; ok {
		t.Error("a file for the unreachable server")
	}
	notes := map[string]string{}
	for _, p := range m.Processes {
		notes[p.Dir] = p.Note
	}
	if !strings.Contains(notes["servers/ps3"], "no metrics address") {
		t.Errorf("ps3's note %q, want no metrics address", notes["servers/ps3"])
	}
	for _, f := range m.Files {
		if f.Name == "debug/servers/ps2/readyz.txt" && f.Status != http.StatusServiceUnavailable {
			t.Errorf("readyz status %d, want 503 recorded", f.Status)
		}
	}
	assertNoSecret(t, files, base64.StdEncoding.EncodeToString(testKey), "c2VjcmV0Cg==")
	if !strings.Contains(files["debug/servers/ps2/metrics.txt"], redacted) || m.Redacted != 2 {
		t.Errorf("redacted %d, metrics:\n%s", m.Redacted, files["debug/servers/ps2/metrics.txt"])
	}
}

func keysOfFiles(files map[string]string) []string {
	var out []string
	for k := range files {
		out = append(out, k)
	}
	return out
}

func assertNoSecret(t *testing.T, files map[string]string, secrets ...string) {
	t.Helper()
	for name, body := range files {
		for _, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s holds the secret %q", name, s)
			}
		}
	}
}

// TestDebugZipBadInput: an existing file without --force, a directory
// that cannot be written, no master reachable, a malformed --http-addrs
// or verb: one error, and no file (nor a temporary one) left behind.
func TestDebugZipBadInput(t *testing.T) {
	addr := startFake(t, &fakeMaster{pm: sampleMap()})
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.zip")
	if err := os.WriteFile(existing, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want error
		path string // must not exist afterwards ("" : none to check)
	}{
		{"existing file", []string{"--master", addr, "debug", "zip", existing}, ErrFileExists, ""},
		{"missing directory", []string{"--master", addr, "debug", "zip", filepath.Join(dir, "no", "such", "x.zip")}, nil, filepath.Join(dir, "no", "such", "x.zip")},
		{"no master", []string{"--master", deadAddr(t), "--timeout", "1s", "debug", "zip", filepath.Join(dir, "nomaster.zip")}, masterclient.ErrNoMaster, filepath.Join(dir, "nomaster.zip")},
		{"bad http-addrs", []string{"--master", addr, "debug", "zip", filepath.Join(dir, "bad.zip"), "--http-addrs", "nohostport"}, ErrUsage, filepath.Join(dir, "bad.zip")},
		{"bad verb", []string{"--master", addr, "debug", "unzip", filepath.Join(dir, "verb.zip")}, ErrUsage, filepath.Join(dir, "verb.zip")},
		{"no file", []string{"--master", addr, "debug", "zip"}, ErrUsage, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCtl(t, context.Background(), tc.args...)
			if err == nil {
				t.Fatalf("no error; output %q", out)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			if tc.path != "" {
				if _, serr := os.Stat(tc.path); serr == nil {
					t.Errorf("%s was written", tc.path)
				}
			}
		})
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep me" {
		t.Errorf("the existing file was changed: %q", b)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "old.zip" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	// --force replaces it with a whole zip.
	if _, stderr, err := runCtl(t, context.Background(), "--master", addr, "debug", "zip", existing, "--force", "--request-timeout", "1s"); err != nil {
		t.Fatalf("--force: %v (%s)", err, stderr)
	}
	if files := readZip(t, existing); files["debug/manifest.json"] == "" {
		t.Errorf("--force wrote no manifest: %v", keysOfFiles(files))
	}
}

func TestDedupeTargets(t *testing.T) {
	tgt := func(dir, metrics, source string) zipTarget {
		return zipTarget{proc: ZipProcess{Dir: dir, MetricsAddr: metrics, Source: source}}
	}
	got := dedupeTargets([]zipTarget{
		// One id, two masters.
		tgt("masters/m1", "10.0.0.1:9090", "ListMembers at a"), tgt("masters/m1", "10.0.0.2:9090", "ListMembers at b"),
		// The first again (listed twice in --master): dropped.
		tgt("masters/m1", "10.0.0.1:9090", "ListMembers at c"),
		// Unknown addresses are all kept.
		tgt("servers/ps1", "", "partition map"), tgt("servers/ps2", "", "partition map"),
		// One process with m1 (dev): listed, asked once.
		tgt("servers/ps3", "10.0.0.1:9090", "partition map"),
		// Also given in --http-addrs: dropped.
		tgt("http/10.0.0.2_9090", "10.0.0.2:9090", "--http-addrs"),
	})
	var dirs []string
	for _, g := range got {
		dirs = append(dirs, g.proc.Dir+"="+g.sameAs)
	}
	if want := "masters/m1= masters/m1-2= servers/ps1= servers/ps2= servers/ps3=masters/m1"; strings.Join(dirs, " ") != want {
		t.Errorf("dirs %q, want %q", strings.Join(dirs, " "), want)
	}
}

func TestLoopbackElsewhere(t *testing.T) {
	for _, tc := range []struct {
		addr, peer string
		want       bool
	}{
		{"127.0.0.1:6060", "10.0.0.5:7200", true},
		{"localhost:6060", "ps1.svc:7200", true},
		{"[::1]:6060", "10.0.0.5:7200", true},
		{"127.0.0.1:6060", "127.0.0.1:7200", false}, // one machine (dev, tests)
		{"10.0.0.5:6060", "10.0.0.5:7200", false},
		{"ps1.svc:9090", "ps1.svc:7200", false},
	} {
		if got := loopbackElsewhere(tc.addr, tc.peer); got != tc.want {
			t.Errorf("loopbackElsewhere(%q, %q) = %v, want %v", tc.addr, tc.peer, got, tc.want)
		}
	}
}

func TestRedactor(t *testing.T) {
	r := newRedactor(&pb.PartitionMap{Accounts: []*pb.StorageAccount{{Name: "a", Keys: [][]byte{testKey}}}})
	key := base64.StdEncoding.EncodeToString(testKey)
	for _, tc := range []struct{ in, want string }{
		{"plain text", "plain text"},
		{"k=" + key, "k=" + redacted},
		{"tablestore frontend --account-key=abc123 --x", "tablestore frontend --account-key=" + redacted + " --x"},
		{"DefaultEndpointsProtocol=http;AccountName=a;AccountKey=abc==;TableEndpoint=x", "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=" + redacted + ";TableEndpoint=x"},
		{"GET /t?sv=1&sig=abc%2F&se=2", "GET /t?sv=1&sig=" + redacted + "&se=2"},
		{"AZURITE_ACCOUNTS=a:k1:k2;b:k3 next", "AZURITE_ACCOUNTS=" + redacted + " next"},
	} {
		if got := r.redactString(tc.in); got != tc.want {
			t.Errorf("redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestDebugZipToStdout: FILE "-" writes the zip, and nothing else, to
// stdout (a pod with a read-only file system: kubectl exec ... > file).
func TestDebugZipToStdout(t *testing.T) {
	addr := startFake(t, &fakeMaster{pm: sampleMap(), events: sampleEvents()})
	out, stderr, err := runCtl(t, context.Background(), "--master", addr, "debug", "zip", "-", "--request-timeout", "1s")
	if err != nil {
		t.Fatalf("%v (%s)", err, stderr)
	}
	zr, err := zip.NewReader(strings.NewReader(out), int64(len(out)))
	if err != nil {
		t.Fatalf("stdout is no zip: %v", err)
	}
	names := map[string]bool{}
	for _, f := range zr.File {
		names[f.Name] = true
	}
	if !names["debug/manifest.json"] || !names["debug/cluster/events.json"] {
		t.Errorf("files %v", names)
	}
}

// TestDebugZipJSON: --json prints one ZipResult.
func TestDebugZipJSON(t *testing.T) {
	addr := startFake(t, &fakeMaster{pm: sampleMap()})
	path := filepath.Join(t.TempDir(), "j.zip")
	out, stderr, err := runCtl(t, context.Background(), "--master", addr, "debug", "zip", path, "--json", "--request-timeout", "1s")
	if err != nil {
		t.Fatalf("%v (%s)", err, stderr)
	}
	objs := jsonObjects(t, out)
	if len(objs) != 1 || keysOf(objs[0]) != "errors,file,files" || objs[0]["file"] != path {
		t.Errorf("--json output %q", out)
	}
}
