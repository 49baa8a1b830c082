package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/grpc/codes"

	"tablestore/frontend/auth"
	"tablestore/frontend/batch"
	"tablestore/internal/rpcerr"
)

func batchRequest(t testing.TB, reqs []batch.Request, query string) *http.Request {
	t.Helper()
	cs := "changeset_x"
	if len(reqs) == 1 && reqs[0].Method == http.MethodGet {
		cs = ""
	}
	body := batch.AppendRequestBody(nil, "batch_x", cs, reqs)
	r := httptest.NewRequest("POST", "http://127.0.0.1:10002/devstoreaccount1/$batch"+query, strings.NewReader(string(body)))
	r.Header.Set("Content-Type", batch.ContentType("batch_x"))
	r.Header.Set("Accept", "application/json;odata=minimalmetadata")
	if query == "" {
		if err := auth.SignSharedKeyLite(r, auth.DevAccount()); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func insertOp(pk, rk string, extra string) batch.Request {
	return batch.Request{
		Method: "POST", Target: "http://127.0.0.1:10002/devstoreaccount1/people",
		Header: http.Header{"Content-Type": {"application/json"}, "Prefer": {"return-no-content"}},
		Body:   []byte(fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q%s}`, pk, rk, extra)),
	}
}

// subStatuses returns the statuses and bodies of a batch response's
// sub-responses.
func subStatuses(t *testing.T, rec *httptest.ResponseRecorder) ([]int, []string) {
	t.Helper()
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	var statuses []int
	var bodies []string
	for _, part := range strings.Split(rec.Body.String(), "HTTP/1.1 ")[1:] {
		var code int
		fmt.Sscanf(part, "%d", &code)
		statuses = append(statuses, code)
		_, body, _ := strings.Cut(part, "\r\n\r\n")
		body, _, _ = strings.Cut(body, "\r\n--")
		bodies = append(bodies, body)
	}
	return statuses, bodies
}

func TestTransactionLimits(t *testing.T) {
	many := func(n int) []batch.Request {
		out := make([]batch.Request, n)
		for i := range out {
			out[i] = insertOp("Lim", fmt.Sprintf("r%03d", i), "")
		}
		return out
	}
	big := strings.Repeat("x", 30000)
	var huge []batch.Request
	for i := range 100 {
		huge = append(huge, insertOp("Lim", fmt.Sprintf("h%03d", i), `,"A":"`+big+`","B":"`+big+`"`))
	}
	tests := []struct {
		name   string
		reqs   []batch.Request
		status int    // outer status
		sub    int    // sub-response status when 202 with one failure
		msg    string // prefix of the failure message
		n      int    // entities written in partition Lim
	}{
		{name: "100 operations", reqs: many(100), status: 202, n: 100},
		{name: "101 operations", reqs: many(101), status: 202, sub: 400, msg: "0:The batch request operation exceeds the maximum 100 changes per change set."},
		{name: "over 4 MiB", reqs: huge, status: 413},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, fb := newTestServer(t)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, batchRequest(t, tc.reqs, ""))
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %.300s", rec.Code, tc.status, rec.Body.String())
			}
			if tc.status == 413 && rec.Header().Get("x-ms-error-code") != "RequestBodyTooLarge" {
				t.Fatalf("code %s", rec.Header().Get("x-ms-error-code"))
			}
			if tc.sub != 0 {
				st, bodies := subStatuses(t, rec)
				if len(st) != 1 || st[0] != tc.sub || !strings.Contains(bodies[0], `"value":"`+tc.msg) {
					t.Fatalf("sub-responses %v %q", st, bodies)
				}
			}
			page, err := fb.Query(context.Background(), "people", Query{Top: 1000, HasNext: true, NextPK: "Lim"})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range page.Entities {
				if e.PartitionKey == "Lim" {
					n++
				}
			}
			if n != tc.n {
				t.Fatalf("%d entities written, want %d", n, tc.n)
			}
		})
	}
}

