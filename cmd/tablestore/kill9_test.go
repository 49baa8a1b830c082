package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestKill9AllPartitionServers kills the three partition server processes
// with SIGKILL at the same moment while clients write, starts them again
// on their data directories, and checks that every write the SDK saw
// acknowledged is readable with its value.
func TestKill9AllPartitionServers(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	const table = "powercut"
	c := startProcessCluster(t, table)
	tc := c.sc.NewClient(table)

	var mu sync.Mutex
	acked := map[string]int{} // PartitionKey/RowKey -> V
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				pk, rk := fmt.Sprintf("p%02d", (w*7+i)%16), fmt.Sprintf("w%d-%d", w, i)
				body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "V": i})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := tc.UpsertEntity(ctx, body, nil)
				cancel()
				if err != nil {
					continue
				}
				mu.Lock()
				acked[pk+"/"+rk] = i
				mu.Unlock()
				n.Add(1)
			}
		}()
	}
	waitAcks := func(target int64, what string) {
		deadline := time.Now().Add(60 * time.Second)
		for n.Load() < target {
			if time.Now().After(deadline) {
				close(stop)
				t.Fatalf("timed out waiting for %s (%d acknowledged)", what, n.Load())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitAcks(150, "writes before the kill")

	var kills sync.WaitGroup
	for _, pr := range c.servers {
		kills.Add(1)
		go func() { defer kills.Done(); c.kill9(pr) }()
	}
	kills.Wait()
	before := n.Load()
	for _, pr := range c.servers {
		c.run(pr)
	}
	waitAcks(before+50, "writes after the restart")
	close(stop)
	wg.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for key, v := range acked {
		var pk, rk string
		fmt.Sscanf(key, "%3s/%s", &pk, &rk)
		resp, err := tc.GetEntity(ctx, pk, rk, nil)
		if err != nil {
			t.Fatalf("acknowledged %s lost after kill -9 of every partition server: %v", key, err)
		}
		var m map[string]any
		json.Unmarshal(resp.Value, &m)
		if m["V"] != float64(v) {
			t.Fatalf("%s: V = %v, acknowledged %d", key, m["V"], v)
		}
	}
	t.Logf("%d acknowledged writes (%d before the kill) all present", len(acked), before)
}
