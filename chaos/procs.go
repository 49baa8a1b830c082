package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"tablestore/internal/failpoint"
	"tablestore/master"
)

// role is one process of the cluster.
type role struct {
	name string
	args []string
	// failAddr is where the process serves its failpoints (a partition
	// server's disk faults are armed there, without a restart).
	failAddr string
	cmd      *exec.Cmd
	out      *tailBuffer
	done     chan struct{}
}

// cluster is 3 masters, 4 partition servers and a front-end, each behind
// proxies of the fault layer.
type cluster struct {
	bin     string
	dir     string
	net     *faultNet
	mu      sync.Mutex
	masters []*role
	servers []*role
	front   *role
	// masterGRPC are the masters' gRPC addresses as clients reach them
	// (through proxies); direct ones bypass the fault layer for checks.
	masterGRPC, masterDirect []string
	serverDirect             map[string]string // server id -> direct gRPC
	endpoint                 string
	// ctlRunning counts reshaping commands in flight: the read-back waits
	// for them.
	ctlRunning sync.WaitGroup

	// The availability record: when each role was impaired, and the
	// direct address that answers once a started role listens.
	evMu   sync.Mutex
	events []timedEvent
	direct map[string]string
}

// timedEvent is a roleEvent at wall-clock time, converted when the run
// is evaluated.
type timedEvent struct {
	at time.Time
	roleEvent
}

// mark records an impairment flag of a role.
func (c *cluster) mark(role, flag string, on bool) {
	c.evMu.Lock()
	c.events = append(c.events, timedEvent{time.Now(), roleEvent{role: role, flag: flag, on: on}})
	c.evMu.Unlock()
}

// roleEvents returns the record relative to start.
func (c *cluster) roleEvents(start time.Time) []roleEvent {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	out := make([]roleEvent, 0, len(c.events))
	for _, e := range c.events {
		e.roleEvent.at = e.at.Sub(start)
		out = append(out, e.roleEvent)
	}
	return out
}

