package reshape

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster/clustertest"
	"tablestore/internal/rangegroup"
	"tablestore/master"
)

// paddedWriter upserts entities of unique keys, each with a pad of
// padBytes, one at a time until halted, and records the acknowledged
// ones as clustertest.Workload does (V as the value clustertest.VerifyExactlyOnce checks): a
// table that grows by bytes, not by load.
type paddedWriter struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	// acked: pk/rk -> V of every acknowledged write.
	acked map[string]int64
}

func startPaddedWriter(t *testing.T, tc *aztables.Client, padBytes int) *paddedWriter {
	w := &paddedWriter{stop: make(chan struct{}), acked: map[string]int64{}}
	pad := strings.Repeat("x", padBytes)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for i := int64(0); ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			pk, rk := fmt.Sprintf("p%d", i%4), fmt.Sprintf("r%06d", i)
			body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "V": fmt.Sprint(i), "V@odata.type": "Edm.Int64", "Pad": pad})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := tc.UpsertEntity(ctx, body, nil)
			cancel()
			if err != nil {
				t.Logf("write %s/%s failed: %v", pk, rk, err)
				continue
			}
			w.mu.Lock()
			w.acked[pk+"/"+rk] = i
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// halt stops the writer and returns the acknowledged entities.
func (w *paddedWriter) halt() map[string]int64 {
	close(w.stop)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// TestLargeTableLeavesAnchorGroup: the byte rule of stage 7, step 7
// (detach-large; docs/range-groups.md). With --table-groups and
// --merge-bytes 256 KiB (the bound a span of an anchor group may grow to:
// homeGroup admits tables only to a group whose spans are all under it),
// three tables created through the front-end share the anchor's Raft
// group. One is written entities of 8 KiB, at a few writes a second (far
// from any load threshold; load splits are off), the other two small
// entities at a few a second. Once the large table's bytes pass the
// bound, its span leaves the group for one of its own (a group-split
// event naming [detach-large]), served so by every replica; the small
// tables stay spans of the anchor's group on every replica; every
// acknowledged write of every table reads back exactly once. Fails
// without the rule: nothing else takes the span out (the wait times out).
func TestLargeTableLeavesAnchorGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, mc, anchor := startTableGroupsTuned(t, func(m *master.Config) {
		m.Policy.MergeBytes = 256 << 10
	})
	sc := clustertest.ServiceClient(t, c, 0)
	names := []string{"large", "small0", "small1"}
	clients, spans := tablesInAnchor(t, c, mc, sc, anchor, names)
	paced := func(w, i int) (string, string) {
		time.Sleep(200 * time.Millisecond)
		return clustertest.SpreadKeys(w, i)
	}
	large := startPaddedWriter(t, clients["large"], 8<<10)
	small := map[string]*clustertest.Workload{}
	for _, n := range names[1:] {
		small[n] = clustertest.StartWorkload(t, clients[n], 1, paced)
	}
	id := spans["large"].GetRangeId()
	clustertest.WaitFor(t, 60*time.Second, "the large table's span out of the anchor's group", func() bool {
		d, ok := rangeByID(clustertest.PartitionMap(t, mc), id)
		return ok && rangegroup.GroupOf(d) != anchor
	})
	time.Sleep(2 * time.Second) // writes go on after it left
	acked := map[string]map[string]int64{"large": large.halt()}
	for _, n := range names[1:] {
		acked[n] = small[n].Halt()
	}
	for _, n := range names {
		if len(acked[n]) == 0 {
			t.Fatalf("table %s: no write acknowledged", n)
		}
		clustertest.VerifyExactlyOnce(t, clients[n], acked[n])
		t.Logf("table %s: %d writes acknowledged", n, len(acked[n]))
	}
	m := clustertest.PartitionMap(t, mc)
	d := spanOf(m, "large")
	if d == nil || d.GetRangeId() != id {
		t.Fatalf("large table after: %v, want its one range %d", clustertest.TableRanges(m, "large"), id)
	}
	checkOneGroup(t, c, d, id)
	checkLeftBy(t, c, mc, m, names[1:], spans, anchor, id, "detach-large")
}
