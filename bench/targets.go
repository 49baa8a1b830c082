package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// devConnString is the Azurite account that tablestore dev, the front-end's
// defaults and azurite-table all serve.
const (
	devAccount = "devstoreaccount1"
	devKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

func connString(addr string) string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=http://%s/%s;", devAccount, devKey, addr, devAccount)
}

// process is one server process a target started, measured for CPU.
type process struct {
	role  string
	cmd   *exec.Cmd
	log   string
	pprof string // --pprof-addr, when -profile-dir asked for profiles
	// metrics is the process's --metrics-addr (partition servers of the
	// processes target, and dev), read by the tables mode.
	metrics string
}

// target is one endpoint under test and the processes behind it.
type target struct {
	name    string
	conn    string
	masters string // master gRPC addresses for ctl; empty when not tablestore
	pprof   string // address of the process's /debug/pprof (dev with -profile-dir)
	procs   []*process
	dir     string
	// profileDir is -profile-dir: where run saves each process's CPU
	// profile per scenario (processes target), and the load generator's
	// own (processes and azurite targets).
	profileDir string
	// env is added to the environment of the processes it starts
	// (-server-env).
	env []string
	// setup says how the target runs where its name does not (Azurite's
	// persistence and telemetry), printed with the results.
	setup string
}

func (t *target) stop() (exited time.Duration) {
	start := time.Now()
	for _, p := range t.procs {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range t.procs {
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			fmt.Fprintf(os.Stderr, "bench: %s still running 15 s after SIGTERM; killed\n", p.role)
			p.cmd.Process.Kill()
			<-done
		}
	}
	// Measured before the data directory goes: removing 10,000 tables'
	// files takes seconds of its own.
	exited = time.Since(start)
	if t.dir != "" {
		os.RemoveAll(t.dir)
	}
	return exited
}

// start launches a process whose output goes to a log file in the target's
// directory (shown when the target fails to come up).
func (t *target) start(role string, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(t.dir, role+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if len(t.env) > 0 {
		cmd.Env = append(os.Environ(), t.env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	f.Close()
	p := &process{role: role, cmd: cmd, log: logPath}
	t.procs = append(t.procs, p)
	return p, nil
}

func (t *target) logs() string {
	var b strings.Builder
	for _, p := range t.procs {
		data, _ := os.ReadFile(p.log)
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p.role, p.log, data)
	}
	return b.String()
}

func startTarget(name string, o options) (*target, error) {
	switch name {
	case "dev":
		return startDev(o)
	case "processes":
		return startProcesses(o)
	case "azurite":
		return startAzurite(o)
	case "conn":
		if o.conn == "" {
			return nil, errors.New("target conn needs -conn")
		}
		return &target{name: "conn", conn: o.conn}, nil
	}
	return nil, fmt.Errorf("unknown target %q (dev, processes, azurite, conn)", name)
}

// freePorts asks the OS for n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func throttleFlag(o options) string {
	if o.throttle {
		return "2000"
	}
	return "0"
}

// startDev runs `tablestore dev` on a scratch directory and waits for the
// connection string it prints. Policies are off so that every figure is of
// the range layout the scenario sets up; the pre-split scenario splits by
// hand.
func startDev(o options) (*target, error) {
	dir, err := os.MkdirTemp("", "tablestore-bench-dev-")
	if err != nil {
		return nil, err
	}
	t := &target{name: "dev", dir: dir, env: o.serverEnv}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	fe, metrics := addr(ports[0]), addr(ports[1])
	var extra []string
	if o.profileDir != "" {
		p, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		t.pprof = addr(p[0])
		extra = append(extra, "--pprof-addr", t.pprof)
	}
	// dev picks its internal ports itself and writes the master's address
	// into its data directory (for ctl).
	data := filepath.Join(dir, "data")
	args := []string{"dev", "--data-dir", data, "--frontend-addr", fe, "--metrics-addr", metrics, "--log-level", "warn",
		"--partition-throttle", throttleFlag(o), "--policies=false"}
	args = append(append(append(args, extra...), o.psFlags...), o.masterFlags...)
	pr, err := t.start("dev", o.bin, args...)
	if err != nil {
		return nil, err
	}
	pr.metrics = metrics
	t.conn = connString(fe)
	if err := t.waitReady(); err != nil {
		return nil, err
	}
	m, err := os.ReadFile(filepath.Join(data, "master-addr"))
	if err != nil {
		t.stop()
		return nil, fmt.Errorf("dev wrote no master address: %w", err)
	}
	t.masters = strings.TrimSpace(string(m))
	return t, nil
}

// startProcesses runs the deployment shape: one master, three partition
// servers and one front-end, each its own process, as the README shows.
func startProcesses(o options) (*target, error) {
	dir, err := os.MkdirTemp("", "tablestore-bench-procs-")
	if err != nil {
		return nil, err
	}
	t := &target{name: "processes", dir: dir, profileDir: o.profileDir, env: o.serverEnv}
	p, err := freePorts(17)
	if err != nil {
		return nil, err
	}
	// With -profile-dir every process serves /debug/pprof on its own port
	// (p[9:14]) so that run can profile each role during a scenario.
	profiled := func(i int, args ...string) []string {
		if o.profileDir == "" {
			return args
		}
		return append(args, "--pprof-addr", addr(p[9+i]))
	}
	start := func(i int, role string, args ...string) error {
		pr, err := t.start(role, o.bin, profiled(i, args...)...)
		if err != nil {
			t.stop()
			return err
		}
		if o.profileDir != "" {
			pr.pprof = addr(p[9+i])
		}
		return nil
	}
	master := addr(p[0])
	masterArgs := append([]string{"master", "--id", "m1", "--data-dir", filepath.Join(dir, "m1"),
		"--grpc-addr", master, "--raft-addr", addr(p[1]), "--peers", "m1=" + addr(p[1]),
		"--policies=false", "--log-level", "warn"}, o.masterFlags...)
	if err := start(0, "master", masterArgs...); err != nil {
		return nil, err
	}
	for i := 1; i <= 3; i++ {
		args := append([]string{"partitionserver", "--id", fmt.Sprintf("ps%d", i),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("ps%d", i)),
			"--grpc-addr", addr(p[2*i]), "--raft-addr", addr(p[2*i+1]), "--masters", master,
			"--metrics-addr", addr(p[13+i]),
			"--partition-throttle", throttleFlag(o), "--log-level", "warn"}, o.psFlags...)
		if err := start(i, fmt.Sprintf("ps%d", i), args...); err != nil {
			return nil, err
		}
		t.procs[len(t.procs)-1].metrics = addr(p[13+i])
	}
	fe := addr(p[8])
	if err := start(4, "frontend", "frontend", "--http-addr", fe, "--masters", master, "--log-level", "warn"); err != nil {
		return nil, err
	}
	t.conn = connString(fe)
	t.masters = master
	return t, t.waitReady()
}