// awaitListening clears r's down flag once its direct address accepts a
// connection, unless the process it was started as has exited by then.
func (c *cluster) awaitListening(r *role, done chan struct{}) {
	addr := c.direct[r.name]
	if addr == "" {
		c.mark(r.name, flagDown, false)
		return
	}
	for !isClosed(done) {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			c.mu.Lock()
			current := r.done == done
			c.mu.Unlock()
			if current && !isClosed(done) {
				c.mark(r.name, flagDown, false)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const accountKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

func (c *cluster) connString() string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=%s;TableEndpoint=http://%s/devstoreaccount1;", accountKey, c.endpoint)
}

// secondaryConnString addresses the account's read-access secondary
// endpoint (path-style "<account>-secondary").
func (c *cluster) secondaryConnString() string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=%s;TableEndpoint=http://%s/devstoreaccount1-secondary;", accountKey, c.endpoint)
}

// startCluster starts every role of a fresh cluster in dir.
func startCluster(bin, dir string) (*cluster, error) {
	c := &cluster{bin: bin, dir: dir, net: newFaultNet(), serverDirect: map[string]string{}, direct: map[string]string{}}
	ports, release, err := reserveAddrs(3*2 + 4*3 + 1)
	if err != nil {
		return nil, err
	}
	defer release()
	next := func() string { a := ports[0]; ports = ports[1:]; return a }
	var peers []string
	type m struct{ id, grpc, raft string }
	var ms []m
	for i := 1; i <= 3; i++ {
		x := m{fmt.Sprintf("m%d", i), next(), next()}
		ms = append(ms, x)
		rp, err := c.net.listen(x.id, x.raft)
		if err != nil {
			return nil, err
		}
		gp, err := c.net.listen(x.id, x.grpc)
		if err != nil {
			return nil, err
		}
		peers = append(peers, x.id+"="+rp.addr())
		c.masterGRPC = append(c.masterGRPC, gp.addr())
		c.masterDirect = append(c.masterDirect, x.grpc)
		c.direct[x.id] = x.grpc
	}
	for _, x := range ms {
		c.masters = append(c.masters, &role{name: x.id, args: []string{"master", "--id", x.id,
			"--data-dir", filepath.Join(dir, x.id), "--grpc-addr", x.grpc, "--raft-addr", x.raft,
			"--peers", strings.Join(peers, ","), "--server-timeout", "3s", "--replicate-after", "20s",
			"--log-level", logLevel(), "--metrics-addr", ""}})
		c.masters[len(c.masters)-1].args = append(c.masters[len(c.masters)-1].args, masterFlags()...)
	}
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("ps%d", i)
		g, r := next(), next()
		gp, err := c.net.listen(id, g)
		if err != nil {
			return nil, err
		}
		rp, err := c.net.listen(id, r)
		if err != nil {
			return nil, err
		}
		c.serverDirect[id] = g
		c.direct[id] = g
		c.servers = append(c.servers, &role{name: id, failAddr: next(), args: []string{"partitionserver", "--id", id,
			"--data-dir", filepath.Join(dir, id), "--grpc-addr", g, "--raft-addr", r,
			"--advertise-grpc", gp.addr(), "--advertise-raft", rp.addr(),
			"--masters", strings.Join(c.masterGRPC, ","), "--snapshot-threshold", "2048",
			"--trailing-logs", "512", "--snapshot-interval", "5s", "--quiesce-after", quiesceAfter(),
			"--log-level", logLevel(), "--metrics-addr", ""}})
	}
	c.endpoint = next()
	c.front = &role{name: "fe", args: []string{"frontend", "--http-addr", c.endpoint,
		"--masters", strings.Join(c.masterGRPC, ","), "--log-level", logLevel(), "--metrics-addr", ""}}
	// Every proxy listens: the roles may have their ports now.
	release()
	for _, r := range c.all() {
		if err := c.start(r); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

func (c *cluster) all() []*role {
	out := append([]*role{}, c.masters...)
	out = append(out, c.servers...)
	return append(out, c.front)
}

// start runs r (again) with its environment.
func (c *cluster) start(r *role) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	if r.out == nil {
		// A replay at info level (TABLESTORE_CHAOS_LOG_LEVEL) needs the
		// whole story of a seed, not its last minute of warnings.
		size := 64 << 10
		if logLevel() != "warn" {
			size = 16 << 20
		}
		r.out = &tailBuffer{max: size}
	}
	cmd := exec.Command(c.bin, r.args...)
	// Failpoints only as the harness arms them: none inherited from its
	// own environment (an inherited address would clash between roles).
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, failpoint.EnvVar+"=") && !strings.HasPrefix(kv, failpoint.AddrEnvVar+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if r.failAddr != "" {
		cmd.Env = append(cmd.Env, failpoint.AddrEnvVar+"="+r.failAddr)
	}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	r.cmd, r.done = cmd, make(chan struct{})
	c.net.setPID(cmd.Process.Pid, r.name)
	c.mark(r.name, flagDown, true)
	go func(done chan struct{}) {
		cmd.Wait()
		c.mark(r.name, flagDown, true) // killed, or exited on its own (a failing disk)
		close(done)
	}(r.done)
	go c.awaitListening(r, r.done)
	return nil
}

// kill stops r with SIGKILL and waits for it.
func (c *cluster) kill(r *role) {
	c.stopRole(r, func(cmd *exec.Cmd, _ <-chan struct{}) {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
	})
}

// stopRole takes r's process out of the cluster, ends it with end (which
// returns once it sent its signals; stopRole then waits for the exit), and
// forgets its pid.
func (c *cluster) stopRole(r *role, end func(cmd *exec.Cmd, done <-chan struct{})) {
	c.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	end(cmd, done)
	<-done
	c.net.setPID(0, r.name)
}

// terminate stops r as an orchestrator would (SIGTERM: a clean shutdown,
// its leaderships handed off first), killing it if it has not exited
// within terminateWithin (the binary bounds its own shutdown to 10 s).
func (c *cluster) terminate(r *role) {
	c.stopRole(r, func(cmd *exec.Cmd, done <-chan struct{}) {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(terminateWithin):
			cmd.Process.Kill()
		}
	})
}

// terminateWithin is how long terminate waits for a clean exit.
const terminateWithin = 15 * time.Second

// signal sends sig to r if it runs.
func (c *cluster) signal(r *role, sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.cmd != nil {
		r.cmd.Process.Signal(sig)
	}
}

// allRunning fails when a role has exited since it was started: before
// any fault none should have, and one that could not bind its address
// (taken between the reservation and its start) would leave the seed
// running on one server fewer, with its figures charged to the faults
// (seed 141's first run: ps2's Raft port was taken, ps2 never ran).
func (c *cluster) allRunning() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.all() {
		if r.cmd != nil && isClosed(r.done) {
			out := strings.TrimSpace(r.out.String())
			if i := strings.LastIndexByte(out, '\n'); i >= 0 {
				out = out[i+1:]
			}
			return fmt.Errorf("chaos: %s exited during setup: %s", r.name, out)
		}
	}
	return nil
}

