package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"tablestore/frontend/batch"
	"tablestore/internal/edm"
)

// TestCreateTableBodyNames pins how Create Table reads its body: the
// property is TableName exactly. OData property names are case-sensitive
// (an entity may hold both "a" and "A"), so "tablename" is some other
// property and the body has no table name (400 PropertiesNeedValue, as
// for {}); encoding/json's case-insensitive field matching used to create
// a table from it. TableName given twice is refused as a duplicate
// property in an entity body is (400 InvalidInput) instead of the last one
// silently winning; a key spelled with JSON escapes is still TableName.
func TestCreateTableBodyNames(t *testing.T) {
	for _, tc := range []struct {
		body   string
		status int
		code   string
		table  string // created, for 201
	}{
		{`{"tablename":"lower1"}`, 400, "PropertiesNeedValue", ""},
		{`{"TABLENAME":"upper1"}`, 400, "PropertiesNeedValue", ""},
		{`{"tableName":"camel1"}`, 400, "PropertiesNeedValue", ""},
		{`{"TableName":"dup1","TableName":"dup2"}`, 400, "InvalidInput", ""},
		{`{"TableName":"dup1","Table\u004eame":"dup2"}`, 400, "InvalidInput", ""},
		{`{"TableName":5}`, 400, "InvalidInput", ""},
		{`{"TableName":null}`, 400, "PropertiesNeedValue", ""},
		{`null`, 400, "InvalidInput", ""},
		{`["TableName"]`, 400, "InvalidInput", ""},
		{`{"TableName":"both1","tablename":"other"}`, 201, "", "both1"},
		{`{"Table\u004eame":"escaped1"}`, 201, "", "escaped1"},
		{`{"odata.metadata":"x","TableName":"annotated1","TableName@odata.type":"Edm.String"}`, 201, "", "annotated1"},
	} {
		s, fb := newTestServer(t)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, signedRequest(t, "POST", "/devstoreaccount1/Tables", tc.body))
		if rec.Code != tc.status || rec.Header().Get("x-ms-error-code") != tc.code {
			t.Fatalf("%s: %d %s, want %d %s: %s", tc.body, rec.Code, rec.Header().Get("x-ms-error-code"), tc.status, tc.code, rec.Body.String())
		}
		tables, err := fb.Tables(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var created []string
		for _, tb := range tables {
			if n := tb.GetName(); n != "people" && n != "empty" {
				created = append(created, n)
			}
		}
		if want := tc.table; (want == "" && len(created) != 0) || (want != "" && (len(created) != 1 || created[0] != want)) {
			t.Fatalf("%s: tables created %v, want %q", tc.body, created, want)
		}
	}
}

// TestIfMatchListIsInvalid pins If-Match values with a quote inside the
// weak ETag's quotes, such as two ETags in one header line. The service's
// message for a bad ETag asks to "make sure only one etag value is
// specified and is valid": WCF Data Services' IsETagValueValid, whose
// message it is, refuses any '"' between the opening and the closing
// quote, so such a value is 400 InvalidInput, never a stale condition (412
// UpdateConditionNotSatisfied, what tablestore answered), even when the
// first ETag listed is the entity's own. Alone and in a change set
// (whose operations are answered as they would be alone), nothing written.
func TestIfMatchListIsInvalid(t *testing.T) {
	const entity = "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')"
	_, fb0 := newTestServer(t)
	cur, err := fb0.Get(context.Background(), "people", "Smith", "Ben")
	if err != nil {
		t.Fatal(err)
	}
	own := edm.FormatETag(cur.Timestamp)
	values := []string{
		`W/"a", W/"b"`,
		own + `, W/"b"`,
		own + `,` + own,
		`W/"a"b"`,
	}
	for _, v := range values {
		for _, method := range []string{"PUT", "MERGE", "PATCH", "DELETE"} {
			s, fb := newTestServer(t)
			body := `{"Age":1}`
			if method == "DELETE" {
				body = ""
			}
			r := signedRequest(t, method, entity, body)
			r.Header.Set("If-Match", v)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			want := "The etag value '" + v + "' specified in one of the request headers is not valid."
			if rec.Code != http.StatusBadRequest || rec.Header().Get("x-ms-error-code") != "InvalidInput" || !strings.Contains(rec.Body.String(), string(appendJSONBody(nil, want))) {
				t.Fatalf("%s If-Match %s: %d %s %s", method, v, rec.Code, rec.Header().Get("x-ms-error-code"), rec.Body.String())
			}
			unchanged(t, fb)
		}
		s, fb := newTestServer(t)
		op := batch.Request{Method: "MERGE", Target: "http://127.0.0.1:10002" + entity,
			Header: http.Header{"If-Match": {v}}, Body: []byte(`{"Age":1}`)}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, batchRequest(t, []batch.Request{insertOp("Smith", "Zed", ""), op}, ""))
		st, bodies := subStatuses(t, rec)
		if len(st) != 1 || st[0] != http.StatusBadRequest || !strings.Contains(bodies[0], `"code":"InvalidInput"`) || !strings.Contains(bodies[0], `"value":"1:`) {
			t.Fatalf("change set If-Match %s: %v %q", v, st, bodies)
		}
		unchanged(t, fb)
		if _, err := fb.Get(context.Background(), "people", "Smith", "Zed"); err == nil {
			t.Fatalf("change set If-Match %s: the insert was applied", v)
		}
	}
}

