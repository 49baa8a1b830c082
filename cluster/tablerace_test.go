package cluster

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

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
	c, err := Start(Options{Masters: 1, Servers: 3, Frontends: 2, DataDir: t.TempDir(), TuneMaster: soleMasterElects})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := ctxT(t, 60*time.Second)
	a, b := serviceClient(t, c, 0), serviceClient(t, c, 1)
	held := func(name string) bool {
		tables, err := c.Frontends[0].Router.Tables(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(tables, func(tb *pb.Table) bool { return tb.GetName() == name })
	}
	listed := func(sc *aztables.ServiceClient, name string) bool {
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
				waitFor(t, 10*time.Second, "front-end 0 to hold the new table", func() bool { return held(tc.name) })
				if _, err := b.DeleteTable(context.Background(), tc.name, nil); err != nil {
					t.Errorf("delete through front-end 1: %v", err)
				}
				waitFor(t, 10*time.Second, "front-end 0 to drop the deleted table", func() bool { return !held(tc.name) })
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