// exited reports roles that died on their own (a failing disk panics),
// restarting them.
func (c *cluster) reviveExited() []string {
	var out []string
	for _, r := range c.all() {
		c.mu.Lock()
		dead := r.cmd != nil && isClosed(r.done)
		if dead {
			r.cmd = nil
		}
		c.mu.Unlock()
		if dead {
			out = append(out, r.name)
			c.start(r)
		}
	}
	return out
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// setFailpoint arms point name on r with action ("" disarms) while r
// runs: a slow disk is not also a restart. It retries for a few seconds
// (r may be starting after the last fault) and fails if r is not running
// (a failing disk may have stopped it: reviveExited restarts it after the
// fault's heal, disarmed).
func (c *cluster) setFailpoint(r *role, name, action string) error {
	method := http.MethodPut
	if action == "" {
		method = http.MethodDelete
	}
	url := "http://" + r.failAddr + "/" + name
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := func() error {
			req, err := http.NewRequest(method, url, strings.NewReader(action))
			if err != nil {
				return err
			}
			resp, err := failpointClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s %s: %s", method, url, resp.Status)
			}
			return nil
		}()
		c.mu.Lock()
		running := r.cmd != nil && !isClosed(r.done)
		c.mu.Unlock()
		if err == nil || !running || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var failpointClient = &http.Client{Timeout: time.Second}

func (c *cluster) stop() {
	for _, r := range c.all() {
		c.kill(r)
	}
	for _, p := range c.net.proxies {
		p.close()
	}
}

// ctl runs `tablestore ctl` against the masters.
func (c *cluster) ctl(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"ctl", "--master", strings.Join(c.masterDirect, ","), "--timeout", "20s"}, args...)
	out, err := exec.CommandContext(ctx, c.bin, full...).CombinedOutput()
	return string(out), err
}

// tailBuffer keeps the last max bytes a process wrote.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if t.buf.Len() > t.max {
		b := t.buf.Bytes()[t.buf.Len()-t.max/2:]
		t.buf.Reset()
		t.buf.Write(b)
	}
	return len(p), nil
}

// grow raises the buffer's bound (a goroutine dump is larger than the
// warnings a seed keeps).
func (t *tailBuffer) grow(max int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.max = max
}

// dumpGoroutines asks every running role for its goroutines: SIGQUIT makes
// the Go runtime print them all and exit, so a seed whose verification read
// hung keeps in each role's log what every goroutine was waiting on.
func (c *cluster) dumpGoroutines() {
	var waits []chan struct{}
	for _, r := range c.all() {
		c.mu.Lock()
		cmd, done := r.cmd, r.done
		c.mu.Unlock()
		if cmd == nil || isClosed(done) {
			continue
		}
		r.out.grow(32 << 20)
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Signal(syscall.SIGQUIT)
		waits = append(waits, done)
	}
	deadline := time.After(10 * time.Second)
	for _, done := range waits {
		select {
		case <-done:
		case <-deadline:
			return
		}
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

// reserveAddrs picks n free loopback addresses for the roles to listen on
// and holds them until release. The fault proxies bind 127.0.0.1:0 after
// the reservation, and the kernel may hand them a port just released: the
// role meant for it then fails to bind, the proxy answers in its place,
// and, say, a master's address forwards to a partition server (seed 110's
// CreateTable answered 501: gRPC Unimplemented). Held until every proxy
// listens, a reserved port is given to no proxy.
func reserveAddrs(n int) (addrs []string, release func(), err error) {
	var lns []net.Listener
	release = func() {
		for _, ln := range lns {
			ln.Close()
		}
		lns = nil
	}
	for i := 0; i < n; i++ {
		ln, err := netListen()
		if err != nil {
			release()
			return nil, nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, release, nil
}

// quiesceAfter is the partition servers' --quiesce-after:
// $TABLESTORE_CHAOS_QUIESCE_AFTER, else their default (5 s), which the
// workload's steady writes rarely leave a range idle for. A short one
// (300ms) makes ranges go quiet whenever the writers wait on another
// range, so faults meet quiet replicas: closed answers, votes and stores,
// quiet reads, wakes.
// masterFlags are flags added to every master's command line:
// $TABLESTORE_CHAOS_MASTER_FLAGS, space-separated (e.g. --table-groups,
// which makes the workload's table a span of an anchor group: setup waits
// for one).
func masterFlags() []string { return strings.Fields(os.Getenv("TABLESTORE_CHAOS_MASTER_FLAGS")) }

// tableGroups reports whether the masters run with --table-groups: the
// last such flag in masterFlags, else the master's default (on since
// session 36; --table-groups=false runs the chaos of one group per table).
func tableGroups() bool {
	on := master.DefaultConfig().TableGroups
	for _, f := range masterFlags() {
		name, val, hasVal := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if name != "table-groups" {
			continue
		}
		on = true
		if hasVal {
			on, _ = strconv.ParseBool(val)
		}
	}
	return on
}

func quiesceAfter() string {
	if d := os.Getenv("TABLESTORE_CHAOS_QUIESCE_AFTER"); d != "" {
		return d
	}
	return "5s"
}

// logLevel is the roles' --log-level: $TABLESTORE_CHAOS_LOG_LEVEL, else
// warn (info logs every Raft election of every range, megabytes a seed;
// set it to replay a failed seed with the whole story).
func logLevel() string {
	if l := os.Getenv("TABLESTORE_CHAOS_LOG_LEVEL"); l != "" {
		return l
	}
	return "warn"
}