// TestEmptyContinuationIsInvalid pins Query Entities with a continuation
// parameter present but empty: the service answers
// "?NextPartitionKey=1!12!Q2FiUXVlcnk-&NextRowKey=" 400 InvalidInput (what
// Storage Explorer 1.23.0 sent, microsoft/AzureStorageExplorer#5434), where
// tablestore read the empty NextRowKey as absent and answered 200. A token
// for an empty key is "1!0!", never empty, and NextPartitionKey alone still
// continues at the start of that partition. The same holds for the query of
// a query batch.
func TestEmptyContinuationIsInvalid(t *testing.T) {
	s, _ := newTestServer(t)
	smith := url.QueryEscape(encodeToken("Smith"))
	for _, tc := range []struct {
		query  string
		status int
	}{
		{"NextPartitionKey=" + smith + "&NextRowKey=", 400},
		{"NextPartitionKey=", 400},
		{"NextPartitionKey=&NextRowKey=" + url.QueryEscape(encodeToken("Ben")), 400},
		{"NextPartitionKey=" + smith + "&NextRowKey=&NextRowKey=" + url.QueryEscape(encodeToken("Ben")), 400},
		{"NextPartitionKey=" + smith, 200},
		{"NextPartitionKey=" + smith + "&NextRowKey=1!0!", 200},
	} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, signedRequest(t, "GET", "/devstoreaccount1/people()?$top=1&"+tc.query, ""))
		if rec.Code != tc.status || (tc.status == 400 && rec.Header().Get("x-ms-error-code") != "InvalidInput") {
			t.Fatalf("%s: %d %s, want %d", tc.query, rec.Code, rec.Body.String(), tc.status)
		}
		if tc.status == 200 && !strings.Contains(rec.Body.String(), `"RowKey":"Ben"`) {
			t.Fatalf("%s: %s, want Smith/Ben first", tc.query, rec.Body.String())
		}
	}
	get := batch.Request{Method: "GET", Target: "http://127.0.0.1:10002/devstoreaccount1/people()?NextPartitionKey=" + smith + "&NextRowKey=",
		Header: http.Header{"Accept": {"application/json;odata=nometadata"}}}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, batchRequest(t, []batch.Request{get}, ""))
	st, bodies := subStatuses(t, rec)
	if len(st) != 1 || st[0] != http.StatusBadRequest || !strings.Contains(bodies[0], `"code":"InvalidInput"`) {
		t.Fatalf("query batch: %v %q", st, bodies)
	}
}

