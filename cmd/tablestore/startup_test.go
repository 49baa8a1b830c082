package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary builds the tablestore binary once per test run.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "tablestore-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "tablestore")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = errors.New("build: " + err.Error() + "\n" + string(out))
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// runExit runs the binary to completion (it must exit within 30 s) and
// returns its exit code, stdout and stderr.
func runExit(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runIn(t, t.TempDir(), args...)
}

// runIn is runExit in directory dir.
func runIn(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("tablestore %s did not exit within 30s\n%s", strings.Join(args, " "), stderr.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"help", "dev"}, {"dev", "-h"}, {"frontend", "--help"}, {"version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runExit(t, args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, errOut)
			}
			if args[0] == "version" && (!strings.HasPrefix(out, "tablestore ") || !strings.Contains(out, " commit ")) {
				t.Errorf("version printed %q, want \"tablestore VERSION commit REV ...\"", out)
			}
		})
	}
}

// TestHelpUnknownCommand: `tablestore help NAME` for a command that does
// not exist says so and fails, as `tablestore NAME` does, rather than
// printing the command list with exit status 0.
func TestHelpUnknownCommand(t *testing.T) {
	code, out, errOut := runExit(t, "help", "nosuch")
	if code != 2 || out != "" || !strings.HasPrefix(errOut, `tablestore: help: unknown command "nosuch"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 2, nothing, the unknown command named", code, out, errOut)
	}
}

// holdPort listens on a free loopback port for the test's duration.
func holdPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// holdBasePort is holdPort for a port that also serves as dev's
// --base-port: the other ports dev derives from it (+100, +200+i,
// +300+i) are free when it returns, so that dev fails on the held one
// and not on a neighbour another process happened to have (a flake seen
// once in make test).
func holdBasePort(t *testing.T) string {
	t.Helper()
	for try := 0; ; try++ {
		port := holdPort(t)
		base, _ := strconv.Atoi(port)
		free := true
		for _, off := range []int{100, 200, 201, 202, 203, 300, 301, 302, 303} {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+off))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free || try == 20 {
			return port
		}
	}
}

// TestStartupErrors: every start-up failure ends in exit status 1 and one
// line naming the flag, path or port, never a panic.
func TestStartupErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	busy := holdBasePort(t)
	closed := strconv.Itoa(freePorts(t, 1)[0])
	corrupt := t.TempDir()
	os.WriteFile(filepath.Join(corrupt, "state.db"), bytes.Repeat([]byte("not a bolt file "), 1000), 0o644)
	corruptMaster := t.TempDir()
	os.WriteFile(filepath.Join(corruptMaster, "raft.db"), bytes.Repeat([]byte("not a bolt file "), 1000), 0o644)
	emptyKey := filepath.Join(t.TempDir(), "key")
	os.WriteFile(emptyKey, nil, 0o600)
	quiet := "--log-level=error"
	for _, tc := range []struct {
		name string
		args []string
		want []string // substrings of the one line
	}{
		{"dev bad data dir", []string{"dev", "--data-dir", "/proc/nope", quiet}, []string{"--data-dir /proc/nope"}},
		{"dev internal port in use", []string{"dev", "--data-dir", "d", "--base-port", busy, "--frontend-addr", "127.0.0.1:0", quiet}, []string{"127.0.0.1:" + busy, "--base-port " + busy}},
		{"dev endpoint port in use", []string{"dev", "--data-dir", "d", "--frontend-addr", "127.0.0.1:" + busy, "--metrics-addr=", quiet}, []string{"--frontend-addr 127.0.0.1:" + busy}},
		{"dev metrics port in use", []string{"dev", "--data-dir", "d", "--metrics-addr", "127.0.0.1:" + busy, quiet}, []string{"--metrics-addr 127.0.0.1:" + busy}},
		{"pprof port in use", []string{"master", "--data-dir", "m", "--pprof-addr", "127.0.0.1:" + busy, quiet}, []string{"--pprof-addr 127.0.0.1:" + busy}},
		{"master grpc port in use", []string{"master", "--data-dir", "m", "--grpc-addr", "127.0.0.1:" + busy, "--raft-addr", "127.0.0.1:0", quiet}, []string{"--grpc-addr 127.0.0.1:" + busy}},
		{"master raft port in use", []string{"master", "--data-dir", "m", "--raft-addr", "127.0.0.1:" + busy, quiet}, []string{"--raft-addr 127.0.0.1:" + busy}},
		{"partition server port in use", []string{"partitionserver", "--data-dir", "p", "--grpc-addr", "127.0.0.1:" + busy, "--raft-addr", "127.0.0.1:0", quiet}, []string{"--grpc-addr 127.0.0.1:" + busy}},
		{"front-end without reachable masters", []string{"frontend", "--http-addr", "127.0.0.1:0", "--masters", "127.0.0.1:" + closed, "--start-timeout", "1s", quiet}, []string{"--masters 127.0.0.1:" + closed, "--start-timeout"}},
		{"corrupt partition server state file", []string{"partitionserver", "--data-dir", corrupt, "--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", quiet}, []string{"state file " + filepath.Join(corrupt, "state.db")}},
		{"corrupt master raft log", []string{"master", "--data-dir", corruptMaster, "--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", quiet}, []string{"raft log " + filepath.Join(corruptMaster, "raft.db")}},
		{"empty account key file", []string{"frontend", "--account-key-file", emptyKey, quiet}, []string{"--account-key-file " + emptyKey}},
		{"dev missing certificate", []string{"dev", "--data-dir", "d", "--cert", "/nonexistent.pem", "--key", "/nonexistent.key", quiet}, []string{"--cert /nonexistent.pem"}},
		{"dev servers out of range", []string{"dev", "--data-dir", "d", "--servers=0", quiet}, []string{"--servers 0"}},
		{"front-end without masters", []string{"frontend", "--http-addr", "127.0.0.1:0", "--masters", "", quiet}, []string{"--masters"}},
		{"master policy interval", []string{"master", "--data-dir", "m", "--policy-interval=0s", quiet}, []string{"--policy-interval 0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkOneLine(t, 1, tc.args, tc.want) })
	}
	// A command line that does not parse: one line naming the flag and
	// where the flags are listed, exit 2, nothing on stdout (not the flag
	// package's error followed by every flag of the command).
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown flag", []string{"master", "--no-such-flag"}, []string{"master: ", "-no-such-flag", "tablestore help master"}},
		{"bad flag value", []string{"dev", "--servers=x"}, []string{"dev: ", `invalid value "x" for flag -servers`, "tablestore help dev"}},
		{"unexpected argument", []string{"partitionserver", "stray"}, []string{`partitionserver: unexpected argument "stray"`}},
		{"sim bad flag value", []string{"sim", "--servers", "many"}, []string{"sim: ", `"many"`, "tablestore help sim"}},
		{"loadgen bad flag value", []string{"loadgen", "--workers", "x"}, []string{"loadgen", `"x"`, "loadgen -h"}},
		{"version flag", []string{"version", "--short"}, []string{"version: ", "-short"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkOneLine(t, 2, tc.args, tc.want) })
	}
}

// checkOneLine runs the binary with args and fails unless it exits with
// code after one line on stderr naming every string of want, and nothing
// on stdout.
func checkOneLine(t *testing.T, code int, args, want []string) {
	t.Helper()
	got, out, errOut := runExit(t, args...)
	if got != code {
		t.Errorf("exit %d, want %d", got, code)
	}
	if strings.Contains(errOut, "panic") || strings.Contains(errOut, "goroutine ") {
		t.Fatalf("panicked:\n%s", errOut)
	}
	if code == 2 && out != "" {
		t.Errorf("printed on stdout:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 1 {
		t.Errorf("want one line on stderr, have %d:\n%s", len(lines), errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			t.Errorf("message %q does not name %q", lines[len(lines)-1], w)
		}
	}
}

// startProc starts the binary in the background; Cleanup stops it.
func startProc(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Dir = t.TempDir()
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("output:\n%s", out.String())
		}
	})
	return cmd, out
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// waitStatus polls url until it answers want (or fails after 60 s).
func waitStatus(t *testing.T, url string, want int) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, err := get(url)
		if err == nil && code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q %v, want %d", url, code, body, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDevFirstRun: dev with only --data-dir and --frontend-addr picks its
// internal ports, serves metrics and probes on the endpoint's port + 1,
// pprof only on --pprof-addr, and the account key from a file.
func TestDevFirstRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	// An endpoint port whose successor is free too.
	var port int
	for range 20 {
		if p := freePorts(t, 1)[0]; claimPort(p + 1) {
			port = p
			break
		}
	}
	if port == 0 {
		t.Fatal("no free pair of ports")
	}
	pprofPort := freePorts(t, 1)[0]
	keyFile := filepath.Join(t.TempDir(), "account-key")
	const key = "c2VjcmV0LWtleS1mcm9tLWEtZmlsZQ=="
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	dev, out := startProc(t, "dev", "--data-dir", "data", "--frontend-addr", "127.0.0.1:"+strconv.Itoa(port),
		"--account-key-file", keyFile, "--pprof-addr", "127.0.0.1:"+strconv.Itoa(pprofPort), "--log-level", "warn")
	metrics := "http://127.0.0.1:" + strconv.Itoa(port+1)
	waitStatus(t, metrics+"/healthz", 200)
	if body := waitStatus(t, metrics+"/readyz", 200); strings.TrimSpace(body) != "ok" {
		t.Errorf("/readyz body %q", body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "AccountKey="+key) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "AccountKey="+key) {
		t.Errorf("connection string does not carry the key from --account-key-file")
	}
	if code, body, _ := get(metrics + "/metrics"); code != 200 || !strings.Contains(body, "tablestore_raft_commit_seconds") {
		t.Errorf("/metrics: %d, tablestore_raft_commit_seconds missing", code)
	}
	if code, _, _ := get(metrics + "/debug/pprof/"); code != 404 {
		t.Errorf("pprof on the metrics port: %d, want 404", code)
	}
	if code, _, _ := get("http://127.0.0.1:" + strconv.Itoa(pprofPort) + "/debug/pprof/"); code != 200 {
		t.Errorf("pprof on --pprof-addr: %d, want 200", code)
	}
	// ctl finds the dev master from ./data without --master.
	if code, stdout, stderr := runIn(t, dev.Dir, "ctl", "servers"); code != 0 || !strings.Contains(stdout, "ps1") {
		t.Errorf("ctl servers beside dev's data: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestPartitionServerNotReadyWithoutMaster: a partition server whose
// masters are unreachable is live but not ready, and says why.
func TestPartitionServerNotReadyWithoutMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	p := freePorts(t, 2)
	metrics := "127.0.0.1:" + strconv.Itoa(p[0])
	_, out := startProc(t, "partitionserver", "--data-dir", "ps", "--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0",
		"--masters", "127.0.0.1:"+strconv.Itoa(p[1]), "--metrics-addr", metrics)
	waitStatus(t, "http://"+metrics+"/healthz", 200)
	// Not ready from the start ("starting"), then for want of a master
	// once the start is done: polled until it says so.
	body := waitStatus(t, "http://"+metrics+"/readyz", 503)
	for until := time.Now().Add(10 * time.Second); !strings.Contains(body, "not registered") && time.Now().Before(until); {
		time.Sleep(50 * time.Millisecond)
		body = waitStatus(t, "http://"+metrics+"/readyz", 503)
	}
	if !strings.Contains(body, "not registered") {
		t.Errorf("/readyz body %q does not say it is not registered", body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "check --masters") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "check --masters") {
		t.Error("no warning naming --masters")
	}
}

// TestFrontendWaitsForMaster: a front-end started with --start-timeout 0
// while no master answers stays up, alive and not ready ("frontend
// starting"), instead of exiting after the timeout into a restart loop (as
// it does with a timeout: 1 s here); it serves once a master comes (the
// multi-process tests cover that path).
func TestFrontendWaitsForMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	for _, tc := range []struct {
		timeout string
		stays   bool
	}{{"0", true}, {"1s", false}} {
		t.Run("start-timeout "+tc.timeout, func(t *testing.T) {
			t.Parallel()
			p := freePorts(t, 3)
			metrics := "127.0.0.1:" + strconv.Itoa(p[0])
			_, out := startProc(t, "frontend", "--http-addr", "127.0.0.1:"+strconv.Itoa(p[1]),
				"--masters", "127.0.0.1:"+strconv.Itoa(p[2]), "--start-timeout", tc.timeout, "--metrics-addr", metrics)
			waitStatus(t, "http://"+metrics+"/healthz", 200)
			body := waitStatus(t, "http://"+metrics+"/readyz", 503)
			if !strings.Contains(body, "frontend starting") {
				t.Errorf("/readyz body %q does not say the front-end is starting", body)
			}
			// Past the 1 s timeout: waiting and alive, or gone.
			time.Sleep(3 * time.Second)
			code, _, err := get("http://" + metrics + "/healthz")
			if alive := err == nil && code == 200; alive != tc.stays {
				t.Fatalf("/healthz 3 s later: %d, %v; want alive %v\n%s", code, err, tc.stays, out.String())
			}
			if !tc.stays && !strings.Contains(out.String(), "--start-timeout") {
				t.Errorf("the front-end's exit does not name --start-timeout:\n%s", out.String())
			}
		})
	}
}

// TestCtlJSONError: ctl --json reports a failure as one JSON object on
// stderr, not followed by the text line every other failure gets, and
// exits 1.
func TestCtlJSONError(t *testing.T) {
	code, out, errOut := runExit(t, "ctl", "--json", "--master", "127.0.0.1:1", "merge", "x")
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	var rec map[string]any
	if code != 1 || out != "" || len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil || rec["kind"] != "usage" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestCtlAgainstStoppedDev: ctl without --master reads dev's master
// address from ./data/master-addr; when nothing listens there any more
// (dev stopped) it says so within a few seconds, naming the file and make
// run, instead of retrying the address for its whole --timeout (30 s).
func TestCtlAgainstStoppedDev(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0])
	if err := os.WriteFile(filepath.Join(dir, "data", "master-addr"), []byte(addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, _, errOut := runIn(t, dir, "ctl", "servers")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v", took)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, w := range []string{addr, "master-addr", "make run"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("message does not name %q:\n%s", w, errOut)
		}
	}
}
