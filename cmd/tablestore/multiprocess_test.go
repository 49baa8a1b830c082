package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	var out []int
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

type proc struct {
	name string
	cmd  *exec.Cmd
	out  *bytes.Buffer
}

// TestMultiProcessCluster runs the real binary as 3 masters, 3 partition
// servers and 1 front-end and does a round trip through the official SDK.
func TestMultiProcessCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	dir := t.TempDir()
	ps := newProcSet(t, binary(t))
	start := func(name string, args ...string) { ps.start(name, args...) }
	p := freePorts(t, 13)
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(p[i]) }
	var peers, masters []string
	for i := 0; i < 3; i++ {
		peers = append(peers, fmt.Sprintf("m%d=%s", i+1, addr(3+i)))
		masters = append(masters, addr(i))
	}
	for i := 0; i < 3; i++ {
		start(fmt.Sprintf("master%d", i+1), "master",
			"--id", fmt.Sprintf("m%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i+1)),
			"--grpc-addr", addr(i), "--raft-addr", addr(3+i), "--peers", strings.Join(peers, ","), "--log-level", "warn")
	}
	for i := 0; i < 3; i++ {
		start(fmt.Sprintf("ps%d", i+1), "partitionserver",
			"--id", fmt.Sprintf("ps%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("ps%d", i+1)),
			"--grpc-addr", addr(6+i), "--raft-addr", addr(9+i), "--masters", strings.Join(masters, ","), "--log-level", "warn")
	}
	start("frontend", "frontend", "--http-addr", addr(12), "--masters", strings.Join(masters, ","), "--log-level", "warn")

	sdkRoundTrip(t, addr(12), "multiproc")
}

// sdkRoundTrip creates table through the front-end at addr (waiting for
// the cluster to come up), writes 30 entities and reads them back.
func sdkRoundTrip(t *testing.T, addr, table string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=%s;TableEndpoint=http://%s/devstoreaccount1;",
		"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==", addr)
	opts := &aztables.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: 10, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: time.Second}
	sc, err := aztables.NewServiceClientFromConnectionString(conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The front-end listens once it has a map; the masters and servers
	// need a moment to elect and register.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err = sc.CreateTable(ctx, table, nil)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	tc := sc.NewClient(table)
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
