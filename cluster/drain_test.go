package cluster_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/ctl"
	"tablestore/master"
)

// TestScaleOutAndDrain adds a server under load (it gets replicas and
// leaderships without any command), then drains another with `ctl drain`
// (it ends empty and marked, nothing new is placed on it), with no failed
// client request throughout.
func TestScaleOutAndDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c, err := cluster.Start(cluster.Options{
		Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(),
		TuneMaster: func(cfg *master.Config) {
			clustertest.SoleMasterElects(cfg)
			cfg.Policy.SplitLoad = 1e9 // no load splits: this test is about placement
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 4*time.Minute)
	const tables = 8
	for i := 0; i < tables; i++ {
		if _, err := sc.CreateTable(ctx, fmt.Sprintf("drain%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	// A steady writer over every table; every acknowledged key is read
	// back at the end.
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
			table := fmt.Sprintf("drain%d", i%tables)
			body, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprint(i)})
			if _, err := sc.NewClient(table).AddEntity(ctx, body, nil); err != nil {
				if failed.Add(1) == 1 {
					firstErr.Store(err.Error())
				}
				continue
			}
			mu.Lock()
			written = append(written, table+"/"+fmt.Sprint(i))
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	servers := func() map[string]ctl.Server {
		var out bytes.Buffer
		if err := ctl.RunContext(ctx, []string{"--master", strings.Join(c.MasterAddrs(), ","), "--json", "servers"}, &out, &out); err != nil {
			t.Fatalf("ctl servers: %v\n%s", err, out.String())
		}
		m := map[string]ctl.Server{}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var s ctl.Server
			if err := json.Unmarshal([]byte(line), &s); err != nil {
				t.Fatalf("ctl servers: %v: %q", err, line)
			}
			m[s.ServerID] = s
		}
		return m
	}

	// Scale out: ps4 joins and gets replicas and leaderships by itself.
	if _, err := c.AddServer(); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 90*time.Second, "ps4 to hold replicas and lead some", func() bool {
		s := servers()["ps4"]
		return s.Replicas >= tables*3/4-1 && s.Leaders >= 1
	})

	// Drain ps1: it ends with nothing, and stays marked.
	var out bytes.Buffer
	if err := ctl.RunContext(ctx, []string{"--master", strings.Join(c.MasterAddrs(), ","), "drain", "ps1", "--wait", "2m"}, &out, &out); err != nil {
		var ranges bytes.Buffer
		ctl.RunContext(ctx, []string{"--master", strings.Join(c.MasterAddrs(), ","), "ranges"}, &ranges, &ranges)
		t.Fatalf("ctl drain: %v\n%s\nranges:\n%s", err, out.String(), ranges.String())
	}
	if !strings.Contains(out.String(), "ps1 is drained") {
		t.Fatalf("ctl drain output:\n%s", out.String())
	}
	s := servers()["ps1"]
	if s.Replicas != 0 || s.Leaders != 0 || !s.Draining {
		t.Fatalf("ps1 after drain: %+v", s)
	}
	// Nothing new is placed on a draining server.
	if _, err := sc.CreateTable(ctx, "afterdrain", nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if s := servers()["ps1"]; s.Replicas != 0 {
		t.Fatalf("a new table was placed on the draining ps1: %+v", s)
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
		if _, err := sc.NewClient(table).GetEntity(ctx, "p", rk, nil); err != nil {
			t.Fatalf("acknowledged %s lost: %v", k, err)
		}
	}
	t.Logf("%d writes, none failed", len(written))
}
