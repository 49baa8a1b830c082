package cluster_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/logging"
)

type written struct {
	pk, rk string
	n      int64
	etag   azcore.ETag
}

// TestSDKRoundTripWithLeaderFailover is the cluster-core acceptance test:
// 1,000 entities over 20 partitions through the official SDK, the range
// leader killed and restarted in the middle, every acknowledged entity read
// back with its properties and ETag.
func TestSDKRoundTripWithLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.Start(t, 1, 3)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 4*time.Minute)
	const table = "failover"
	tc := clustertest.NewTable(t, sc, table)

	var mu sync.Mutex
	acked := map[string]written{}
	insert := func(i int) {
		pk, rk := fmt.Sprintf("p%02d", i%20), fmt.Sprintf("r%04d", i)
		e := aztables.EDMEntity{
			Entity: aztables.Entity{PartitionKey: pk, RowKey: rk},
			Properties: map[string]any{
				"N":    aztables.EDMInt64(int64(i) * 1_000_000_007),
				"Name": fmt.Sprintf("entity %d", i),
				"When": aztables.EDMDateTime(time.Date(2024, 1, 2, 3, 4, 5, i*100, time.UTC)),
				"F":    float64(i) + 0.5,
				"B":    aztables.EDMBinary([]byte{byte(i), byte(i >> 8)}),
				"OK":   i%2 == 0,
			},
		}
		body, _ := json.Marshal(e)
		resp, err := tc.AddEntity(ctx, body, nil)
		if err != nil {
			var re *azcore.ResponseError
			// A retried insert whose first attempt committed answers 409:
			// the entity is there, but unacknowledged with its ETag.
			if errors.As(err, &re) && re.StatusCode == http.StatusConflict {
				return
			}
			t.Errorf("insert %d: %v", i, err)
			return
		}
		mu.Lock()
		acked[pk+"/"+rk] = written{pk: pk, rk: rk, n: int64(i) * 1_000_000_007, etag: resp.ETag}
		mu.Unlock()
	}
	writeRange := func(from, to int) {
		var wg sync.WaitGroup
		work := make(chan int)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					insert(i)
				}
			}()
		}
		for i := from; i < to; i++ {
			work <- i
		}
		close(work)
		wg.Wait()
	}

	writeRange(0, 400)
	clustertest.WaitFor(t, 10*time.Second, "a reported range leader", func() bool { return clustertest.RangeLeader(c, table) >= 0 })
	leader := clustertest.RangeLeader(c, table)
	t.Logf("stopping range leader ps%d", leader+1)
	if err := c.StopServer(leader); err != nil {
		t.Fatal(err)
	}
	writeRange(400, 700)
	if err := c.RestartServer(leader); err != nil {
		t.Fatal(err)
	}
	writeRange(700, 1000)
	if len(acked) < 990 {
		t.Fatalf("only %d of 1000 inserts acknowledged", len(acked))
	}

	t.Run("point reads", func(t *testing.T) {
		for k, w := range acked {
			resp, err := tc.GetEntity(ctx, w.pk, w.rk, nil)
			if err != nil {
				t.Fatalf("get %s: %v", k, err)
			}
			if resp.ETag != w.etag {
				t.Errorf("%s: ETag %s, want %s", k, resp.ETag, w.etag)
			}
			var got aztables.EDMEntity
			if err := json.Unmarshal(resp.Value, &got); err != nil {
				t.Fatal(err)
			}
			if n, ok := got.Properties["N"].(aztables.EDMInt64); !ok || int64(n) != w.n {
				t.Errorf("%s: N = %#v, want %d", k, got.Properties["N"], w.n)
			}
		}
	})

	t.Run("query every partition in pages", func(t *testing.T) {
		seen := map[string]int{}
		top := int32(77)
		pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top})
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, raw := range page.Entities {
				var e aztables.EDMEntity
				if err := json.Unmarshal(raw, &e); err != nil {
					t.Fatal(err)
				}
				seen[e.PartitionKey+"/"+e.RowKey]++
			}
		}
		for k := range acked {
			if seen[k] != 1 {
				t.Errorf("%s seen %d times in the scan", k, seen[k])
			}
		}
	})

	t.Run("one partition by filter", func(t *testing.T) {
		n, _ := countEntities(t, ctx, tc, "PartitionKey eq 'p07'")
		want := 0
		for _, w := range acked {
			if w.pk == "p07" {
				want++
			}
		}
		if n < want || n > 50 {
			t.Errorf("partition p07: %d entities, want %d (acknowledged) to 50", n, want)
		}
	})
}

// TestDevRestartServesOldData stops the whole cluster and starts it again on
// the same data directory.
func TestRestartServesOldData(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	dir := t.TempDir()
	// Fixed ports: the Raft configurations name them, so a restart must
	// reuse them.
	opts := cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: dir, Logger: logging.FromEnv(""), BasePort: clustertest.FreeBasePort(t), TuneMaster: clustertest.SoleMasterElects}
	c, err := cluster.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, time.Minute)
	if _, err := sc.CreateTable(ctx, "persist", nil); err != nil {
		t.Fatal(err)
	}
	tc := sc.NewClient("persist")
	etags := map[string]azcore.ETag{}
	for i := 0; i < 50; i++ {
		body, _ := json.Marshal(map[string]any{"PartitionKey": fmt.Sprintf("p%d", i%4), "RowKey": fmt.Sprint(i), "V": i})
		resp, err := tc.AddEntity(ctx, body, nil)
		if err != nil {
			t.Fatal(err)
		}
		etags[fmt.Sprintf("p%d/%d", i%4, i)] = resp.ETag
	}
	c.Close()

	c2, err := cluster.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	tc2 := clustertest.ServiceClient(t, c2, 0).NewClient("persist")
	for k, et := range etags {
		var pk, rk string
		fmt.Sscanf(k, "%2s/%s", &pk, &rk)
		resp, err := tc2.GetEntity(ctx, pk, rk, nil)
		if err != nil {
			t.Fatalf("get %s after restart: %v", k, err)
		}
		if resp.ETag != et {
			t.Errorf("%s: ETag changed across restart", k)
		}
	}
}
