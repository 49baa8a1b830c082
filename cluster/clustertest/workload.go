package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// Workload writes (and reads back) entities through the SDK in the
// background for as long as a test reshapes the cluster, and remembers
// every acknowledged write.
type Workload struct {
	t     testing.TB
	tc    *aztables.Client
	keys  func(w, i int) (pk, rk string)
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked map[string]int64 // pk/rk -> value
	// Failed and Written count the writes that failed and those
	// acknowledged.
	Failed  atomic.Int64
	Written atomic.Int64
	// MaxGap is the longest time between two acknowledged writes of one
	// worker: the write pause a client saw.
	MaxGap atomic.Int64
}

// StartWorkload starts workers writers of tc, worker w writing its i-th
// entity at keys(w, i), until Halt.
func StartWorkload(t testing.TB, tc *aztables.Client, workers int, keys func(w, i int) (pk, rk string)) *Workload {
	w := &Workload{t: t, tc: tc, keys: keys, stop: make(chan struct{}), acked: map[string]int64{}}
	for n := 0; n < workers; n++ {
		w.wg.Add(1)
		go w.run(n)
	}
	return w
}

// run is writer n's loop.
func (w *Workload) run(n int) {
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
			w.Failed.Add(1)
			w.t.Logf("write %s/%s failed: %v", pk, rk, err)
			continue
		}
		now := time.Now()
		if gap := now.Sub(last); int64(gap) > w.MaxGap.Load() {
			w.MaxGap.Store(int64(gap))
		}
		last = now
		w.Written.Add(1)
		w.mu.Lock()
		w.acked[pk+"/"+rk] = v
		w.mu.Unlock()
	}
}

// Halt stops the writers and returns the acknowledged entities.
func (w *Workload) Halt() map[string]int64 {
	close(w.stop)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// VerifyExactlyOnce reads the whole table with small pages and checks that
// every acknowledged entity is there exactly once with its last value, and
// that point reads agree.
func VerifyExactlyOnce(t testing.TB, tc *aztables.Client, acked map[string]int64) {
	t.Helper()
	ctx := Context(t, 2*time.Minute)
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

// SpreadKeys spreads writer w's entities over the partitions k00..k25,
// each writer on its own row keys.
func SpreadKeys(w, i int) (string, string) {
	return fmt.Sprintf("k%02d", (w*7+i)%26), fmt.Sprintf("w%d-%06d", w, i)
}

// WriteSeq upserts n entities spread over the keys k00..k25, each within a
// bounded time, and records them in acked.
func WriteSeq(t testing.TB, tc *aztables.Client, acked map[string]int64, tag string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		pk, rk := fmt.Sprintf("k%02d", i%26), fmt.Sprintf("%s-%04d", tag, i)
		if err := WriteOne(tc, acked, pk, rk, 20*time.Second); err != nil {
			t.Fatalf("write %s/%s: %v", pk, rk, err)
		}
	}
}

// WriteOne upserts one entity with the next sequence number as its value,
// within timeout, and records it in acked once acknowledged.
func WriteOne(tc *aztables.Client, acked map[string]int64, pk, rk string, timeout time.Duration) error {
	v := int64(len(acked) + 1)
	body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "V": fmt.Sprint(v), "V@odata.type": "Edm.Int64"})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := tc.UpsertEntity(ctx, body, nil); err != nil {
		return err
	}
	acked[pk+"/"+rk] = v
	return nil
}
