package frontend

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"tablestore/frontend/auth"
)

// TestInsertEchoHeaders: an insert answered with the entity (no Prefer, as
// the Go SDK's AddEntity sends it) carries one service root in Location,
// DataServiceId and odata.metadata, and one ETag in the header and the
// body, however the account is addressed. insertEntity builds the three
// header values in one string.
func TestInsertEchoHeaders(t *testing.T) {
	tests := []struct {
		name, url, base string
	}{
		{"path style", "http://127.0.0.1:10002/devstoreaccount1/people", "http://127.0.0.1:10002/devstoreaccount1"},
		{"host style", "http://devstoreaccount1.table.localhost:10002/people", "http://devstoreaccount1.table.localhost:10002"},
		{"https path style", "https://127.0.0.1:10002/devstoreaccount1/people", "https://127.0.0.1:10002/devstoreaccount1"},
	}
	s, _ := newTestServer(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rk := "k'" + strings.Repeat("é", i+1) // the quote doubled, é percent-encoded in the link
			body := `{"PartitionKey":"p 1","RowKey":"` + rk + `","N":42}`
			r := httptest.NewRequest("POST", tc.url, strings.NewReader(body))
			r.Header.Set("Accept", "application/json;odata=minimalmetadata")
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("x-ms-version", "2019-02-02")
			if err := auth.SignSharedKeyLite(r, auth.DevAccount()); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			if rec.Code != 201 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
			}
			h := rec.Header()
			link := tc.base + "/people(PartitionKey='p%201',RowKey='k''" + strings.Repeat("%C3%A9", i+1) + "')"
			if got := h.Get("Location"); got != link {
				t.Errorf("Location %q, want %q", got, link)
			}
			if got := h.Get("Dataserviceid"); got != link {
				t.Errorf("DataServiceId %q, want %q", got, link)
			}
			var doc map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			if got, want := doc["odata.metadata"], tc.base+"/$metadata#people/@Element"; got != want {
				t.Errorf("odata.metadata %q, want %q", got, want)
			}
			etag := h.Get("Etag")
			if !strings.HasPrefix(etag, `W/"datetime'`) || doc["odata.etag"] != etag {
				t.Errorf("ETag %q, odata.etag %q", etag, doc["odata.etag"])
			}
			if doc["RowKey"] != rk || doc["N"] != float64(42) {
				t.Errorf("echo %v", doc)
			}
		})
	}
}
