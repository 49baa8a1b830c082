package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	pb "tablestore/proto/tablestorepb"
)

// TestCreateAnswerAfterDeleteLeavesNoGhost: a table deleted (through
// another front-end) while its CreateTable is still being answered, after
// the creating front-end's map watch already brought it the deletion. The
// create answers success (it did create the table), but the creating
// front-end must not hold the deleted table: before, it put the answer's
// table into its map unconditionally, after the watch's deletion, and
// listed it (and GET /Tables('t') found it) until the next change of that
// name, which may never come. Both ways to get there: the answer is late
// (the master starts the deleted table's range), or it was lost and the
// front-end's retry is answered from the request record.
func TestCreateAnswerAfterDeleteLeavesNoGhost(t *testing.T) {
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 2, DataDir: t.TempDir(), TuneMaster: clustertest.SoleMasterElects})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := clustertest.Context(t, 60*time.Second)
	a, b := clustertest.ServiceClient(t, c, 0), clustertest.ServiceClient(t, c, 1)
	held := func(name string) bool { return frontendHolds(ctx, t, c, 0, name) }
	listed := func(sc *aztables.ServiceClient, name string) bool { return tableListed(ctx, t, sc, name) }
	for _, tc := range []struct {
		name string
		lose error // the failpoint's answer after the delete: nil (late) or lost
	}{
		{"ghostlate", nil},
		{"ghostlost", failpoint.ErrInjected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			failpoint.Enable("master/create-table/after-commit", func() error {
				if calls.Add(1) != 1 {
					return nil
				}
				// Front-end 0's watch delivers the table, then its deletion.
				clustertest.WaitFor(t, 10*time.Second, "front-end 0 to hold the new table", func() bool { return held(tc.name) })
				if _, err := b.DeleteTable(context.Background(), tc.name, nil); err != nil {
					t.Errorf("delete through front-end 1: %v", err)
				}
				clustertest.WaitFor(t, 10*time.Second, "front-end 0 to drop the deleted table", func() bool { return !held(tc.name) })
				return tc.lose
			})
			defer failpoint.Disable("master/create-table/after-commit")
			if _, err := a.CreateTable(ctx, tc.name, nil); err != nil {
				t.Fatalf("create: %v", err)
			}
			if listed(b, tc.name) {
				t.Fatalf("front-end 1 lists deleted table %s", tc.name)
			}
			if listed(a, tc.name) {
				t.Fatalf("front-end 0 lists deleted table %s after its create's answer", tc.name)
			}
		})
	}
}

// TestConcurrentCreatesOneWins: eight clients on two front-ends create the
// same table at once, in different letter cases. Exactly one gets 201, the
// others 409 TableAlreadyExists; both front-ends list the one table, in
// the winner's case, and it takes writes.
func TestConcurrentCreatesOneWins(t *testing.T) {
	clustertest.BesideOneOther(t)
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 2, DataDir: t.TempDir(), TuneMaster: clustertest.SoleMasterElects})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := clustertest.Context(t, 60*time.Second)
	clients := []*aztables.ServiceClient{clustertest.ServiceClient(t, c, 0), clustertest.ServiceClient(t, c, 1)}
	names := []string{"Race", "race", "RACE", "rAcE"}
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, errs[i] = clients[i%2].CreateTable(ctx, names[i%len(names)], nil)
		}(i)
	}
	wg.Wait()
	winner := ""
	for i, err := range errs {
		if err == nil {
			if winner != "" {
				t.Fatalf("two creates succeeded: %s and %s", winner, names[i%len(names)])
			}
			winner = names[i%len(names)]
			continue
		}
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusConflict || re.ErrorCode != "TableAlreadyExists" {
			t.Fatalf("create %d: %v, want 409 TableAlreadyExists", i, err)
		}
	}
	if winner == "" {
		t.Fatal("no create succeeded")
	}
	for i, sc := range clients {
		var got []string
		p := sc.NewListTablesPager(&aztables.ListTablesOptions{Filter: to.Ptr("TableName ge 'R' and TableName lt 's'")})
		for p.More() {
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, tb := range page.Tables {
				got = append(got, *tb.Name)
			}
		}
		if len(got) != 1 || got[0] != winner {
			t.Fatalf("front-end %d lists %v, want [%s]", i, got, winner)
		}
		if _, err := sc.NewClient(names[i]).AddEntity(ctx, []byte(fmt.Sprintf(`{"PartitionKey":"p","RowKey":"%d"}`, i)), nil); err != nil {
			t.Fatalf("write through front-end %d as %s: %v", i, names[i], err)
		}
	}
}

// frontendHolds reports whether front-end fe's map lists table name.
func frontendHolds(ctx context.Context, t *testing.T, c *cluster.Cluster, fe int, name string) bool {
	t.Helper()
	tables, err := c.Frontends[fe].Router.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(tables, func(tb *pb.Table) bool { return tb.GetName() == name })
}

// tableListed reports whether Query Tables through sc lists table name.
func tableListed(ctx context.Context, t *testing.T, sc *aztables.ServiceClient, name string) bool {
	t.Helper()
	p := sc.NewListTablesPager(&aztables.ListTablesOptions{Filter: to.Ptr("TableName eq '" + name + "'")})
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Tables) > 0 {
			return true
		}
	}
	return false
}
