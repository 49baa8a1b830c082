package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tablestore/ctl"
)

// TestMultiProcessScaleOutAndDrain is the operator's procedure with the
// roles as separate processes: under a steady write load, a 4th and a 5th
// partition server join and get replicas and leaderships without any
// command; then `tablestore ctl drain ps1` empties the first server. No
// client request fails and every acknowledged write is read back.
func TestMultiProcessScaleOutAndDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	// One Raft group per table: six tables in an anchor group are one
	// unit that moves and leads only whole (a gap of twice its spans), so
	// two new servers could not each get replicas and a leadership;
	// cluster TestGroupBalancedWhole covers balance with shared groups.
	c := startProcessClusterOf(t, "scale0", []string{"--table-groups=false"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const tables = 6
	for i := 1; i < tables; i++ {
		if _, err := c.sc.CreateTable(ctx, fmt.Sprintf("scale%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	var failed atomic.Int64
	var firstErr atomic.Value
	var mu sync.Mutex
	var written []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			table := fmt.Sprintf("scale%d", i%tables)
			body, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprint(i)})
			if _, err := c.sc.NewClient(table).AddEntity(ctx, body, nil); err != nil {
				if failed.Add(1) == 1 {
					firstErr.Store(err.Error())
				}
				continue
			}
			mu.Lock()
			written = append(written, table+"/"+fmt.Sprint(i))
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	ctlRun := func(args ...string) (string, error) {
		out, err := exec.Command(c.bin, append([]string{"ctl", "--master", strings.Join(c.masters, ",")}, args...)...).CombinedOutput()
		return string(out), err
	}
	servers := func() map[string]ctl.Server {
		out, err := ctlRun("--json", "servers")
		if err != nil {
			t.Fatalf("ctl servers: %v\n%s", err, out)
		}
		m := map[string]ctl.Server{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var s ctl.Server
			if json.Unmarshal([]byte(line), &s) == nil {
				m[s.ServerID] = s
			}
		}
		return m
	}
	wait := func(d time.Duration, what string, cond func(map[string]ctl.Server) bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			s := servers()
			if cond(s) {
				return
			}
			if time.Now().After(deadline) {
				close(stop)
				rs, _ := ctlRun("ranges")
				t.Fatalf("timed out after %v waiting for %s: %+v\nranges:\n%s", d, what, s, rs)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	// Scale out: two more servers, no command.
	c.addServer()
	c.addServer()
	wait(2*time.Minute, "ps4 and ps5 to hold replicas and lead ranges", func(s map[string]ctl.Server) bool {
		return s["ps4"].Replicas >= 2 && s["ps5"].Replicas >= 2 && s["ps4"].Leaders >= 1 && s["ps5"].Leaders >= 1
	})

	// Scale in: drain ps1 until it is empty.
	if out, err := ctlRun("drain", "ps1", "--wait", "2m"); err != nil || !strings.Contains(out, "ps1 is drained") {
		close(stop)
		rs, _ := ctlRun("ranges")
		t.Fatalf("ctl drain: %v\n%s\nranges:\n%s", err, out, rs)
	}
	if s := servers()["ps1"]; s.Replicas != 0 || s.Leaders != 0 || !s.Draining {
		t.Fatalf("ps1 after drain: %+v", s)
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d writes failed during scale-out and drain; first: %v", n, firstErr.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range written {
		table, rk, _ := strings.Cut(k, "/")
		if _, err := c.sc.NewClient(table).GetEntity(ctx, "p", rk, nil); err != nil {
			t.Fatalf("acknowledged %s lost: %v", k, err)
		}
	}
	t.Logf("%d writes during scale-out and drain, none failed", len(written))
}
