package reshape

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
	"tablestore/master"
)

// TestRacingCreatesKeepTheSpanCap: with --table-group-spans 3 (an anchor
// and two tables), twelve tables created at once through the front-end
// all pass homeGroup's count before any of them is added; the groups'
// applies refuse the adds past the cap, and the master detaches each
// refused table into a group of its own. No Raft group of the map serves
// more than three ranges, every table is one range, and each takes a
// write that reads back. Before, every create that read the count before
// the others' commits joined the group, which grew past the cap.
// (Each refused table's detach is an event with cause table-group-full.)
func TestRacingCreatesKeepTheSpanCap(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const maxSpans = 3
	c := clustertest.StartTuned(t, 3, func(m *master.Config) {
		m.TableGroups = true
		m.TableGroupSpans = maxSpans
		m.Policy.SplitLoad = 1e9
	}, nil)
	mc := clustertest.MasterClient(t, c)
	clustertest.WaitFor(t, 20*time.Second, "an anchor group with a leader, started", func() bool {
		m := clustertest.PartitionMap(t, mc)
		for _, r := range m.GetRanges() {
			if strings.HasPrefix(r.GetTable(), "_groups/") && m.GetLeaders()[r.GetRangeId()] != "" {
				return true
			}
		}
		return false
	})
	sc := clustertest.ServiceClient(t, c, 0)
	// One table first, until one lands in an anchor group (the anchor
	// takes tables once every server reports its replica).
	n := 0
	clustertest.WaitFor(t, 20*time.Second, "a table created in an anchor's group", func() bool {
		name := fmt.Sprintf("warmup%d", n)
		n++
		clustertest.NewTable(t, sc, name)
		d := spanOf(clustertest.PartitionMap(t, mc), name)
		return d != nil && rangegroup.GroupOf(d) != d.GetRangeId()
	})
	// Every create reads homeGroup's count, then waits before its commit
	// (the failpoint widens that window): all of them pass the count.
	failpoint.Enable("master/create-table/before-commit", func() error {
		time.Sleep(300 * time.Millisecond)
		return nil
	})
	const tables = 12
	var wg sync.WaitGroup
	errs := make(chan error, tables)
	for i := range tables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := sc.CreateTable(ctx, fmt.Sprintf("racing%02d", i), nil); err != nil {
				errs <- fmt.Errorf("create racing%02d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	failpoint.Disable("master/create-table/before-commit")
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m := clustertest.PartitionMap(t, mc)
	for g, spans := range rangegroup.GroupSpans(m.GetRanges()) {
		if spans > maxSpans {
			t.Errorf("group %d serves %d ranges, over the cap of %d", g, spans, maxSpans)
		}
	}
	grouped := 0
	for i := range tables {
		name := fmt.Sprintf("racing%02d", i)
		d := spanOf(m, name)
		if d == nil {
			t.Fatalf("table %s has no single range", name)
		}
		if rangegroup.GroupOf(d) != d.GetRangeId() {
			grouped++
		}
		tc := sc.NewClient(name)
		if _, err := tc.AddEntity(clustertest.Context(t, 30*time.Second), []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
			t.Fatalf("write to %s: %v", name, err)
		}
		if _, err := tc.GetEntity(clustertest.Context(t, 30*time.Second), "p", "r", &aztables.GetEntityOptions{}); err != nil {
			t.Fatalf("read from %s: %v", name, err)
		}
	}
	t.Logf("%d of %d racing tables in shared groups", grouped, tables)
	if grouped == 0 {
		t.Fatal("no racing table joined a shared group: the race was not run")
	}
	full := 0
	for _, e := range clustertest.MasterEvents(mc) {
		if e.GetCause() == "table-group-full" {
			full++
		}
	}
	if full == 0 {
		t.Fatal("no table was refused by a full group and detached: the cap was not reached")
	}
	t.Logf("%d tables refused by a full group and detached", full)
}
