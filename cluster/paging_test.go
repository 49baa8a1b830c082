package cluster_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster/clustertest"
	"tablestore/frontend/auth"
	"tablestore/internal/masterclient"
	pb "tablestore/proto/tablestorepb"
)

// TestPagingAcrossReshapes follows a query's continuations page by page,
// on the primary endpoint and on the secondary (follower reads), while
// the table's ranges change between the pages: a split exactly at the
// continuation's PartitionKey, a merge of the first two ranges, a
// leadership transfer of the range the continuation points into. Every
// matching entity comes back once, in key order, for an unfiltered query,
// a PartitionKey range filter (whose exclusive bound falls on a split key)
// and a PartitionKey equality filter; no page is empty (the last page of
// the range filter was: its continuation pointed into the partition of the
// exclusive bound); a $select keeps to its properties across ranges. Keys
// of odd characters page one by one; a continuation past the last key is
// an empty last page. A continuation token that decodes to no UTF-8 text
// is 400 InvalidInput, as is a point read of such a key (both were 500:
// gRPC refused the string).
func TestPagingAcrossReshapes(t *testing.T) {
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
	const table = "paging"
	tc := clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), table)
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tc, acked, "a", 52) // k00..k25, two RowKeys each
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 3*time.Minute)

	t.Run("tokens", func(t *testing.T) {
		for _, tok := range []string{"1!4!_w--", "\xff"} {
			_, _, _, err := pageKeys(t, tc, aztables.ListEntitiesOptions{NextPartitionKey: &tok})
			var re *azcore.ResponseError
			if !errors.As(err, &re) || re.StatusCode != 400 || re.ErrorCode != "InvalidInput" {
				t.Errorf("NextPartitionKey %q: %v, want 400 InvalidInput", tok, err)
			}
		}
		// A continuation past every key: an empty last page.
		for tok, want := range map[string]int{"1!4!enp6": 0, "zzz": 0, "k25": 1} {
			rk := "1!8!YS0wMDUx" // "a-0051", the last RowKey of k25
			keys, npk, _, err := pageKeys(t, tc, aztables.ListEntitiesOptions{NextPartitionKey: &tok, NextRowKey: &rk})
			if err != nil || len(keys) != want || npk != nil {
				t.Errorf("NextPartitionKey %q: %v, continuation %v, %v; want %d entities, no continuation", tok, keys, npk != nil, err, want)
			}
		}
		_, err := tc.GetEntity(ctx, "\xff", "x", nil)
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != 400 || re.ErrorCode != "InvalidInput" {
			t.Errorf("get of PartitionKey %%FF: %v, want 400 InvalidInput", err)
		}
	})

	t.Run("odd keys", func(t *testing.T) {
		// Keys whose tokens hold '+', '/' and padding, quotes, spaces,
		// multi-byte and supplementary characters, and the longest key:
		// one entity a page, so every key is a continuation once.
		odd := clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), "pagingodd")
		keys := []string{"~~~", "翿", "ÿÿ", "a+b=c", "p k'1", "O''Brien", "rü", "行", "😀x", "%2B", "1!4!YSti", strings.Repeat("行", 1024), strings.Repeat("😀", 512)}
		var want []string
		for i, pk := range keys {
			rk := keys[len(keys)-1-i]
			body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk})
			if _, err := odd.UpsertEntity(ctx, body, nil); err != nil {
				t.Fatalf("upsert %q/%q: %v", pk, rk, err)
			}
			want = append(want, pk+"/"+rk)
		}
		slices.Sort(want)
		if _, err := clustertest.SplitRetrying(ctx, t, mc, "pagingodd", "p k'1"); err != nil {
			t.Fatal(err)
		}
		top := int32(1)
		opts := aztables.ListEntitiesOptions{Top: &top}
		var got []string
		for pages := 0; pages <= 2*len(keys); pages++ {
			ks, npk, nrk, err := pageKeys(t, odd, opts)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ks...)
			if npk == nil {
				break
			}
			opts.NextPartitionKey, opts.NextRowKey = npk, nrk
		}
		if !slices.Equal(got, want) {
			t.Errorf("got %q\nwant %q", got, want)
		}
	})

	filters := []struct {
		filter string
		match  func(pk string) bool
	}{
		{"", func(string) bool { return true }},
		{"PartitionKey ge 'k03' and PartitionKey lt 'k21'", func(pk string) bool { return pk >= "k03" && pk < "k21" }},
		{"PartitionKey gt 'k12' and PartitionKey le 'k16'", func(pk string) bool { return pk > "k12" && pk <= "k16" }},
		{"PartitionKey eq 'k14'", func(pk string) bool { return pk == "k14" }},
	}
	cred, err := aztables.NewSharedKeyCredential(auth.DevAccountName, auth.DevAccountKey)
	if err != nil {
		t.Fatal(err)
	}
	secondary, err := aztables.NewClientWithSharedKey(c.Endpoint(0)+"-secondary/"+table, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	type pass struct {
		name   string
		client *aztables.Client
		filter int
	}
	var passes []pass
	for i := range filters {
		passes = append(passes, pass{"primary", tc, i}, pass{"secondary", secondary, i})
	}
	step, done := 0, [3]int{}
	for _, p := range passes {
		f, tc := filters[p.filter], p.client
		var want []string
		for k := range acked {
			if f.match(k[:strings.IndexByte(k, '/')]) {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		var got []string
		top := int32(3)
		if f.filter == "PartitionKey eq 'k14'" {
			top = 1
		}
		opts := aztables.ListEntitiesOptions{Top: &top}
		if f.filter != "" {
			opts.Filter = &f.filter
		}
		for pages := 0; ; pages++ {
			if pages > 2*len(want)+5 {
				t.Fatalf("filter %q: %d pages and no end", f.filter, pages)
			}
			keys, npk, nrk, err := pageKeys(t, tc, opts)
			if err != nil {
				t.Fatalf("%s, filter %q page %d: %v", p.name, f.filter, pages, err)
			}
			got = append(got, keys...)
			if len(keys) == 0 && (npk != nil || pages > 0) {
				// Allowed by Azure, but nothing here (no budget runs
				// out) makes one: it was a page continued past the
				// filter's exclusive bound, into a partition it excludes.
				t.Errorf("%s, filter %q: page %d is empty (continuation %v)", p.name, f.filter, pages, npk != nil)
			}
			if npk == nil {
				break
			}
			changed, err := reshapeAt(t, ctx, mc, table, step, tokenKey(t, *npk))
			if err != nil {
				t.Fatal(err)
			}
			if changed {
				done[step%3]++
			}
			step++
			opts.NextPartitionKey, opts.NextRowKey = npk, nrk
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s, filter %q: got %v\nwant %v", p.name, f.filter, got, want)
		}
	}
	if done[0] == 0 || done[1] == 0 || done[2] == 0 {
		t.Errorf("splits, merges, transfers between pages: %v; want some of each", done)
	}

	// $select across the ranges: every entity once, with only the
	// selected properties (the keys only when selected, as Azure answers).
	if _, err := clustertest.SplitRetrying(ctx, t, mc, table, "k09"); err != nil && !strings.Contains(err.Error(), "boundary") {
		t.Logf("split at k09: %v", err)
	}
	if n := len(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)); n < 2 {
		t.Fatalf("the table has %d ranges; the $select scan needs two", n)
	}
	sel, top := "RowKey,V,PartitionKey", int32(5)
	pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Select: &sel, Top: &top})
	seen, last := 0, ""
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Entities {
			var e map[string]any
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprint(e["PartitionKey"], "/", e["RowKey"])
			if _, ok := acked[k]; !ok || e["V"] == nil || k <= last {
				t.Errorf("$select: entity %s (after %s): %v", k, last, e)
			}
			seen, last = seen+1, k
			for name := range e {
				switch name {
				case "PartitionKey", "RowKey", "V", "V@odata.type", "Timestamp", "odata.etag":
				default:
					t.Errorf("$select: entity %s has %s", k, name)
				}
			}
		}
	}
	if seen != len(acked) {
		t.Errorf("$select returned %d entities, want %d", seen, len(acked))
	}
}

