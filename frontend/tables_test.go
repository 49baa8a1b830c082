package frontend

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/frontend/auth"
	pb "tablestore/proto/tablestorepb"
)

// listerBackend is the fake with the ordered walk the router has
// (TableLister); the bare fake exercises the fallback over Tables.
type listerBackend struct{ *fakeBackend }

func (l listerBackend) TablesFrom(ctx context.Context, from string, fn func(*pb.Table) bool) error {
	all, err := l.Tables(ctx)
	if err != nil {
		return err
	}
	i, _ := slices.BinarySearchFunc(all, from, func(t *pb.Table, name string) int { return strings.Compare(t.GetName(), name) })
	for _, t := range all[i:] {
		if !fn(t) {
			break
		}
	}
	return nil
}

// TestQueryTablesPages lists more than 1,000 tables through the SDK, for
// two accounts whose tables interleave with a third's in the cluster's
// namespace, with the default page (1,000) and with $top and $filter: every
// table once, in order, in pages of at most the page size, nothing of
// another account.
func TestQueryTablesPages(t *testing.T) {
	const otherKey = "c29sb2tleQ=="
	fb := newFakeBackend()
	ctx := context.Background()
	var primary, other []string
	for i := 0; i < 2100; i++ {
		n := fmt.Sprintf("t%04d", i)
		primary = append(primary, n)
		fb.CreateTable(ctx, n)
	}
	for i := 0; i < 1100; i++ {
		n := fmt.Sprintf("b%04d", i)
		other = append(other, n)
		fb.CreateTable(ctx, "acctb/"+n)
		// A third account's tables sort between and around them.
		fb.CreateTable(ctx, fmt.Sprintf("accta/x%04d", i))
		fb.CreateTable(ctx, fmt.Sprintf("acctc/b%04d", i))
	}
	backends := map[string]Backend{"walk": listerBackend{fb}, "fallback": fb}
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Accounts = auth.DevAccountName + ":" + auth.DevAccountKey + ";acctb:" + otherKey
			s, err := NewServer(cfg, b, nil)
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(s.Handler())
			defer ts.Close()
			client := func(account, key string) *aztables.ServiceClient {
				cred, err := aztables.NewSharedKeyCredential(account, key)
				if err != nil {
					t.Fatal(err)
				}
				opts := &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}, Transport: ts.Client()}}
				sc, err := aztables.NewServiceClientWithSharedKey(ts.URL+"/"+account, cred, opts)
				if err != nil {
					t.Fatal(err)
				}
				return sc
			}
			dev, acctb := client(auth.DevAccountName, auth.DevAccountKey), client("acctb", otherKey)
			tests := []struct {
				name      string
				sc        *aztables.ServiceClient
				opts      aztables.ListTablesOptions
				want      []string
				wantPages int
			}{
				{"primary, default pages", dev, aztables.ListTablesOptions{}, primary, 3},
				{"other account, default pages", acctb, aztables.ListTablesOptions{}, other, 2},
				{"primary, $top", dev, aztables.ListTablesOptions{Top: to.Ptr[int32](7), Filter: to.Ptr("TableName ge 't0100' and TableName lt 't0120'")}, primary[100:120], 3},
				{"other account, $top", acctb, aztables.ListTablesOptions{Top: to.Ptr[int32](400), Filter: to.Ptr("TableName ge 'b1000'")}, other[1000:], 1},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					pager := tc.sc.NewListTablesPager(&tc.opts)
					var got []string
					pages, limit := 0, MaxPageSize
					if tc.opts.Top != nil {
						limit = int(*tc.opts.Top)
					}
					for pager.More() {
						p, err := pager.NextPage(ctx)
						if err != nil {
							t.Fatal(err)
						}
						pages++
						if len(p.Tables) > limit {
							t.Fatalf("page %d holds %d tables, more than %d", pages, len(p.Tables), limit)
						}
						for _, tp := range p.Tables {
							got = append(got, *tp.Name)
						}
					}
					if !slices.Equal(got, tc.want) {
						t.Fatalf("listed %d tables (%.60v…), want %d (%.60v…)", len(got), got, len(tc.want), tc.want)
					}
					if pages != tc.wantPages {
						t.Fatalf("%d pages, want %d", pages, tc.wantPages)
					}
				})
			}
		})
	}
}

// TestQueryTablesPageSize pages at the internal page size knob without
// $top, the way a 1,000-table page ends.
func TestQueryTablesPageSize(t *testing.T) {
	fb := newFakeBackend()
	ctx := context.Background()
	for i := 0; i < 25; i++ {
		fb.CreateTable(ctx, fmt.Sprintf("k%02d", i))
	}
	s, err := NewServer(DefaultConfig(), listerBackend{fb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.tablePage = 10
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	cred, _ := aztables.NewSharedKeyCredential(auth.DevAccountName, auth.DevAccountKey)
	sc, err := aztables.NewServiceClientWithSharedKey(ts.URL+"/"+auth.DevAccountName, cred,
		&aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}, Transport: ts.Client()}})
	if err != nil {
		t.Fatal(err)
	}
	pager := sc.NewListTablesPager(nil)
	var sizes []int
	for pager.More() {
		p, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(p.Tables))
	}
	if fmt.Sprint(sizes) != "[10 10 5]" {
		t.Fatalf("page sizes %v, want [10 10 5]", sizes)
	}
}