// startAzurite runs azurite-table on a scratch directory: on-disk
// persistence (its default: LokiJS keeps every table in memory and writes
// the whole database as one JSON file every 5 s when it changed, without
// fsync; one copy) or, with -azurite-memory, --inMemoryPersistence.
// Telemetry is off unless -azurite-telemetry: on (Azurite's default) it
// builds an Application Insights record for every request, exports a
// sample and, when the export fails (no network), stores it under
// $TMPDIR/Microsoft-AzureMonitor-*: CPU and disk writes of its own,
// counted as Azurite's cost per entity, that no table operation needs.
func startAzurite(o options) (*target, error) {
	bin, err := exec.LookPath("azurite-table")
	if err != nil {
		return nil, errSkip
	}
	dir, err := os.MkdirTemp("", "tablestore-bench-azurite-")
	if err != nil {
		return nil, err
	}
	t := &target{name: "azurite", dir: dir, setup: azuriteSetup(o), profileDir: o.profileDir}
	if v, err := exec.Command(bin, "--version").Output(); err == nil {
		t.setup = "azurite-table " + strings.TrimSpace(string(v)) + ", " + t.setup
	}
	p, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	args := []string{"--tableHost", "127.0.0.1", "--tablePort", strconv.Itoa(p[0]), "--skipApiVersionCheck", "--silent"}
	args = append(args, azuriteArgs(o, dir)...)
	if _, err := t.start("azurite", bin, args...); err != nil {
		return nil, err
	}
	t.conn = connString(addr(p[0]))
	return t, t.waitReady()
}

// azuriteArgs is the persistence and telemetry part of azurite-table's
// command line.
func azuriteArgs(o options, dir string) []string {
	var args []string
	if o.azuriteMemory {
		args = append(args, "--inMemoryPersistence")
	} else {
		args = append(args, "--location", dir)
	}
	if !o.azuriteTelemetry {
		args = append(args, "--disableTelemetry")
	}
	return args
}

// azuriteSetup says how Azurite runs, for the header of the results.
func azuriteSetup(o options) string {
	s := "on disk (LokiJS: whole database written as JSON every 5 s, no fsync), 1 copy"
	if o.azuriteMemory {
		s = "in memory (--inMemoryPersistence), 1 copy"
	}
	if o.azuriteTelemetry {
		return s + ", telemetry on"
	}
	return s + ", telemetry off"
}

