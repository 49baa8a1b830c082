package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tablestore/ctl"
)

// TestDebugZipMultiProcess runs `ctl debug zip` against the real binary as
// separate processes (a master, two partition servers, a front-end), each
// with its own --metrics-addr: the binary hands its listeners to the role,
// the master names its own and the servers register theirs, so each
// process's pages land in its own directory (a server's metrics are its
// role's families only), the front-end is found through the master its
// map watch told who it is (no --http-addrs), and the front-end's account
// key is nowhere in the zip.
func TestDebugZipMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	dir := t.TempDir()
	c := &processCluster{t: t, bin: binary(t)}
	p := freePorts(t, 12)
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(p[i]) }
	t.Cleanup(c.stopAll)
	master := addr(0)
	c.start("master", "master", "--id", "m1", "--data-dir", filepath.Join(dir, "m1"), "--grpc-addr", master,
		"--raft-addr", addr(1), "--metrics-addr", addr(2), "--pprof-addr", addr(3), "--log-level", "warn")
	for i := 0; i < 2; i++ {
		b := 4 + 3*i
		id := fmt.Sprintf("ps%d", i+1)
		c.start(id, "partitionserver", "--id", id, "--data-dir", filepath.Join(dir, id), "--grpc-addr", addr(b),
			"--raft-addr", addr(b+1), "--metrics-addr", addr(b+2), "--masters", master, "--log-level", "warn")
	}
	key := base64.StdEncoding.EncodeToString([]byte("multi-process-debug-zip-key-0001"))
	feMetrics := addr(11)
	c.start("frontend", "frontend", "--http-addr", addr(10), "--metrics-addr", feMetrics, "--masters", master,
		"--account-key", key, "--log-level", "warn")

	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := ctl.RunContext(ctx, append([]string{"--master", master, "--timeout", "5s"}, args...), &out, &errb)
		if err != nil {
			err = fmt.Errorf("%w (stderr %s)", err, errb.String())
		}
		return out.String(), err
	}
	// Both servers registered with their metrics addresses, and the
	// front-end serving.
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := run("servers", "--json")
		n := strings.Count(out, `"metrics_addr":"127.0.0.1:`)
		if err == nil && n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("servers not registered with metrics addresses: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}

	var zipBytes []byte
	for {
		out, err := run("debug", "zip", "-", "--request-timeout", "5s")
		if err != nil {
			t.Fatal(err)
		}
		zipBytes = []byte(out)
		m := manifestOf(t, zipBytes)
		listed := strings.Contains(string(unzip(t, zipBytes)["debug/cluster/frontends.json"]), `"metrics_addr":"`+feMetrics+`"`)
		if len(m.Errors) == 0 && listed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("errors in the manifest: %+v; front-end listed: %v", m.Errors, listed)
		}
		time.Sleep(200 * time.Millisecond)
	}
	files := unzip(t, zipBytes)
	feDir := ""
	for name := range files {
		if strings.HasPrefix(name, "debug/frontends/") && strings.HasSuffix(name, "/metrics.txt") {
			feDir = strings.TrimSuffix(name, "metrics.txt")
		}
	}
	if feDir == "" {
		t.Fatalf("no front-end directory in the zip: %v", files["debug/cluster/frontends.json"])
	}
	want := map[string][]string{
		"debug/masters/m1/metrics.txt":    {"tablestore_master_is_leader 1"},
		"debug/masters/m1/version.txt":    {"tablestore "},
		"debug/masters/m1/goroutines.txt": {"goroutine "},
		"debug/servers/ps1/metrics.txt":   {"tablestore_partitionserver_"},
		"debug/servers/ps2/readyz.txt":    {"ok"},
		feDir + "metrics.txt":             {"tablestore_router_"},
		feDir + "version.txt":             {"tablestore "},
		"debug/cluster/frontends.json":    {`"http_addrs":["` + addr(10) + `"]`},
		"debug/cluster/masters.json":      {`"id":"m1"`},
	}
	for name, subs := range want {
		for _, s := range subs {
			if !strings.Contains(files[name], s) {
				t.Errorf("%s does not contain %q (%d bytes)", name, s, len(files[name]))
			}
		}
	}
	// Each process's own families: the server's are not the master's.
	if strings.Contains(files["debug/servers/ps1/metrics.txt"], "tablestore_master_") {
		t.Error("ps1's metrics hold the master's families: not its own process's page")
	}
	for name, body := range files {
		if strings.Contains(body, key) {
			t.Errorf("%s holds the account key", name)
		}
	}
}

func unzip(t *testing.T, b []byte) map[string]string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(rc)
		rc.Close()
		out[f.Name] = string(body)
	}
	return out
}

func manifestOf(t *testing.T, b []byte) ctl.Manifest {
	t.Helper()
	var m ctl.Manifest
	if err := json.Unmarshal([]byte(unzip(t, b)["debug/manifest.json"]), &m); err != nil {
		t.Fatal(err)
	}
	return m
}
