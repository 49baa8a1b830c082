package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/frontend"
)

// freeAddrs returns n loopback addresses free right now.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// proc is one role process of TestMetricsPerProcess.
type proc struct {
	name, metrics string
	cmd           *exec.Cmd
	out           *strings.Builder
}

// startRole runs the binary's role with args and --metrics-addr, killed at
// the end of the test.
func startRole(t *testing.T, name, metrics string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, metrics: metrics, out: &strings.Builder{}}
	p.cmd = exec.Command(tablestoreBinary(t), append(args, "--metrics-addr", metrics, "--log-level", "warn")...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

// TestMetricsPerProcess runs the binary as three masters, three partition
// servers and a front-end, each its own process with its own /metrics as
// deployed, and checks what an in-process cluster (one registry for all
// roles) cannot show: exactly one master reports is_leader 1 and the
// cluster's health, the others 0 (so sum() and max() in the rules read the
// leader's), every master exports the map's range count, and each process
// exports its own role's figures and none of the families of the roles it
// does not run (one binary registers them all).
func TestMetricsPerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of processes")
	}
	tablestoreBinary(t)
	dir := t.TempDir()
	const masters, servers = 3, 3
	addrs := freeAddrs(t, masters*3+servers*3+2)
	take := func() string { a := addrs[0]; addrs = addrs[1:]; return a }
	var peers, grpcs []string
	type node struct{ id, grpc, raft, metrics string }
	var ms, ps []node
	for i := range masters {
		n := node{fmt.Sprint("m", i+1), take(), take(), take()}
		ms = append(ms, n)
		peers = append(peers, n.id+"="+n.raft)
		grpcs = append(grpcs, n.grpc)
	}
	for i := range servers {
		ps = append(ps, node{fmt.Sprint("ps", i+1), take(), take(), take()})
	}
	var mprocs, sprocs []*proc
	for _, n := range ms {
		// --table-groups=false: the checks count the map's ranges, one
		// per table; with shared groups the masters also found anchors.
		mprocs = append(mprocs, startRole(t, n.id, n.metrics, "master", "--id", n.id, "--data-dir", filepath.Join(dir, n.id),
			"--grpc-addr", n.grpc, "--raft-addr", n.raft, "--peers", strings.Join(peers, ","), "--server-timeout", "2s", "--table-groups=false"))
	}
	for _, n := range ps {
		sprocs = append(sprocs, startRole(t, n.id, n.metrics, "partitionserver", "--id", n.id, "--data-dir", filepath.Join(dir, n.id),
			"--grpc-addr", n.grpc, "--raft-addr", n.raft, "--masters", strings.Join(grpcs, ","), "--heartbeat-interval", "200ms"))
	}
	fcfg := frontend.DefaultConfig()
	fcfg.HTTPAddr = take()
	fe := startRole(t, "frontend", take(), "frontend", "--http-addr", fcfg.HTTPAddr, "--masters", strings.Join(grpcs, ","))

	// scrapeAll reads every process's page; a process not serving yet is
	// an error for poll to retry.
	scrapeAll := func(ps []*proc) ([]exposition, error) {
		var out []exposition
		for _, p := range ps {
			e, err := tryScrape("http://" + p.metrics + "/metrics")
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			out = append(out, e)
		}
		return out, nil
	}
	poll := func(timeout time.Duration, what string, check func() error) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			err := check()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not so after %v: %v", what, timeout, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// masterHealth checks one leader and every master's figures given the
	// number of ranges in the map.
	masterHealth := func(ranges int) error {
		pages, err := scrapeAll(mprocs)
		if err != nil {
			return err
		}
		var leaders []string
		var errs []error
		for i, e := range pages {
			name := mprocs[i].name
			if len(e["tablestore_master_is_leader"]) != 1 {
				errs = append(errs, fmt.Errorf("%s exports tablestore_master_is_leader %v", name, e["tablestore_master_is_leader"]))
				continue
			}
			leader := e.value("tablestore_master_is_leader", nil) == 1
			if leader {
				leaders = append(leaders, name)
			}
			// The leader's health figures; 0 on followers, so that
			// max() and sum() over the masters read the leader's.
			up, down := 0.0, 0.0
			if leader {
				up = servers
			}
			for _, c := range []struct {
				name  string
				match map[string]string
				want  float64
			}{
				{"tablestore_master_servers", map[string]string{"state": "up"}, up},
				{"tablestore_master_servers", map[string]string{"state": "down"}, down},
				{"tablestore_master_under_replicated_ranges", nil, 0},
				{"tablestore_master_leaderless_ranges", nil, 0},
				{"tablestore_master_ranges", nil, float64(ranges)},
			} {
				if len(e[c.name]) == 0 {
					errs = append(errs, fmt.Errorf("%s exports no %s", name, c.name))
				} else if got := e.value(c.name, c.match); got != c.want {
					errs = append(errs, fmt.Errorf("%s (leader %v): %s%v = %v, want %v", name, leader, c.name, c.match, got, c.want))
				}
			}
			if err := absent(e, "tablestore_partitionserver_requests_total", "tablestore_raftlog_records_total", "tablestore_frontend_requests_total"); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
		if len(leaders) != 1 {
			errs = append(errs, fmt.Errorf("masters reporting is_leader 1: %v, want exactly one", leaders))
		}
		return errors.Join(errs...)
	}
	poll(20*time.Second, "one master leads and counts every server up", func() error { return masterHealth(0) })

	// A table and a few requests through the front-end process.
	name, key := fcfg.Endpoint()
	conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=http://%s/%s;", name, key, fcfg.HTTPAddr, name)
	sc, err := aztables.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	poll(10*time.Second, "the front-end creates a table", func() error {
		_, err := sc.CreateTable(ctx, "perprocess", nil)
		return err
	})
	tc := sc.NewClient("perprocess")
	const writes = 10
	for i := range writes {
		body, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprint(i)})
		if _, err := tc.AddEntity(ctx, body, nil); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	if _, err := tc.GetEntity(ctx, "p", "0", nil); err != nil {
		t.Fatalf("get: %v", err)
	}
	poll(10*time.Second, "every master exports the table's range, the leader a healthy cluster", func() error { return masterHealth(1) })
	poll(10*time.Second, "each process exports its own role's figures", func() error {
		var errs []error
		fp, err := scrapeAll([]*proc{fe})
		if err != nil {
			return err
		}
		if got := fp[0].value("tablestore_frontend_requests_total", map[string]string{"method": "POST", "code": "201"}); got < writes+1 {
			errs = append(errs, fmt.Errorf("frontend: requests_total{POST,201} = %v, want >= %d", got, writes+1))
		}
		// One binary registers every role's families at init; a process
		// serves only its own role's (metricsbridge.RoleSubsystems).
		if err := absent(fp[0], "tablestore_partitionserver_requests_total", "tablestore_raftlog_records_total", "tablestore_master_is_leader", "tablestore_raft_apply_total"); err != nil {
			errs = append(errs, fmt.Errorf("frontend: %w", err))
		}
		pages, err := scrapeAll(sprocs)
		if err != nil {
			return err
		}
		written, leaders, replicas := 0.0, 0.0, 0.0
		for i, e := range pages {
			id := ps[i].id
			written += e.value("tablestore_partitionserver_requests_total", map[string]string{"op": "write", "code": "OK"})
			leaders += e.value("tablestore_partitionserver_leaders", map[string]string{"server": id})
			replicas += e.value("tablestore_partitionserver_replicas", map[string]string{"server": id})
			if e.value("tablestore_raftlog_records_total", nil) < writes {
				errs = append(errs, fmt.Errorf("%s: raftlog_records_total %v, want >= %d (every replica logs every write)", id, e.value("tablestore_raftlog_records_total", nil), writes))
			}
			// Every replica applies the writes: the range group's Raft
			// figures on every server.
			if got := e.value("tablestore_raft_fsm_apply_batch_entries_count", nil); got < 1 {
				errs = append(errs, fmt.Errorf("%s: raft_fsm_apply_batch_entries_count %v, want > 0", id, got))
			}
			if err := absent(e, "tablestore_master_is_leader", "tablestore_frontend_requests_total", "tablestore_router_retries_total"); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
			}
		}
		if written < writes {
			errs = append(errs, fmt.Errorf("partition servers: requests_total{write,OK} summed %v, want >= %d", written, writes))
		}
		if leaders != 1 || replicas != servers {
			errs = append(errs, fmt.Errorf("partition servers: leaders summed %v, replicas %v, want 1 and %d", leaders, replicas, servers))
		}
		return errors.Join(errs...)
	})
}

// absent is an error naming those of names that e lists: families of a
// role the process does not run.
func absent(e exposition, names ...string) error {
	var there []string
	for _, n := range names {
		if _, ok := e[n]; ok {
			there = append(there, n)
		}
	}
	if len(there) > 0 {
		return fmt.Errorf("another role's families listed: %v", there)
	}
	return nil
}