// TestTopLevelHeadersAsRecorded pins headers the service's own answers
// lack. Its complete recorded header lists (the JavaScript SDK's nock
// recordings of Insert Entity 204, Get Entity 200, Delete Entity 204, Create
// Table 201/409 and $batch 202; the Go SDK's recordings of Create Table 201,
// Insert Or Replace 204, Merge 404 and Delete Table 204; CloudStub's
// header-exact test of a 409 TableAlreadyExists against a live account)
// carry no DataServiceVersion on any top-level response, success or error:
// it appears only inside $batch sub-responses. A Create Table answered
// with content carries Location but no DataServiceId, which OData sends in
// place of the body when return-no-content applies (the recorded insert
// 204 has it). tablestore sent "DataServiceVersion: 3.0;" on every JSON,
// 204 and error answer and DataServiceId on every Create Table.
func TestTopLevelHeadersAsRecorded(t *testing.T) {
	const ben = "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')"
	for _, tc := range []struct {
		method, target, body string
		hdr                  map[string]string
		status               int
		dataServiceID        bool
	}{
		{"POST", "/devstoreaccount1/people", `{"PartitionKey":"N","RowKey":"1"}`, nil, 201, true},
		{"POST", "/devstoreaccount1/people", `{"PartitionKey":"N","RowKey":"2"}`, map[string]string{"Prefer": "return-no-content"}, 204, true},
		{"GET", ben, "", nil, 200, false},
		{"GET", "/devstoreaccount1/people()?$top=1", "", nil, 200, false},
		{"PUT", ben, `{"Age":1}`, nil, 204, false},
		{"MERGE", ben, `{"Age":2}`, map[string]string{"If-Match": "*"}, 204, false},
		{"DELETE", ben, "", map[string]string{"If-Match": "*"}, 204, false},
		{"POST", "/devstoreaccount1/Tables", `{"TableName":"Created1"}`, nil, 201, false},
		{"POST", "/devstoreaccount1/Tables", `{"TableName":"Created2"}`, map[string]string{"Prefer": "return-no-content"}, 204, true},
		{"POST", "/devstoreaccount1/Tables", `{"TableName":"people"}`, nil, 409, false},
		{"GET", "/devstoreaccount1/Tables", "", nil, 200, false},
		{"GET", "/devstoreaccount1/people(PartitionKey='none',RowKey='none')", "", nil, 404, false},
		{"GET", "/devstoreaccount1/people()?$top=1001", "", nil, 400, false},
	} {
		s, _ := newTestServer(t)
		r := signedRequest(t, tc.method, tc.target, tc.body)
		for k, v := range tc.hdr {
			r.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		h := rec.Result().Header
		if rec.Code != tc.status || len(h.Values("DataServiceVersion")) != 0 || (len(h.Values("DataServiceId")) != 0) != tc.dataServiceID {
			t.Fatalf("%s %s: %d, DataServiceVersion %q, DataServiceId %q", tc.method, tc.target, rec.Code, h.Values("DataServiceVersion"), h.Values("DataServiceId"))
		}
	}
	// Sub-responses keep it, the query batch's as the change set's.
	s, _ := newTestServer(t)
	get := batch.Request{Method: "GET", Target: "http://127.0.0.1:10002" + ben, Header: http.Header{"Accept": {"application/json;odata=nometadata"}}}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, batchRequest(t, []batch.Request{get}, ""))
	if body := rec.Body.String(); rec.Code != 202 || !strings.Contains(body, "HTTP/1.1 200 OK\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\nDataServiceVersion: 3.0;\r\n") || rec.Header().Get("DataServiceVersion") != "" {
		t.Fatalf("query batch: %d %q", rec.Code, body)
	}
}