// pageKeys reads one page of tc with opts and returns its entities' keys
// ("pk/rk") and the continuation.
func pageKeys(t *testing.T, tc *aztables.Client, opts aztables.ListEntitiesOptions) (keys []string, npk, nrk *string, err error) {
	t.Helper()
	page, err := tc.NewListEntitiesPager(&opts).NextPage(clustertest.Context(t, time.Minute))
	if err != nil {
		return nil, nil, nil, err
	}
	for _, raw := range page.Entities {
		var e aztables.EDMEntity
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.PartitionKey+"/"+e.RowKey)
	}
	return keys, page.NextPartitionKey, page.NextRowKey, nil
}

// tokenKey decodes a continuation token of the shape "1!n!base64".
func tokenKey(t *testing.T, tok string) string {
	t.Helper()
	parts := strings.SplitN(tok, "!", 3)
	if len(parts) != 3 {
		t.Fatalf("token %q is not 1!n!base64", tok)
	}
	b, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(parts[2], "-", "="))
	if err != nil {
		t.Fatalf("token %q: %v", tok, err)
	}
	return string(b)
}

// reshapeAt changes table's ranges around key next, by step: a split at
// next, a merge of the first two ranges, or a leadership transfer of the
// range holding next. It reports whether it changed anything; it may run
// on a goroutine of its own (it fails no test).
func reshapeAt(t *testing.T, ctx context.Context, mc *masterclient.Client, table string, step int, next string) (bool, error) {
	t.Helper()
	m, err := clustertest.GetPartitionMap(ctx, mc)
	if err != nil {
		return false, err
	}
	rs := clustertest.TableRanges(m, table)
	switch step % 3 {
	case 0:
		for _, d := range rs {
			if d.GetStart() == next {
				return false, nil // already a boundary
			}
		}
		if _, err := clustertest.SplitRetrying(ctx, t, mc, table, next); err != nil {
			return false, fmt.Errorf("split at %q: %w", next, err)
		}
		return true, nil
	case 1:
		if len(rs) > 1 {
			if _, err := clustertest.MergeRetrying(ctx, t, mc, rs[0].GetRangeId()); err != nil {
				return false, fmt.Errorf("merge of range %d: %w", rs[0].GetRangeId(), err)
			}
			return true, nil
		}
	case 2:
		for _, d := range rs {
			if d.GetStart() > next || (d.GetEnd() != "" && next >= d.GetEnd()) {
				continue
			}
			from := m.GetLeaders()[d.GetRangeId()]
			for _, rep := range d.GetReplicas() {
				if rep.GetServerId() == from {
					continue
				}
				err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
					_, err := m.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: d.GetRangeId(), ToServerId: rep.GetServerId()})
					return err
				})
				if err != nil {
					t.Logf("transfer of range %d to %s: %v", d.GetRangeId(), rep.GetServerId(), err)
				}
				return err == nil, nil
			}
		}
	}
	return false, nil
}

