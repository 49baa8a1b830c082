package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
)

// TestWritesAcrossDeleteAndCreate: inserts run through two front-ends
// while the table is deleted through one and created again through the
// other. Every insert either succeeds or fails 404 (no 5xx while the
// ranges go away); one that ran wholly between the delete's answer and the
// create's start did not succeed; the new table holds no insert that ended
// before the create began (nothing of the first table's), and every
// insert acknowledged that started after the create's answer.
func TestWritesAcrossDeleteAndCreate(t *testing.T) {
	clustertest.BesideOneOther(t)
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 2, DataDir: t.TempDir(), TuneMaster: clustertest.SoleMasterElects})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := clustertest.Context(t, 60*time.Second)
	a, b := clustertest.ServiceClient(t, c, 0), clustertest.ServiceClient(t, c, 1)
	if _, err := a.CreateTable(ctx, "busy", nil); err != nil {
		t.Fatal(err)
	}
	type rec struct {
		rk         string
		start, end time.Time
		status     int
	}
	var mu sync.Mutex
	var recs []rec
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			sc := a
			if w%2 == 1 {
				sc = b
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				rk := fmt.Sprintf("w%d-%05d", w, i)
				body, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": rk})
				s := time.Now()
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := sc.NewClient("busy").AddEntity(cctx, body, nil)
				cancel()
				mu.Lock()
				recs = append(recs, rec{rk, s, time.Now(), httpStatus(err)})
				mu.Unlock()
				if err != nil && httpStatus(err) != http.StatusNotFound {
					t.Errorf("write %s: %v, want success or 404", rk, err)
				}
			}
		}(w)
	}
	time.Sleep(300 * time.Millisecond)
	ds := time.Now()
	if _, err := a.DeleteTable(ctx, "busy", nil); err != nil {
		t.Fatal(err)
	}
	de := time.Now()
	time.Sleep(200 * time.Millisecond)
	cs := time.Now()
	if _, err := b.CreateTable(ctx, "busy", nil); err != nil {
		t.Fatal(err)
	}
	ce := time.Now()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	present := map[string]bool{}
	p := a.NewClient("busy").NewListEntitiesPager(nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entities {
			var m struct{ RowKey string }
			json.Unmarshal(e, &m)
			present[m.RowKey] = true
		}
	}
	counts := map[int]int{}
	for _, r := range recs {
		counts[r.status]++
		if r.status == 0 && r.start.After(ce) && !present[r.rk] {
			t.Errorf("write %s after the re-create acknowledged but missing", r.rk)
		}
		if present[r.rk] && r.end.Before(cs) {
			t.Errorf("write %s ended before the re-create started but is in the new table", r.rk)
		}
		if r.status == 0 && r.start.After(de) && r.end.Before(cs) {
			t.Errorf("write %s ran wholly between delete and create and succeeded", r.rk)
		}
	}
	if counts[0] == 0 || counts[http.StatusNotFound] == 0 {
		t.Errorf("statuses %v: want both successes and 404s", counts)
	}
	t.Logf("statuses %v, %d in the new table, delete took %v, create %v", counts, len(present), de.Sub(ds), ce.Sub(cs))
}
