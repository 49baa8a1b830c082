package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
)

// fixedRequestID sets x-ms-client-request-id, as SDKs that send one keep it
// across their retries of a request.
type fixedRequestID struct{ id *atomic.Value }

func (p fixedRequestID) Do(req *policy.Request) (*http.Response, error) {
	if id, _ := p.id.Load().(string); id != "" {
		req.Raw().Header.Set("x-ms-client-request-id", id)
	}
	return req.Next()
}

func httpStatus(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestCreateTableRetriedAfterAmbiguousFailure loses the master's answer to
// a committed CreateTable: the front-end's retry of the same request must
// answer 201/204, not 409 TableAlreadyExists. A client's own retry with
// the same x-ms-client-request-id answers its first outcome too (create
// and delete), while another request still gets 409/404; a request that
// reuses an id after its outcome changed is a new one.
func TestCreateTableRetriedAfterAmbiguousFailure(t *testing.T) {
	c := clustertest.Start(t, 1, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := &atomic.Value{}
	opts := &aztables.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: -1} // only the front-end retries
	opts.PerCallPolicies = []policy.Policy{fixedRequestID{id}}
	sc, err := aztables.NewServiceClientFromConnectionString(c.ConnectionString(0), opts)
	if err != nil {
		t.Fatal(err)
	}

	var lost atomic.Int32
	failpoint.Enable("master/create-table/after-commit", func() error {
		if lost.Add(1) == 1 {
			return failpoint.ErrInjected
		}
		return nil
	})
	defer failpoint.Disable("master/create-table/after-commit")
	if _, err := sc.CreateTable(ctx, "ambiguous", nil); err != nil {
		t.Fatalf("create after a lost answer: %v", err)
	}
	if lost.Load() != 1 {
		// The retry is answered from the record, before the point.
		t.Fatalf("the failpoint ran %d times, want once", lost.Load())
	}
	if _, err := sc.NewClient("ambiguous").AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatalf("write to the table: %v", err)
	}
	if _, err := sc.CreateTable(ctx, "ambiguous", nil); httpStatus(err) != http.StatusConflict {
		t.Fatalf("a new create of an existing table: %v, want 409", err)
	}

	steps := []struct {
		op, table, id string
		want          int // 0: success
	}{
		{"create", "withid", "req-1", 0},
		{"create", "withid", "req-1", 0}, // the client's retry
		{"create", "withid", "req-2", http.StatusConflict},
		{"create", "withid", "", http.StatusConflict},
		{"delete", "withid", "req-3", 0},
		{"delete", "withid", "req-3", 0}, // the client's retry
		{"delete", "withid", "req-4", http.StatusNotFound},
	}
	for i, st := range steps {
		id.Store(st.id)
		var err error
		if st.op == "create" {
			_, err = sc.CreateTable(ctx, st.table, nil)
		} else {
			_, err = sc.DeleteTable(ctx, st.table, nil)
		}
		if got := httpStatus(err); got != st.want {
			t.Fatalf("step %d %+v: %v, want status %d", i, st, err, st.want)
		}
	}

	// A client that sends one id for all its requests (Azure takes it
	// for logging only): each create and delete takes effect. Before, the
	// second create was answered 201 from the first's record and created
	// nothing, and the second delete 204 with the table still there.
	id.Store("one-id-for-the-job")
	for i, op := range []string{"create", "delete", "create", "write", "delete", "read"} {
		var err error
		want := 0
		switch op {
		case "create":
			_, err = sc.CreateTable(ctx, "reused", nil)
		case "delete":
			_, err = sc.DeleteTable(ctx, "reused", nil)
		case "write":
			_, err = sc.NewClient("reused").AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil)
		case "read":
			_, err = sc.NewClient("reused").GetEntity(ctx, "p", "r", nil)
			want = http.StatusNotFound
		}
		if got := httpStatus(err); got != want {
			t.Fatalf("reused id, step %d %s: %v, want status %d", i, op, err, want)
		}
	}
}

// TestTablesAcrossFrontends creates and deletes tables through one
// front-end and checks that another, which learns of them only from the
// master's map deltas (and lookups), lists exactly the master's tables
// with continuation, and routes to a new table at once.
func TestTablesAcrossFrontends(t *testing.T) {
	clustertest.BesideOneOther(t)
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 2, DataDir: t.TempDir(), TuneMaster: clustertest.SoleMasterElects})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, b := clustertest.ServiceClient(t, c, 0), clustertest.ServiceClient(t, c, 1)
	const n = 24
	for i := 0; i < n; i++ {
		if _, err := a.CreateTable(ctx, fmt.Sprintf("many%02d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Routing on b right away: a lookup miss fetches the one table.
	if _, err := b.NewClient(fmt.Sprintf("many%02d", n-1)).AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatalf("write through the other front-end: %v", err)
	}
	for i := 0; i < n; i += 5 {
		if _, err := a.DeleteTable(ctx, fmt.Sprintf("many%02d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	list := func(sc *aztables.ServiceClient) (names []string, pages int) {
		top := int32(5)
		pager := sc.NewListTablesPager(&aztables.ListTablesOptions{Top: &top})
		for pager.More() {
			p, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, tp := range p.Tables {
				names = append(names, *tp.Name)
			}
		}
		return names, pages
	}
	var want []string
	for i := 0; i < n; i++ {
		if i%5 != 0 {
			want = append(want, fmt.Sprintf("many%02d", i))
		}
	}
	var got []string
	clustertest.WaitFor(t, 10*time.Second, "the other front-end to list the master's tables", func() bool {
		got, _ = list(b)
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
	if !sort.StringsAreSorted(got) {
		t.Fatalf("not in order: %v", got)
	}
	if names, pages := list(a); fmt.Sprint(names) != fmt.Sprint(want) || pages != (len(want)+4)/5 {
		t.Fatalf("front-end 0 lists %v in %d pages, want %v in %d", names, pages, want, (len(want)+4)/5)
	}
	// The master's whole map agrees, but for its anchors (reserved
	// tables that found shared Raft groups, which no front-end lists).
	m := c.Masters[0].Server.PartitionMap()
	var master []string
	for _, tb := range m.GetTables() {
		if !strings.HasPrefix(tb.GetName(), rangegroup.AnchorPrefix) {
			master = append(master, tb.GetName())
		}
	}
	sort.Strings(master)
	if fmt.Sprint(master) != fmt.Sprint(want) {
		t.Fatalf("master holds %v, want %v", master, want)
	}
}
