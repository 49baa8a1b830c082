package frontend

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"tablestore/frontend/auth"
	"tablestore/frontend/batch"
	"tablestore/internal/edm"
	pb "tablestore/proto/tablestorepb"
)

// TestDelegatedCredentialsStayInScope tries to get past a SAS's table,
// permissions and key range, and past the read-only secondary, through
// the routes the front-end reads: method tunnelling, percent-encoded and
// re-cased table names, dot segments, change sets and query batches
// naming another table or key, and the ACL and table endpoints. Every
// attempt must fail with the status and code Azure gives, and leave the
// data as it was.
func TestDelegatedCredentialsStayInScope(t *testing.T) {
	sas := func(t *testing.T, s auth.ServiceSAS) url.Values {
		t.Helper()
		if s.Table == "" {
			s.Table = "people"
		}
		s.Expiry = time.Now().Add(time.Hour)
		v, err := s.Encode(auth.DevAccount())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	acctSAS := func(t *testing.T, srt, sp string) url.Values {
		t.Helper()
		v, err := auth.AccountSAS{Services: "t", ResourceTypes: srt, Permissions: sp, Expiry: time.Now().Add(time.Hour)}.Encode(auth.DevAccount())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	readOnly := auth.ServiceSAS{Permissions: "r"}
	jonesOnly := auth.ServiceSAS{Permissions: "raud", StartPartitionKey: "Jones", EndPartitionKey: "Jones"}
	const ben = "people(PartitionKey='Smith',RowKey='Ben')"
	const otherRow = "other(PartitionKey='o',RowKey='1')"
	sub := func(method, target, body string, h http.Header) batch.Request {
		if h == nil {
			h = http.Header{}
		}
		if body != "" {
			h.Set("Content-Type", "application/json")
		}
		return batch.Request{Method: method, Target: "http://127.0.0.1:10002/devstoreaccount1/" + target, Header: h, Body: []byte(body)}
	}
	ifMatch := http.Header{"If-Match": {"*"}}
	tests := []struct {
		name   string
		cred   auth.ServiceSAS // used unless acct is set
		acct   [2]string       // account SAS srt, sp
		method string
		target string // after /devstoreaccount1/ (or the whole path when it starts with '/')
		header http.Header
		body   string
		batch  []batch.Request // POST $batch with these, answered 202
		status int             // the response's, or the single sub-response's
		code   string
	}{
		{name: "read-only SAS merges through X-HTTP-Method", cred: readOnly, method: "POST", target: ben,
			header: http.Header{"X-Http-Method": {"MERGE"}, "If-Match": {"*"}}, body: `{"X":1}`, status: 403, code: "AuthorizationPermissionMismatch"},
		{name: "read-only SAS deletes through X-HTTP-Method", cred: readOnly, method: "POST", target: ben,
			header: http.Header{"X-Http-Method": {"DELETE"}, "If-Match": {"*"}}, status: 403, code: "AuthorizationPermissionMismatch"},
		{name: "read-only SAS upserts with PATCH", cred: readOnly, method: "PATCH", target: ben, body: `{"X":1}`, status: 403, code: "AuthorizationPermissionMismatch"},
		{name: "read-only SAS upserts with MERGE", cred: readOnly, method: "MERGE", target: ben, body: `{"X":1}`, status: 403, code: "AuthorizationPermissionMismatch"},
		{name: "update-only SAS upserts (needs a and u)", cred: auth.ServiceSAS{Permissions: "u"}, method: "PUT", target: ben, body: `{"X":1}`, status: 403, code: "AuthorizationPermissionMismatch"},
		{name: "another table", cred: readOnly, method: "GET", target: "other()", status: 403, code: "AuthorizationFailure"},
		{name: "another table, percent-encoded", cred: readOnly, method: "GET", target: "%6Fther()", status: 403, code: "AuthorizationFailure"},
		{name: "another table, dot segments", cred: readOnly, method: "GET", target: "people/../other()", status: 400, code: "InvalidUri"},
		{name: "another table, double slash", cred: readOnly, method: "GET", target: "/devstoreaccount1//other()", status: 400, code: "InvalidUri"},
		{name: "another table, escaped slash", cred: readOnly, method: "GET", target: "people%2F..%2Fother()", status: 400, code: "InvalidResourceName"},
		{name: "the SAS table re-cased is the SAS table", cred: readOnly, method: "GET", target: "PEOPLE(PartitionKey='Smith',RowKey='Ben')", status: 200},
		{name: "table ACL with a service SAS", cred: auth.ServiceSAS{Permissions: "raud"}, method: "GET", target: "people?comp=acl", status: 403, code: "AuthorizationFailure"},
		{name: "set table ACL with a service SAS", cred: auth.ServiceSAS{Permissions: "raud"}, method: "PUT", target: "people?comp=acl", body: "<SignedIdentifiers />", status: 403, code: "AuthorizationFailure"},
		{name: "delete table with a service SAS", cred: auth.ServiceSAS{Permissions: "raud"}, method: "DELETE", target: "Tables('people')", status: 403, code: "AuthorizationFailure"},
		{name: "service properties with a service SAS", cred: auth.ServiceSAS{Permissions: "raud"}, method: "GET", target: "/devstoreaccount1/?restype=service&comp=properties", status: 403, code: "AuthorizationFailure"},
		{name: "point read outside the key range", cred: jonesOnly, method: "GET", target: ben, status: 403, code: "AuthorizationFailure"},
		{name: "insert outside the key range", cred: jonesOnly, method: "POST", target: "people", body: `{"PartitionKey":"Smith","RowKey":"New"}`, status: 403, code: "AuthorizationFailure"},
		{name: "change set on another table", cred: auth.ServiceSAS{Permissions: "raud"},
			batch: []batch.Request{sub("DELETE", otherRow, "", ifMatch)}, status: 403, code: "AuthorizationFailure"},
		{name: "change set, another table percent-encoded", cred: auth.ServiceSAS{Permissions: "raud"},
			batch: []batch.Request{sub("DELETE", "%6Fther(PartitionKey='o',RowKey='1')", "", ifMatch)}, status: 403, code: "AuthorizationFailure"},
		{name: "change set, read-only SAS tunnels DELETE", cred: readOnly,
			batch: []batch.Request{sub("POST", ben, "", http.Header{"If-Match": {"*"}, "X-Http-Method": {"DELETE"}})}, status: 403, code: "AuthorizationPermissionMismatch"},
		{name: "change set outside the key range", cred: jonesOnly,
			batch: []batch.Request{sub("DELETE", ben, "", ifMatch)}, status: 403, code: "AuthorizationFailure"},
		{name: "query batch on another table", cred: readOnly,
			batch: []batch.Request{sub("GET", "other()", "", nil)}, status: 403, code: "AuthorizationFailure"},
		{name: "query batch point read outside the key range", cred: jonesOnly,
			batch: []batch.Request{sub("GET", ben, "", nil)}, status: 403, code: "AuthorizationFailure"},
		{name: "query batch listing tables", cred: readOnly,
			batch: []batch.Request{sub("GET", "Tables", "", nil)}, status: 403, code: "AuthorizationFailure"},
		{name: "account SAS srt=o creates a table", acct: [2]string{"o", "rwdlacu"}, method: "POST", target: "Tables", body: `{"TableName":"made"}`, status: 403, code: "AuthorizationResourceTypeMismatch"},
		{name: "account SAS srt=o deletes a table", acct: [2]string{"o", "rwdlacu"}, method: "DELETE", target: "Tables('people')", status: 403, code: "AuthorizationResourceTypeMismatch"},
		{name: "account SAS reads an ACL", acct: [2]string{"sco", "rwdlacu"}, method: "GET", target: "people?comp=acl", status: 403, code: "AuthorizationFailure"},
		{name: "account SAS srt=c reads entities", acct: [2]string{"c", "rwdlacu"}, method: "GET", target: "people()", status: 403, code: "AuthorizationResourceTypeMismatch"},
		{name: "account SAS without a tunnels DELETE", acct: [2]string{"o", "r"}, method: "POST", target: ben,
			header: http.Header{"X-Http-Method": {"DELETE"}, "If-Match": {"*"}}, status: 403, code: "AuthorizationPermissionMismatch"},
		{name: "secondary: tunnelled MERGE", cred: auth.ServiceSAS{Permissions: "raud"}, method: "POST", target: "/devstoreaccount1-secondary/" + ben,
			header: http.Header{"X-Http-Method": {"MERGE"}, "If-Match": {"*"}}, body: `{"X":1}`, status: 403, code: "AuthorizationFailure"},
		{name: "secondary: change set", cred: auth.ServiceSAS{Permissions: "raud"}, target: "/devstoreaccount1-secondary/$batch",
			batch: []batch.Request{sub("DELETE", ben, "", ifMatch)}, status: 403, code: "AuthorizationFailure"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, fb := newTestServer(t)
			ctx := context.Background()
			if _, err := fb.CreateTable(ctx, "other"); err != nil {
				t.Fatal(err)
			}
			o := &edm.Entity{PartitionKey: "o", RowKey: "1"}
			if _, err := fb.Write(ctx, "other", "o", []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "o", RowKey: "1", Entity: edm.MarshalBinary(o)}}); err != nil {
				t.Fatal(err)
			}
			var q url.Values
			if tc.acct[0] != "" {
				q = acctSAS(t, tc.acct[0], tc.acct[1])
			} else {
				q = sas(t, tc.cred)
			}
			method, target, body := tc.method, tc.target, tc.body
			var ct string
			if tc.batch != nil {
				method = "POST"
				if target == "" {
					target = "$batch"
				}
				cs := "changeset_x"
				if len(tc.batch) == 1 && tc.batch[0].Method == http.MethodGet {
					cs = ""
				}
				body = string(batch.AppendRequestBody(nil, "batch_x", cs, tc.batch))
				ct = batch.ContentType("batch_x")
			}
			if !strings.HasPrefix(target, "/") {
				target = "/devstoreaccount1/" + target
			}
			sep := "?"
			if strings.Contains(target, "?") {
				sep = "&"
			}
			r := httptest.NewRequest(method, "http://127.0.0.1:10002"+target+sep+q.Encode(), strings.NewReader(body))
			r.Header.Set("Accept", "application/json;odata=nometadata")
			if ct != "" {
				r.Header.Set("Content-Type", ct)
			} else if body != "" && !strings.HasPrefix(body, "<") {
				r.Header.Set("Content-Type", "application/json")
			}
			for k, v := range tc.header {
				r.Header[k] = v
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			status, code, text := rec.Code, rec.Header().Get("x-ms-error-code"), rec.Body.String()
			if tc.batch != nil && rec.Code == http.StatusAccepted {
				st, bodies := subStatuses(t, rec)
				if len(st) != 1 {
					t.Fatalf("sub-responses %v: %q", st, bodies)
				}
				status, text = st[0], bodies[0]
				code = ""
				if _, after, ok := strings.Cut(text, `"code":"`); ok {
					code, _, _ = strings.Cut(after, `"`)
				}
			}
			if status != tc.status || code != tc.code {
				t.Fatalf("got %d %s, want %d %s: %.300s", status, code, tc.status, tc.code, text)
			}
			for _, k := range [][3]string{{"people", "Smith", "Ben"}, {"other", "o", "1"}} {
				if _, err := fb.Get(ctx, k[0], k[1], k[2]); err != nil {
					t.Fatalf("%v gone: %v", k, err)
				}
			}
			if _, err := fb.Table(ctx, "made"); err == nil {
				t.Fatal("table created")
			}
		})
	}
}