// errSkip marks a target that cannot run on this machine.
var errSkip = errors.New("skipped")

// waitReady polls until a table can be created and deleted (every role up,
// the first range led).
func (t *target) waitReady() error {
	sc, err := aztables.NewServiceClientFromConnectionString(t.conn, nil)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		for _, p := range t.procs {
			if p.cmd.ProcessState != nil {
				return fmt.Errorf("%s exited early\n%s", p.role, t.logs())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		name := fmt.Sprintf("ready%d", time.Now().UnixNano()%1e9)
		_, last = sc.CreateTable(ctx, name, nil)
		if last == nil {
			sc.DeleteTable(ctx, name, nil)
			cancel()
			return nil
		}
		cancel()
		time.Sleep(250 * time.Millisecond)
	}
	t.stop()
	return fmt.Errorf("%s did not become ready: %v\n%s", t.name, last, t.logs())
}

// cpuSeconds is the user+system CPU time a process has used so far, all
// its threads', exited ones included (not its children's: no role starts
// any, and node runs azurite-table in the process it was started as).
func cpuSeconds(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && err != io.EOF {
		return 0
	}
	return statCPUTicks(line) / clockTicks
}

// statCPUTicks is utime + stime (fields 14 and 15) of a /proc/PID/stat
// line, in clock ticks; 0 when the line is not one.
func statCPUTicks(line string) float64 {
	// The command name (field 2) may hold spaces and ')'; the fields
	// after its last ')' start at field 3.
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(line[i+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return utime + stime
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// rssBytes is a process's resident set size.
func rssBytes(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// cpuSnapshot is every started process's CPU time plus this process's own.
type cpuSnapshot map[string]float64

func (t *target) cpu() cpuSnapshot { return perProcess(t, cpuSeconds) }

// perProcess is f of every process t started, by role, and of this one
// ("client").
func perProcess[T any](t *target, f func(pid int) T) map[string]T {
	s := map[string]T{"client": f(os.Getpid())}
	for _, p := range t.procs {
		s[p.role] = f(p.cmd.Process.Pid)
	}
	return s
}

// profile takes a CPU profile of every process that serves pprof, over the
// middle of a scenario of length d (the first and last half second left
// out), into -profile-dir as <scenario>-<role>.pprof, and the allocation
// profile at its end as <scenario>-<role>.allocs; and the load generator's
// own as <scenario>-client-<target>.pprof. The caller waits on the group
// before starting the next scenario.
func (t *target) profile(scenario string, d time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	secs := int((d - time.Second) / time.Second)
	if t.profileDir == "" || secs < 1 {
		return &wg
	}
	// The load generator shares the machine: what it spends per operation
	// against each target bounds the ratios as much as the servers do
	// (performance.md, "What the two cores leave for the ratios").
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.profileClient(scenario, secs)
	}()
	for _, p := range t.procs {
		if p.pprof == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(500 * time.Millisecond)
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.pprof, secs)
			resp, err := http.Get(url)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: profile %s: %v\n", p.role, err)
				return
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode == http.StatusOK {
				err = os.WriteFile(filepath.Join(t.profileDir, scenario+"-"+p.role+".pprof"), data, 0o644)
			} else if err == nil {
				err = fmt.Errorf("%s: %s", url, resp.Status)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: profile %s: %v\n", p.role, err)
			}
			// The allocation profile is cumulative since the process
			// started: diff two scenarios' files with pprof -base.
			if resp, err := http.Get("http://" + p.pprof + "/debug/pprof/allocs"); err == nil {
				if data, err := io.ReadAll(resp.Body); err == nil && resp.StatusCode == http.StatusOK {
					_ = os.WriteFile(filepath.Join(t.profileDir, scenario+"-"+p.role+".allocs"), data, 0o644)
				}
				resp.Body.Close()
			}
		}()
	}
	return &wg
}

// profileClient profiles this process, the load generator, for secs
// seconds after the first half second, into -profile-dir as
// <scenario>-client-<target>.pprof.
func (t *target) profileClient(scenario string, secs int) {
	time.Sleep(500 * time.Millisecond)
	f, err := os.Create(filepath.Join(t.profileDir, scenario+"-client-"+t.name+".pprof"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: client profile: %v\n", err)
		return
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "bench: client profile: %v\n", err)
		return
	}
	time.Sleep(time.Duration(secs) * time.Second)
	pprof.StopCPUProfile()
}