// TestPagingDuringReshapes pages through a table again and again, on the
// primary and the secondary, while another goroutine splits, merges and
// moves its ranges and their leaderships without pause, so that ranges change
// during pages as well as between them: every scan returns every entity
// once, in key order.
func TestPagingDuringReshapes(t *testing.T) {
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 4, clustertest.QuietPolicies, nil)
	const table = "pagingduring"
	tc := clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), table)
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tc, acked, "a", 78) // k00..k25, three RowKeys each
	var want []string
	for k := range acked {
		want = append(want, k)
	}
	slices.Sort(want)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 3*time.Minute)
	cred, err := aztables.NewSharedKeyCredential(auth.DevAccountName, auth.DevAccountKey)
	if err != nil {
		t.Fatal(err)
	}
	secondary, err := aztables.NewClientWithSharedKey(c.Endpoint(0)+"-secondary/"+table, cred, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Followers apply the writes a moment after the leader: the
	// secondary is caught up before the reshapes start (none writes).
	scan := func(client *aztables.Client, top int32) ([]string, error) {
		opts := aztables.ListEntitiesOptions{Top: &top}
		var got []string
		for pages := 0; ; pages++ {
			if pages > 100 {
				return got, fmt.Errorf("%d pages and no end", pages)
			}
			keys, npk, nrk, err := pageKeys(t, client, opts)
			if err != nil {
				return got, fmt.Errorf("page %d: %w", pages, err)
			}
			got = append(got, keys...)
			if npk == nil {
				return got, nil
			}
			opts.NextPartitionKey, opts.NextRowKey = npk, nrk
		}
	}
	clustertest.WaitFor(t, 20*time.Second, "the secondary to hold every write", func() bool {
		got, err := scan(secondary, 1000)
		return err == nil && slices.Equal(got, want)
	})

	stop := make(chan struct{})
	reshaped := make(chan [4]int) // splits, merges, transfers, moves
	go func() {
		var n [4]int
		defer func() { reshaped <- n }()
		for step := 0; ; step++ {
			select {
			case <-stop:
				return
			default:
			}
			// Split points walk the table; the merge folds the first
			// two ranges; the transfer moves the leader of the range
			// holding the key.
			key := fmt.Sprintf("k%02d", 1+(step*7)%25)
			var changed bool
			var err error
			if step%4 == 3 {
				changed, err = moveAt(ctx, mc, table, key)
			} else {
				changed, err = reshapeAt(t, ctx, mc, table, step%4, key)
			}
			if err != nil {
				// A merge of ranges a move left apart, a move the
				// master refuses: the scans are what is tested.
				t.Logf("reshape %d: %v", step, err)
			}
			if changed {
				n[step%4]++
			}
		}
	}()
	scans := 0
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline) || scans < 4; scans++ {
		client, name := tc, "primary"
		if scans%2 == 1 {
			client, name = secondary, "secondary"
		}
		got, err := scan(client, 7)
		if err != nil {
			t.Fatalf("%s scan %d: %v", name, scans, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s scan %d: got %v\nwant %v", name, scans, got, want)
		}
	}
	close(stop)
	n := <-reshaped
	t.Logf("%d scans during %v splits, merges, transfers, moves", scans, n)
	if n[0] == 0 || n[1] == 0 || n[2] == 0 || n[3] == 0 {
		t.Errorf("splits, merges, transfers, moves during the scans: %v; want some of each", n)
	}
}