func TestTransactionBackendErrors(t *testing.T) {
	tests := []struct {
		name   string
		fail   error
		status int
		sub    int
		msg    string
	}{
		{"indexed conflict", rpcerr.WithIndex(codes.AlreadyExists, rpcerr.ReasonEntityAlreadyExists, "exists", 1), 202, 409, "1:The specified entity already exists."},
		{"entity too large after merge", rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidEntity, "", map[string]string{rpcerr.MetaIndex: "0", rpcerr.MetaAzureCode: "EntityTooLarge"}), 202, 400, "0:The entity is larger than the maximum allowed size (1MB)."},
		{"server busy is the whole request's", rpcerr.New(codes.Unavailable, rpcerr.ReasonServerBusy, "", nil), 503, 0, ""},
		{"timeout is the whole request's", context.DeadlineExceeded, 500, 0, ""},
		// The router's budget spent on a range that stayed frozen or
		// stale: the partition server named operation 0 (the apply's
		// range check), but the write is not that operation's fault.
		{"indexed stale range is the whole request's", rpcerr.WithIndex(codes.FailedPrecondition, rpcerr.ReasonStaleRange, "frozen", 0), 503, 0, ""},
		{"unindexed client error pinned on 0", rpcerr.New(codes.NotFound, rpcerr.ReasonTableNotFound, "", nil), 202, 404, "0:The table specified does not exist."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, fb := newTestServer(t)
			fb.failNext = tc.fail
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, batchRequest(t, []batch.Request{insertOp("E", "1", ""), insertOp("E", "2", "")}, ""))
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body.String())
			}
			if tc.sub == 0 {
				return
			}
			st, bodies := subStatuses(t, rec)
			if len(st) != 1 || st[0] != tc.sub || !strings.Contains(bodies[0], `"value":"`+tc.msg) {
				t.Fatalf("sub-responses %v %q", st, bodies)
			}
		})
	}
}

// TestQueryBatchServerFailure: a query batch whose query fails on the
// server side (busy, timed out) is answered with that status for the whole
// request, as a change set's is, so that clients retry it; a client error
// stays the 202's single sub-response, prefixed "0:".
func TestQueryBatchServerFailure(t *testing.T) {
	get := batch.Request{Method: "GET", Target: "http://127.0.0.1:10002/devstoreaccount1/people(PartitionKey='Adams',RowKey='Zed')",
		Header: http.Header{"Accept": {"application/json;odata=nometadata"}}}
	for _, tc := range []struct {
		name   string
		fail   error
		status int
		sub    int
	}{
		{"busy", rpcerr.New(codes.Unavailable, rpcerr.ReasonServerBusy, "", nil), 503, 0},
		{"timeout", context.DeadlineExceeded, 500, 0},
		{"not found", rpcerr.New(codes.NotFound, rpcerr.ReasonEntityNotFound, "", nil), 202, 404},
		{"found", nil, 202, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, fb := newTestServer(t)
			fb.failNext = tc.fail
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, batchRequest(t, []batch.Request{get}, ""))
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body.String())
			}
			if tc.sub == 0 {
				return
			}
			if st, bodies := subStatuses(t, rec); len(st) != 1 || st[0] != tc.sub {
				t.Fatalf("sub-responses %v %q, want one %d", st, bodies, tc.sub)
			}
		})
	}
}

