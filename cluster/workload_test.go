package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/internal/masterclient"
	pb "tablestore/proto/tablestorepb"
)

// workload writes (and reads back) entities through the SDK in the
// background for as long as a test reshapes the cluster, and remembers
// every acknowledged write.
type workload struct {
	t       *testing.T
	tc      *aztables.Client
	keys    func(w, i int) (pk, rk string)
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	acked   map[string]int64 // pk/rk -> value
	failed  atomic.Int64
	written atomic.Int64
	// maxGap is the longest time between two acknowledged writes of one
	// worker: the write pause a client saw.
	maxGap atomic.Int64
}

func startWorkload(t *testing.T, tc *aztables.Client, workers int, keys func(w, i int) (pk, rk string)) *workload {
	w := &workload{t: t, tc: tc, keys: keys, stop: make(chan struct{}), acked: map[string]int64{}}
	for n := 0; n < workers; n++ {
		w.wg.Add(1)
		go w.run(n)
	}
	return w
}

func (w *workload) run(n int) {
	defer w.wg.Done()
	last := time.Now()
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		default:
		}
		pk, rk := w.keys(n, i)
		v := int64(n)<<32 | int64(i)
		body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "V": fmt.Sprint(v), "V@odata.type": "Edm.Int64"})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := w.tc.UpsertEntity(ctx, body, nil)
		cancel()
		if err != nil {
			w.failed.Add(1)
			w.t.Logf("write %s/%s failed: %v", pk, rk, err)
			continue
		}
		now := time.Now()
		if gap := now.Sub(last); int64(gap) > w.maxGap.Load() {
			w.maxGap.Store(int64(gap))
		}
		last = now
		w.written.Add(1)
		w.mu.Lock()
		w.acked[pk+"/"+rk] = v
		w.mu.Unlock()
	}
}

// halt stops the writers and returns the acknowledged entities.
func (w *workload) halt() map[string]int64 {
	close(w.stop)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// verifyExactlyOnce reads the whole table with small pages and checks that
// every acknowledged entity is there exactly once with its last value, and
// that point reads agree.
func verifyExactlyOnce(t *testing.T, tc *aztables.Client, acked map[string]int64) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	seen := map[string]int{}
	top := int32(37)
	pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		for _, raw := range page.Entities {
			var e aztables.EDMEntity
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			k := e.PartitionKey + "/" + e.RowKey
			seen[k]++
			if want, ok := acked[k]; ok {
				if got, _ := e.Properties["V"].(aztables.EDMInt64); int64(got) != want {
					t.Errorf("%s: V = %d, want %d", k, got, want)
				}
			}
		}
	}
	for k := range acked {
		if seen[k] != 1 {
			t.Errorf("%s seen %d times in the scan, want 1", k, seen[k])
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s seen %d times", k, n)
		}
	}
	n := 0
	for k, want := range acked {
		if n++; n > 300 {
			break
		}
		var pk, rk string
		for i := 0; i < len(k); i++ {
			if k[i] == '/' {
				pk, rk = k[:i], k[i+1:]
				break
			}
		}
		resp, err := tc.GetEntity(ctx, pk, rk, nil)
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		var e aztables.EDMEntity
		json.Unmarshal(resp.Value, &e)
		if got, _ := e.Properties["V"].(aztables.EDMInt64); int64(got) != want {
			t.Errorf("get %s: V = %d, want %d", k, got, want)
		}
	}
}

// masterClient returns a client of the cluster's masters.
func masterClient(t *testing.T, c *Cluster) *masterclient.Client {
	mc, err := masterclient.New(c.MasterAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Close() })
	return mc
}

func partitionMap(t *testing.T, mc *masterclient.Client) *pb.PartitionMap {
	t.Helper()
	m, err := getPartitionMap(context.Background(), mc)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func tableRanges(m *pb.PartitionMap, table string) []*pb.RangeDescriptor {
	var out []*pb.RangeDescriptor
	for _, r := range m.GetRanges() {
		if r.GetTable() == table {
			out = append(out, r)
		}
	}
	return out
}

func isStatus(err error, code int) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == code
}

var _ = http.StatusServiceUnavailable
