package frontend

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"tablestore/frontend/auth"
)

// TestJSONBeforeItsVersion checks JSON at an x-ms-version before
// 2013-08-15, the first version that speaks it ("Payload format for Table
// service operations"). The service answers 415 JsonFormatNotSupported,
// "JSON format is not supported." (azure-storage-net issue 32: a JSON
// client library reading at 2012-02-12; azure-storage-python issue 104: a
// JSON Create Table on Azure Stack, answered with an m:-prefixed OData XML
// error), whether the request asks for JSON ($format, Accept) or sends it
// (Content-Type). Nothing is written. A request at such a version that
// names no JSON is served as before, as are the XML endpoints, SAS
// requests (which run at their sv) and every version from 2013-08-15.
func TestJSONBeforeItsVersion(t *testing.T) {
	const entity = "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')"
	const newEntity = `{"PartitionKey":"Smith","RowKey":"Zoe","Age":1}`
	sas, err := auth.ServiceSAS{Table: "people", Permissions: "raud", Expiry: time.Now().Add(time.Hour)}.Encode(auth.DevAccount())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, target, body, version string
		header                              map[string]string // set after signing; "" deletes
		refused                             bool
		status                              int // when not refused
	}{
		{"read, Accept", "GET", entity, "", "2012-02-12", nil, true, 0},
		{"read, Accept list", "GET", entity, "", "2011-08-18", map[string]string{"Accept": "application/atom+xml;q=0.9, application/json;odata=minimalmetadata"}, true, 0},
		{"query, $format", "GET", "/devstoreaccount1/people()?$format=application/json;odata=fullmetadata", "", "2009-09-19", map[string]string{"Accept": ""}, true, 0},
		{"query tables, $format json", "GET", "/devstoreaccount1/Tables?$format=json", "", "2009-07-17", map[string]string{"Accept": ""}, true, 0},
		{"insert, Content-Type", "POST", "/devstoreaccount1/people", newEntity, "2012-02-12", map[string]string{"Accept": ""}, true, 0},
		{"insert, both", "POST", "/devstoreaccount1/people", newEntity, "2009-04-14", nil, true, 0},
		{"create table", "POST", "/devstoreaccount1/Tables", `{"TableName":"newtable"}`, "2012-02-12", nil, true, 0},
		{"merge", "MERGE", entity, `{"Age":1}`, "2012-02-12", map[string]string{"If-Match": "*"}, true, 0},
		{"delete, Accept", "DELETE", entity, "", "2012-02-12", map[string]string{"If-Match": "*"}, true, 0},

		{"read at 2013-08-15", "GET", entity, "", "2013-08-15", nil, false, http.StatusOK},
		{"insert at 2013-08-15", "POST", "/devstoreaccount1/people", newEntity, "2013-08-15", nil, false, http.StatusCreated},
		{"read naming no format", "GET", entity, "", "2012-02-12", map[string]string{"Accept": ""}, false, http.StatusOK},
		{"read, Accept */*", "GET", entity, "", "2012-02-12", map[string]string{"Accept": "*/*"}, false, http.StatusOK},
		{"table ACL (XML)", "GET", "/devstoreaccount1/people?comp=acl", "", "2012-02-12", nil, false, http.StatusOK},
		{"service properties (XML)", "GET", "/devstoreaccount1/?restype=service&comp=properties", "", "2012-02-12", nil, false, http.StatusOK},
		{"SAS runs at its sv", "GET", entity + "?" + sas.Encode(), "", "2012-02-12", map[string]string{"Authorization": ""}, false, http.StatusOK},
		{"no x-ms-version", "GET", entity, "", "", nil, false, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, fb := newTestServer(t)
			r := signedRequest(t, tc.method, tc.target, tc.body)
			if tc.version != "" {
				r.Header.Set("x-ms-version", tc.version) // not signed by SharedKeyLite
			}
			for k, v := range tc.header {
				if v == "" {
					r.Header.Del(k)
				} else {
					r.Header.Set(k, v)
				}
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			if !tc.refused {
				if rec.Code != tc.status {
					t.Fatalf("%d %s %s", rec.Code, rec.Header().Get("x-ms-error-code"), rec.Body.String())
				}
				return
			}
			body := rec.Body.String()
			if rec.Code != http.StatusUnsupportedMediaType || rec.Header().Get("x-ms-error-code") != "JsonFormatNotSupported" ||
				!strings.HasPrefix(body, `<?xml version="1.0" encoding="utf-8"?><m:error xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"><m:code>JsonFormatNotSupported</m:code>`) ||
				!strings.Contains(body, `<m:message xml:lang="en-US">JSON format is not supported.`) ||
				!strings.HasPrefix(rec.Header().Get("Content-Type"), "application/xml") {
				t.Fatalf("%d %s %q %s", rec.Code, rec.Header().Get("x-ms-error-code"), rec.Header().Get("Content-Type"), body)
			}
			if got := rec.Header().Get("x-ms-version"); got != tc.version {
				t.Fatalf("x-ms-version %q, want the client's %q", got, tc.version)
			}
			unchanged(t, fb)
			if _, err := fb.Get(context.Background(), "people", "Smith", "Zoe"); err == nil {
				t.Fatal("the refused insert was written")
			}
			if _, err := fb.Get(context.Background(), "people", "Smith", "Ben"); err != nil {
				t.Fatalf("the refused delete was applied: %v", err)
			}
			if _, err := fb.Table(context.Background(), "newtable"); err == nil {
				t.Fatal("the refused Create Table was applied")
			}
		})
	}
}