func TestTransactionSAS(t *testing.T) {
	sas := func(perms string, kr auth.KeyRange) string {
		v, err := auth.ServiceSAS{
			Table: "people", Permissions: perms, Expiry: time.Now().Add(time.Hour),
			StartPartitionKey: kr.StartPartitionKey, StartRowKey: kr.StartRowKey, EndPartitionKey: kr.EndPartitionKey, EndRowKey: kr.EndRowKey,
		}.Encode(auth.DevAccount())
		if err != nil {
			t.Fatal(err)
		}
		return "?" + v.Encode()
	}
	del := batch.Request{Method: "DELETE", Target: "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')", Header: http.Header{"If-Match": {"*"}}}
	tests := []struct {
		name  string
		query string
		reqs  []batch.Request
		sub   []int
		code  string
	}{
		{"allowed", sas("ad", auth.KeyRange{}), []batch.Request{insertOp("Smith", "Zed", ""), del}, []int{204, 204}, ""},
		{"missing permission on second op", sas("a", auth.KeyRange{}), []batch.Request{insertOp("Smith", "Zed", ""), del}, []int{403}, "AuthorizationPermissionMismatch"},
		{"outside key range", sas("ad", auth.KeyRange{StartPartitionKey: "Smith", StartRowKey: "C"}), []batch.Request{insertOp("Smith", "Zed", ""), del}, []int{403}, "AuthorizationFailure"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, batchRequest(t, tc.reqs, tc.query))
			st, bodies := subStatuses(t, rec)
			if fmt.Sprint(st) != fmt.Sprint(tc.sub) {
				t.Fatalf("statuses %v, want %v: %q", st, tc.sub, bodies)
			}
			if tc.code != "" && !strings.Contains(bodies[0], `"code":"`+tc.code+`"`) {
				t.Fatalf("body %q, want code %s", bodies[0], tc.code)
			}
		})
	}
}

func TestLenientEntityRoute(t *testing.T) {
	tests := []struct {
		path   string
		ok     bool
		pk, rk string
	}{
		{"/t1x(PartitionKey='p'1',RowKey='r')", true, "p'1", "r"},
		{"/t1x(PartitionKey='p%271',RowKey='r%27')", true, "p'1", "r'"},
		{"/t1x(RowKey='r'',PartitionKey='p')", true, "p", "r'"},
		{"/t1x(PartitionKey='a',RowKey='b',RowKey='c')", false, "", ""},
		{"/t1x(PartitionKey='a',RowKey='b'", false, "", ""},
		{"/t1x", false, "", ""},
		{"/1bad(PartitionKey='a',RowKey='b')", false, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			rt, ok := lenientEntityRoute(tc.path)
			if ok != tc.ok || rt.pk != tc.pk || rt.rk != tc.rk {
				t.Fatalf("got %+v %v", rt, ok)
			}
		})
	}
}

// TestSDKTransaction drives SubmitTransaction of the official SDK against
// the fake backend: success, failure with nothing applied, quotes in keys.
func TestSDKTransaction(t *testing.T) {
	ctx := context.Background()
	svc, _ := newSDKClient(t)
	if _, err := svc.CreateTable(ctx, "txn", nil); err != nil {
		t.Fatal(err)
	}
	c := svc.NewClient("txn")
	ent := func(rk string, v int) []byte {
		b, _ := json.Marshal(map[string]any{"PartitionKey": "p'k", "RowKey": rk, "V": v})
		return b
	}
	_, err := c.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: ent("a", 1)},
		{ActionType: aztables.TransactionTypeAdd, Entity: ent("b", 2)},
		{ActionType: aztables.TransactionTypeInsertReplace, Entity: ent("c", 3)},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeUpdateMerge, Entity: ent("a", 10)},
		{ActionType: aztables.TransactionTypeDelete, Entity: ent("b", 0)},
		{ActionType: aztables.TransactionTypeAdd, Entity: ent("c", 0)},
	}, nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "EntityAlreadyExists") {
		t.Fatalf("want a ResponseError with EntityAlreadyExists, got %v", err)
	}
	got, err := c.GetEntity(ctx, "p'k", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got.Value), `"V":1`) {
		t.Fatalf("failed transaction applied: %s", got.Value)
	}
	if _, err := c.GetEntity(ctx, "p'k", "b", nil); err != nil {
		t.Fatalf("failed transaction deleted b: %v", err)
	}
	_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeUpdateMerge, Entity: ent("a", 10)},
		{ActionType: aztables.TransactionTypeDelete, Entity: ent("b", 0)},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = c.GetEntity(ctx, "p'k", "a", nil)
	if !strings.Contains(string(got.Value), `"V":10`) {
		t.Fatalf("merge not applied: %s", got.Value)
	}
}

