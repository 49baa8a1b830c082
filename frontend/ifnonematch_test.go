package frontend

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tablestore/frontend/batch"
)

// TestIfNoneMatchOnWrites checks If-None-Match on the writes that address
// an entity. The REST reference's "Table service error codes" lists
// InvalidInput (400) "If-None-Match HTTP header cannot be specified for PUT
// operations." and "… for DELETE operations."; those are WCF Data
// Services' messages, and its HandlePutOperation, which serves PUT and
// MERGE alike, raises the first for any update, so Merge Entity (MERGE,
// PATCH, or POST with X-HTTP-Method: MERGE) is refused the same way. In a
// change set "an individual request … is identical to a request made when
// that operation is being called by itself" ("Performing entity group
// transactions"), so the operation fails there too, its index in the
// message, and nothing is written.
func TestIfNoneMatchOnWrites(t *testing.T) {
	const entity = "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')"
	const putMsg = "If-None-Match HTTP header cannot be specified for PUT operations."
	const delMsg = "If-None-Match HTTP header cannot be specified for DELETE operations."
	t.Run("single", func(t *testing.T) {
		for _, tc := range []struct {
			method, xmethod, ifMatch, msg string
		}{
			{"PUT", "", "", putMsg},
			{"PUT", "", "*", putMsg},
			{"MERGE", "", "", putMsg},
			{"MERGE", "", "*", putMsg},
			{"PATCH", "", "", putMsg},
			{"POST", "MERGE", "*", putMsg},
			{"DELETE", "", "*", delMsg},
		} {
			s, fb := newTestServer(t)
			r := signedRequest(t, tc.method, entity, `{"Age":1}`)
			if tc.method == "DELETE" {
				r = signedRequest(t, tc.method, entity, "")
			}
			r.Header.Set("If-None-Match", "*")
			if tc.ifMatch != "" {
				r.Header.Set("If-Match", tc.ifMatch)
			}
			if tc.xmethod != "" {
				r.Header.Set("X-HTTP-Method", tc.xmethod)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			if rec.Code != http.StatusBadRequest || rec.Header().Get("x-ms-error-code") != "InvalidInput" || !strings.Contains(rec.Body.String(), tc.msg) {
				t.Fatalf("%s (X-HTTP-Method %q, If-Match %q): %d %s %s", tc.method, tc.xmethod, tc.ifMatch, rec.Code, rec.Header().Get("x-ms-error-code"), rec.Body.String())
			}
			unchanged(t, fb)
		}
	})
	t.Run("change set", func(t *testing.T) {
		target := "http://127.0.0.1:10002" + entity
		for _, tc := range []struct {
			op  batch.Request
			msg string
		}{
			{batch.Request{Method: "PUT", Target: target, Header: http.Header{"If-None-Match": {"*"}}, Body: []byte(`{"Age":1}`)}, "1:" + putMsg},
			{batch.Request{Method: "MERGE", Target: target, Header: http.Header{"If-None-Match": {"*"}, "If-Match": {"*"}}, Body: []byte(`{"Age":1}`)}, "1:" + putMsg},
			{batch.Request{Method: "PATCH", Target: target, Header: http.Header{"If-None-Match": {"*"}}, Body: []byte(`{"Age":1}`)}, "1:" + putMsg},
			{batch.Request{Method: "DELETE", Target: target, Header: http.Header{"If-None-Match": {"*"}, "If-Match": {"*"}}}, "1:" + delMsg},
		} {
			s, fb := newTestServer(t)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, batchRequest(t, []batch.Request{insertOp("Smith", "Zed", ""), tc.op}, ""))
			st, bodies := subStatuses(t, rec)
			if len(st) != 1 || st[0] != http.StatusBadRequest || !strings.Contains(bodies[0], `"code":"InvalidInput"`) || !strings.Contains(bodies[0], `"value":"`+tc.msg) {
				t.Fatalf("%s: %v %q", tc.op.Method, st, bodies)
			}
			unchanged(t, fb)
			if _, err := fb.Get(context.Background(), "people", "Smith", "Zed"); err == nil {
				t.Fatalf("%s: the change set's insert was applied", tc.op.Method)
			}
		}
	})
}

// unchanged fails unless the fixture's Smith/Ben still has its Age of 42.
func unchanged(t *testing.T, fb *fakeBackend) {
	t.Helper()
	e, err := fb.Get(context.Background(), "people", "Smith", "Ben")
	if err != nil {
		t.Fatalf("Smith/Ben: %v", err)
	}
	for _, p := range e.Properties {
		if p.Name == "Age" && p.Value.Int != 42 {
			t.Fatalf("Smith/Ben changed: %+v", e.Properties)
		}
	}
}
