package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// handedPorts are the ports freePorts and claimPort gave in this test
// binary: the kernel may give a port just closed again, and two processes
// of one test on one port fail to start (master/members_test.go's
// freeAddr: CI's first run of TestReplaceMaster got a duplicate address).
var handedPorts = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePorts returns n loopback ports free now and never handed out before
// in this test binary.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	handedPorts.Lock()
	defer handedPorts.Unlock()
	// Every probe stays open until the end, the refused ones too, so the
	// kernel does not offer them again meanwhile.
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var out []int
	for len(out) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		if p := ln.Addr().(*net.TCPAddr).Port; !handedPorts.ports[p] {
			handedPorts.ports[p] = true
			out = append(out, p)
		}
	}
	return out
}

// claimPort hands out port p when it is free now and was not handed out
// before in this test binary (a port a test picks itself, next to one
// freePorts gave).
func claimPort(p int) bool {
	handedPorts.Lock()
	defer handedPorts.Unlock()
	if handedPorts.ports[p] {
		return false
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	ln.Close()
	handedPorts.ports[p] = true
	return true
}

type proc struct {
	name string
	args []string
	cmd  *exec.Cmd
	out  *bytes.Buffer
}

// processCluster is the real binary running as 3 masters, 3 partition
// servers and 1 front-end, each its own process.
type processCluster struct {
	t       *testing.T
	bin     string
	procs   []*proc
	servers []*proc // the partition servers
	masters []string
	dir     string   // data directories live under it
	extra   []string // flags every process gets
	sc      *aztables.ServiceClient
}

func (c *processCluster) start(name string, args ...string) *proc {
	pr := &proc{name: name, args: args}
	c.run(pr)
	c.procs = append(c.procs, pr)
	return pr
}

func (c *processCluster) run(pr *proc) {
	pr.out = &bytes.Buffer{}
	pr.cmd = exec.Command(c.bin, pr.args...)
	pr.cmd.Stdout, pr.cmd.Stderr = pr.out, pr.out
	if err := pr.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
}

// kill9 kills a process with SIGKILL and reaps it.
func (c *processCluster) kill9(pr *proc) {
	pr.cmd.Process.Signal(syscall.SIGKILL)
	pr.cmd.Wait()
}

// addServer starts one more partition server process (ps4, ps5, ...) on
// free ports, registered with the same masters.
func (c *processCluster) addServer() *proc {
	c.t.Helper()
	i := len(c.servers) + 1
	p := freePorts(c.t, 2)
	pr := c.start(fmt.Sprintf("ps%d", i), append([]string{"partitionserver",
		"--id", fmt.Sprintf("ps%d", i), "--data-dir", filepath.Join(c.dir, fmt.Sprintf("ps%d", i)),
		"--grpc-addr", "127.0.0.1:" + strconv.Itoa(p[0]), "--raft-addr", "127.0.0.1:" + strconv.Itoa(p[1]),
		"--masters", strings.Join(c.masters, ","), "--log-level", "warn"}, c.extra...)...)
	c.servers = append(c.servers, pr)
	return pr
}

// startProcessCluster builds the binary, starts the processes (each with
// extra appended to its flags) and waits until table can be created
// through the SDK.
func startProcessCluster(t *testing.T, table string, extra ...string) *processCluster {
	return startProcessClusterOf(t, table, nil, extra...)
}

// startProcessClusterOf is startProcessCluster with masterExtra appended
// to the masters' flags only (after extra).
func startProcessClusterOf(t *testing.T, table string, masterExtra []string, extra ...string) *processCluster {
	dir := t.TempDir()
	c := &processCluster{t: t, bin: binary(t)}
	p := freePorts(t, 13)
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(p[i]) }
	var peers, masters []string
	for i := 0; i < 3; i++ {
		peers = append(peers, fmt.Sprintf("m%d=%s", i+1, addr(3+i)))
		masters = append(masters, addr(i))
	}
	t.Cleanup(c.stopAll)
	for i := 0; i < 3; i++ {
		c.start(fmt.Sprintf("master%d", i+1), append([]string{"master",
			"--id", fmt.Sprintf("m%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i+1)),
			"--grpc-addr", addr(i), "--raft-addr", addr(3 + i), "--peers", strings.Join(peers, ","), "--log-level", "warn"}, slices.Concat(extra, masterExtra)...)...)
	}
	for i := 0; i < 3; i++ {
		c.servers = append(c.servers, c.start(fmt.Sprintf("ps%d", i+1), append([]string{"partitionserver",
			"--id", fmt.Sprintf("ps%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("ps%d", i+1)),
			"--grpc-addr", addr(6 + i), "--raft-addr", addr(9 + i), "--masters", strings.Join(masters, ","), "--log-level", "warn"}, extra...)...))
	}
	c.start("frontend", append([]string{"frontend", "--http-addr", addr(12), "--masters", strings.Join(masters, ","), "--log-level", "warn"}, extra...)...)
	c.masters, c.dir, c.extra = masters, dir, extra

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=%s;TableEndpoint=http://%s/devstoreaccount1;",
		"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==", addr(12))
	opts := &aztables.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: 10, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: time.Second}
	var err error
	if c.sc, err = aztables.NewServiceClientFromConnectionString(conn, opts); err != nil {
		t.Fatal(err)
	}
	// The front-end listens once it has a map; the masters and servers
	// need a moment to elect and register.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err = c.sc.CreateTable(ctx, table, nil)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	return c
}

// TestMultiProcessCluster runs the real binary as 3 masters, 3 partition
// servers and 1 front-end and does a round trip through the official SDK.
func TestMultiProcessCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	c := startProcessCluster(t, "multiproc")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tc := c.sc.NewClient("multiproc")
	for i := 0; i < 30; i++ {
		body, _ := json.Marshal(map[string]any{"PartitionKey": fmt.Sprintf("p%d", i%3), "RowKey": fmt.Sprint(i), "V": i})
		if _, err := tc.AddEntity(ctx, body, nil); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	for i := 0; i < 30; i++ {
		resp, err := tc.GetEntity(ctx, fmt.Sprintf("p%d", i%3), fmt.Sprint(i), nil)
		if err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		var m map[string]any
		json.Unmarshal(resp.Value, &m)
		if m["V"] != float64(i) {
			t.Errorf("entity %d: V = %v", i, m["V"])
		}
	}
}

// stopAll ends every process of the cluster (SIGTERM, then SIGKILL after
// 10 s) and, when the test failed, logs their output.
func (c *processCluster) stopAll() {
	for _, pr := range c.procs {
		pr.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, pr := range c.procs {
		done := make(chan struct{})
		go func() { pr.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			pr.cmd.Process.Kill()
			<-done
		}
		if c.t.Failed() {
			c.t.Logf("--- %s output:\n%s", pr.name, pr.out.String())
		}
	}
}
