package frontend

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tablestore/frontend/auth"
	"tablestore/frontend/batch"
)

// FuzzTransaction sends crafted change sets through the whole $batch
// handler, with the in-memory backend behind it: what the parser accepts
// is then read as operations (targets, X-HTTP-Method, If-Match, keys in
// URLs and bodies, the Go SDK's undoubled quotes), which batch.FuzzParse
// does not reach. No input may panic (the server's recover answers 500
// InternalError, which the backend here never causes), and a change set
// is applied whole or not at all: a 202 with one failing sub-response
// leaves the table as it was.
func FuzzTransaction(f *testing.F) {
	const target = "http://127.0.0.1:10002/devstoreaccount1/people"
	ops := []batch.Request{
		insertOp("Smith", "New", `,"N":1`),
		{Method: "MERGE", Target: target + "(PartitionKey='Smith',RowKey='Ben')", Header: http.Header{"If-Match": {"*"}, "Content-Type": {"application/json"}},
			Body: []byte(`{"PartitionKey":"Smith","RowKey":"Ben","Age":43}`)},
		{Method: "PUT", Target: target + "(PartitionKey='Smith',RowKey='O'Neil')", Header: http.Header{"Content-Type": {"application/json"}},
			Body: []byte(`{"PartitionKey":"Smith","RowKey":"O'Neil"}`)},
		{Method: "POST", Target: target + "(PartitionKey='Smith',RowKey='Ben')", Header: http.Header{"X-HTTP-Method": {"DELETE"}, "If-Match": {`W/"datetime'2024-01-02T03%3A04%3A10.1234567Z'"`}}},
		{Method: "DELETE", Target: "/devstoreaccount1/people(RowKey='Ben',PartitionKey='Smith')?$format=application/json;odata=fullmetadata", Header: http.Header{"If-Match": {"*"}, "Content-ID": {"7"}}},
	}
	f.Add(batch.AppendRequestBody(nil, "batch_x", "changeset_x", ops[:3]))
	f.Add(batch.AppendRequestBody(nil, "batch_x", "changeset_x", ops[3:4]))
	f.Add(batch.AppendRequestBody(nil, "batch_x", "changeset_x", []batch.Request{ops[0], ops[4]}))
	f.Add(bytes.ReplaceAll(batch.AppendRequestBody(nil, "batch_x", "changeset_x", ops[:2]), []byte("\r\n"), []byte("\n")))
	f.Add(batch.AppendRequestBody(nil, "batch_x", "", []batch.Request{{Method: "GET", Target: target + "(PartitionKey='Smith',RowKey='Ben')"}}))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, fb := newTestServer(t)
		before, err := fb.Query(context.Background(), "people", Query{Top: 1000})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("POST", "http://127.0.0.1:10002/devstoreaccount1/$batch", bytes.NewReader(body))
		r.Header.Set("Content-Type", batch.ContentType("batch_x"))
		if err := auth.SignSharedKeyLite(r, auth.DevAccount()); err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		if rec.Code >= 500 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		if rec.Code != http.StatusAccepted {
			return
		}
		// One sub-response with an error status: nothing was applied.
		resp := rec.Body.String()
		if strings.Count(resp, "HTTP/1.1 ") != 1 || strings.Contains(resp, "HTTP/1.1 2") {
			return
		}
		after, err := fb.Query(context.Background(), "people", Query{Top: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Entities) != len(before.Entities) {
			t.Fatalf("a failed change set changed the table: %d entities, %d before\n%s", len(after.Entities), len(before.Entities), resp)
		}
		for i := range after.Entities {
			if !after.Entities[i].Timestamp.Equal(before.Entities[i].Timestamp) {
				t.Fatalf("a failed change set changed %s/%s\n%s", after.Entities[i].PartitionKey, after.Entities[i].RowKey, resp)
			}
		}
	})
}