// moveAt moves a replica of the range holding key to a server that has
// none, from a follower (the leader stays). It reports whether it moved.
func moveAt(ctx context.Context, mc *masterclient.Client, table, key string) (bool, error) {
	m, err := clustertest.GetPartitionMap(ctx, mc)
	if err != nil {
		return false, err
	}
	for _, d := range clustertest.TableRanges(m, table) {
		if d.GetStart() > key || (d.GetEnd() != "" && key >= d.GetEnd()) {
			continue
		}
		has := map[string]bool{}
		for _, rep := range d.GetReplicas() {
			has[rep.GetServerId()] = true
		}
		var from, to string
		for _, rep := range d.GetReplicas() {
			if rep.GetServerId() != m.GetLeaders()[d.GetRangeId()] {
				from = rep.GetServerId()
			}
		}
		for _, sv := range m.GetServers() {
			if !has[sv.GetServerId()] {
				to = sv.GetServerId()
			}
		}
		if from == "" || to == "" {
			return false, nil
		}
		err := mc.Call(ctx, func(ctx context.Context, ms pb.MasterServiceClient) error {
			_, err := ms.Move(ctx, &pb.MoveRequest{RangeId: d.GetRangeId(), FromServerId: from, ToServerId: to})
			return err
		})
		if err != nil {
			return false, fmt.Errorf("move of range %d from %s to %s: %w", d.GetRangeId(), from, to, err)
		}
		return true, nil
	}
	return false, nil
}