// TestPointReadSelectMetadata pins odata.metadata on a point read with
// $select: the service names the projection after the element,
// "…/$metadata#tbl/@Element&$select=baz,PartitionKey,RowKey" (the
// JavaScript SDK's recording "should select specific properties", $select
// echoed as sent), as a query's "…#tbl&$select=…" does; tablestore wrote
// "#tbl/@Element" alone. Full metadata keeps its other names in order, no
// metadata has none, and the query batch's point read is the same.
func TestPointReadSelectMetadata(t *testing.T) {
	const base = "http://127.0.0.1:10002/devstoreaccount1/$metadata#people/@Element"
	const ben = "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')"
	for _, tc := range []struct {
		query, accept, meta string
		keys                []string
	}{
		{"?$select=Age,PartitionKey", "application/json;odata=minimalmetadata", base + "&$select=Age,PartitionKey",
			[]string{"odata.metadata", "odata.etag", "PartitionKey", "Age"}},
		{"?$select=Age,Nope", "application/json;odata=fullmetadata", base + "&$select=Age,Nope",
			[]string{"odata.metadata", "odata.type", "odata.id", "odata.etag", "odata.editLink", "Age", "Nope"}},
		{"?$select=Age", "application/json;odata=nometadata", "", []string{"Age"}},
		{"", "application/json;odata=minimalmetadata", base, nil},
	} {
		s, _ := newTestServer(t)
		r := signedRequest(t, "GET", ben+tc.query, "")
		r.Header.Set("Accept", tc.accept)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		checkElement(t, tc.query+" "+tc.accept, rec.Code, rec.Body.Bytes(), tc.meta, tc.keys)
	}
	s, _ := newTestServer(t)
	get := batch.Request{Method: "GET", Target: "http://127.0.0.1:10002" + ben + "?$select=Age", Header: http.Header{"Accept": {"application/json;odata=minimalmetadata"}}}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, batchRequest(t, []batch.Request{get}, ""))
	st, bodies := subStatuses(t, rec)
	if len(st) != 1 {
		t.Fatalf("query batch: %v %q", st, bodies)
	}
	checkElement(t, "query batch", st[0], []byte(bodies[0]), base+"&$select=Age", []string{"odata.metadata", "odata.etag", "Age"})
}

// checkElement checks a single-entity body's odata.metadata and, when keys
// is set, its names in order.
func checkElement(t *testing.T, what string, status int, body []byte, meta string, keys []string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); status != 200 || err != nil {
		t.Fatalf("%s: %d %v %s", what, status, err, body)
	}
	if got, _ := m["odata.metadata"].(string); got != meta {
		t.Fatalf("%s: odata.metadata %q, want %q", what, got, meta)
	}
	if keys == nil {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var got []string
	dec.Token()
	for dec.More() {
		k, _ := dec.Token()
		got = append(got, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("%s: names %v, want %v", what, got, keys)
	}
}

// TestLocationKeyEscapingAsRecorded pins how keys are written in Location
// and DataServiceId: quotes doubled and left as they are, '"' percent-
// encoded. The service's recorded answer to an insert of PartitionKey
// A'aaa_bbbb2" and RowKey "A'aaa_bbbb2 (the JavaScript SDK's recording
// "should handle partition and row keys with special chars") is
//
//	…/SpecialChars(PartitionKey='A''aaa_bbbb2%22',RowKey='%22A''aaa_bbbb2')
//
// where tablestore wrote each quote as %27%27. The same in a change set's
// insert sub-response.
func TestLocationKeyEscapingAsRecorded(t *testing.T) {
	const pk, rk = `A'aaa_bbbb2"`, `"A'aaa_bbbb2`
	want := "http://127.0.0.1:10002/devstoreaccount1/people(PartitionKey='A''aaa_bbbb2%22',RowKey='%22A''aaa_bbbb2')"
	s, _ := newTestServer(t)
	r := signedRequest(t, "POST", "/devstoreaccount1/people", `{"PartitionKey":"A'aaa_bbbb2\"","RowKey":"\"A'aaa_bbbb2"}`)
	r.Header.Set("Prefer", "return-no-content")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, r)
	if rec.Code != 204 || rec.Header().Get("Location") != want || rec.Header().Get("DataServiceId") != want {
		t.Fatalf("%d Location %q DataServiceId %q, want %q", rec.Code, rec.Header().Get("Location"), rec.Header().Get("DataServiceId"), want)
	}
	s, _ = newTestServer(t)
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, batchRequest(t, []batch.Request{insertOp(pk, rk, "")}, ""))
	if body := rec.Body.String(); rec.Code != 202 || !strings.Contains(body, "\r\nLocation: "+want+"\r\nDataServiceId: "+want+"\r\n") {
		t.Fatalf("change set: %d %q", rec.Code, body)
	}
}
