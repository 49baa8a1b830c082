package frontend

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestMalformedContinuations sends continuation tokens in the token shape
// ("1!n!base64") whose key is not base64, and tokens and filters that are
// not UTF-8 text: a clear 400 InvalidInput. The malformed tokens were
// taken as keys themselves (the query went on from wherever "1!4!%%%"
// sorts); the ones that are not UTF-8 text, which no key is, were sent to
// the partition servers, whose gRPC refused the string (500 InternalError
// in a cluster; the in-process fake here answered 200). Tokens of odd but
// valid keys still work.
func TestMalformedContinuations(t *testing.T) {
	s, _ := newTestServer(t)
	bad := []url.Values{
		{"NextPartitionKey": {"1!4!%%%"}},                                     // not base64
		{"NextPartitionKey": {encodeToken("Smith")}, "NextRowKey": {"1!1!Q"}}, // a base64 fragment
		{"NextPartitionKey": {"1!4!_w--"}},                                    // base64 of 0xFF
		{"NextPartitionKey": {"1!4!/w=="}},                                    // the same, standard alphabet
		{"NextPartitionKey": {"\xff"}},                                        // not a token: the key itself
		{"NextPartitionKey": {encodeToken("Smith")}, "NextRowKey": {encodeToken("B\xffn")}},
		{"NextPartitionKey": {"Smith"}, "NextRowKey": {"\xc3"}}, // a truncated sequence
		{"$filter": {"Name eq '\xff'"}},
		{"$filter": {"PartitionKey ge 'k\xc3'"}},
	}
	for _, q := range bad {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, signedRequest(t, "GET", "/devstoreaccount1/people()?"+q.Encode(), ""))
		if rec.Code != 400 || rec.Header().Get("x-ms-error-code") != "InvalidInput" {
			t.Errorf("%q: got %d %s, want 400 InvalidInput", q, rec.Code, rec.Header().Get("x-ms-error-code"))
		}
	}

	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, signedRequest(t, "GET", "/devstoreaccount1/Tables?NextTableName=1!4!%25%25%25", ""))
	if rec.Code != 400 || rec.Header().Get("x-ms-error-code") != "InvalidInput" {
		t.Errorf("NextTableName=1!4!%%%%%%: got %d %s, want 400 InvalidInput", rec.Code, rec.Header().Get("x-ms-error-code"))
	}

	// Keys with quotes, spaces, non-ASCII letters: their tokens (and the
	// keys themselves, leniently) continue at them.
	for _, tc := range []struct {
		q    url.Values
		want string
	}{
		{url.Values{"NextPartitionKey": {encodeToken("p k'1")}, "NextRowKey": {encodeToken("rü")}}, "p k'1/rü"},
		{url.Values{"NextPartitionKey": {"p k'1"}, "NextRowKey": {"rü"}}, "p k'1/rü"},
		{url.Values{"NextPartitionKey": {encodeToken("Smith")}, "NextRowKey": {encodeToken("John")}}, "Smith/John"},
		{url.Values{"NextPartitionKey": {encodeToken("Smith")}, "NextRowKey": {"1!0!"}}, "Smith/Ben"},
	} {
		tc.q.Set("$top", "1")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, signedRequest(t, "GET", "/devstoreaccount1/people()?"+tc.q.Encode(), ""))
		var body struct{ Value []map[string]any }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 200 {
			t.Fatalf("%q: %d %s", tc.q, rec.Code, rec.Body.String())
		}
		if len(body.Value) != 1 || body.Value[0]["PartitionKey"].(string)+"/"+body.Value[0]["RowKey"].(string) != tc.want {
			t.Errorf("%q: got %v, want %s", tc.q, body.Value, tc.want)
		}
	}
}

// TestURLKeysNotUTF8 addresses entities by keys that are not UTF-8 text
// (%FF in the URL). No entity has such a key and the partition servers'
// gRPC cannot carry one: 400 InvalidInput, where the cluster answered 500
// InternalError (the in-process fake here answered 404 or wrote it).
func TestURLKeysNotUTF8(t *testing.T) {
	s, _ := newTestServer(t)
	for _, tc := range []struct{ method, target, body string }{
		{"GET", "/devstoreaccount1/people(PartitionKey='%FF',RowKey='x')", ""},
		{"GET", "/devstoreaccount1/people(PartitionKey='Smith',RowKey='B%C3')", ""},
		{"PUT", "/devstoreaccount1/people(PartitionKey='%FF',RowKey='x')", `{"A":1}`},
		{"DELETE", "/devstoreaccount1/people(PartitionKey='Smith',RowKey='%FF')", ""},
	} {
		r := signedRequest(t, tc.method, tc.target, tc.body)
		r.Header.Set("If-Match", "*")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		if rec.Code != 400 || rec.Header().Get("x-ms-error-code") != "InvalidInput" {
			t.Errorf("%s %s: got %d %s, want 400 InvalidInput", tc.method, tc.target, rec.Code, rec.Header().Get("x-ms-error-code"))
		}
	}
}

// TestTableListingAcrossChanges follows NextTableName while tables are
// created and deleted between the pages, the table the continuation names
// among them: every table that lives throughout comes once, in name
// order; the continuation needs no table of its name.
func TestTableListingAcrossChanges(t *testing.T) {
	t.Run("Tables", func(t *testing.T) {
		s, fb := newTestServer(t)
		tableListingAcrossChanges(t, s, fb)
	})
	t.Run("TablesFrom", func(t *testing.T) {
		fb := newFakeBackend()
		s, err := NewServer(DefaultConfig(), listingBackend{fb}, nil)
		if err != nil {
			t.Fatal(err)
		}
		seedFixture(t, fb)
		tableListingAcrossChanges(t, s, fb)
	})
}

// listingBackend is the fake with the ordered walk the router has.
type listingBackend struct{ *fakeBackend }

func (b listingBackend) TablesFrom(ctx context.Context, from string, fn func(*pb.Table) bool) error {
	ts, err := b.Tables(ctx)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.GetName() >= from && !fn(t) {
			break
		}
	}
	return nil
}

func tableListingAcrossChanges(t *testing.T, s *Server, fb *fakeBackend) {
	ctx := t.Context() // tables "people" and "empty" exist
	for _, n := range []string{"tab01", "tab02", "tab03", "tab04", "tab05", "tab06", "tab07"} {
		if _, err := fb.CreateTable(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	next := ""
	var got []string
	for page := 0; ; page++ {
		if page > 20 {
			t.Fatal("no end")
		}
		q := url.Values{"$top": {"2"}}
		if next != "" {
			q.Set("NextTableName", next)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, signedRequest(t, "GET", "/devstoreaccount1/Tables?"+q.Encode(), ""))
		var body struct{ Value []struct{ TableName string } }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 200 {
			t.Fatalf("page %d: %d %s", page, rec.Code, rec.Body.String())
		}
		for _, v := range body.Value {
			got = append(got, v.TableName)
		}
		next = rec.Header().Get("x-ms-continuation-NextTableName")
		if next == "" {
			break
		}
		switch page {
		case 1: // the continuation names tab03: it goes
			name, ok := decodeToken(next)
			if !ok || name != "tab03" {
				t.Fatalf("continuation %q (%q)", next, name)
			}
			if err := fb.DeleteTable(ctx, name); err != nil {
				t.Fatal(err)
			}
		case 2: // one before the continuation, one after
			for _, n := range []string{"aaa01", "tab065"} {
				if _, err := fb.CreateTable(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	want := []string{"empty", "people", "tab01", "tab02", "tab04", "tab05", "tab06", "tab065", "tab07"}
	if !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
}