// TestTransactionInsertFullMetadata checks the entity a change set's insert
// returns with Accept: application/json;odata=fullmetadata: like Insert
// Entity's own answer, odata.type names the account and the table
// ("odata.type":"myaccount.Customers" in the full metadata example of the
// REST reference's "Payload format for Table service operations"). It once
// came out as ".people", the account missing.
func TestTransactionInsertFullMetadata(t *testing.T) {
	s, _ := newTestServer(t)
	op := insertOp("Full", "1", `,"N":1`)
	op.Header = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json;odata=fullmetadata"}}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, batchRequest(t, []batch.Request{op}, ""))
	st, bodies := subStatuses(t, rec)
	if len(st) != 1 || st[0] != http.StatusCreated {
		t.Fatalf("sub-responses %v %q", st, bodies)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(bodies[0]), &got); err != nil {
		t.Fatalf("body %q: %v", bodies[0], err)
	}
	if got["odata.type"] != "devstoreaccount1.people" {
		t.Fatalf("odata.type %v, want devstoreaccount1.people: %s", got["odata.type"], bodies[0])
	}
	if got["odata.id"] != "http://127.0.0.1:10002/devstoreaccount1/people(PartitionKey='Full',RowKey='1')" {
		t.Fatalf("odata.id %v: %s", got["odata.id"], bodies[0])
	}
}

// TestTransactionContentIDEcho checks that a change set operation's
// Content-ID, sent among the operation's own headers (as the .NET storage
// SDKs and azure-table-node do), comes back as the first header of its
// sub-response, and that operations without one get none. The service's
// answer, recorded by azure-table-node's tests (test/sas.js, 2014): request
// "POST …/testtable HTTP/1.1\r\ncontent-id: 0…", response "HTTP/1.1 204 No
// Content\r\nContent-ID: 0\r\nX-Content-Type-Options: nosniff…"; the REST
// reference's "Performing entity group transactions" shows the same header
// on its sample error response, so a failing operation's Content-ID is
// echoed too.
func TestTransactionContentIDEcho(t *testing.T) {
	withID := func(op batch.Request, id string) batch.Request {
		op.Header = op.Header.Clone()
		op.Header.Set("Content-ID", id)
		return op
	}
	del := batch.Request{Method: "DELETE", Target: "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')", Header: http.Header{"If-Match": {"*"}}}
	tests := []struct {
		name string
		reqs []batch.Request
		want []string // each sub-response's Content-ID line, "" for none
	}{
		{"success", []batch.Request{withID(insertOp("Smith", "Zed", ""), "0"), withID(del, "1"), insertOp("Smith", "Yan", "")}, []string{"Content-ID: 0", "Content-ID: 1", ""}},
		{"failure names the failing operation's", []batch.Request{withID(insertOp("Smith", "Zed", ""), "5"), withID(insertOp("Smith", "Ben", ""), "6")}, []string{"Content-ID: 6"}},
		{"rule broken", []batch.Request{withID(insertOp("Smith", "Zed", ""), "5"), withID(insertOp("Other", "Zed", ""), "x7")}, []string{"Content-ID: x7"}},
		{"none sent", []batch.Request{insertOp("Smith", "Zed", ""), insertOp("Smith", "Yan", "")}, []string{"", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, batchRequest(t, tc.reqs, ""))
			parts := strings.Split(rec.Body.String(), "HTTP/1.1 ")[1:]
			if len(parts) != len(tc.want) {
				t.Fatalf("%d sub-responses, want %d: %s", len(parts), len(tc.want), rec.Body.String())
			}
			for i, p := range parts {
				lines := strings.Split(p, "\r\n")
				got := ""
				if strings.HasPrefix(lines[1], "Content-ID:") {
					got = lines[1]
				}
				count := 0 // the echo appears once, or not at all
				if tc.want[i] != "" {
					count = 1
				}
				if got != tc.want[i] || strings.Count(p, "Content-ID") != count {
					t.Fatalf("sub-response %d: Content-ID line %q, want %q:\n%s", i, got, tc.want[i], p)
				}
			}
		})
	}
}
