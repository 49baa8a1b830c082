package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/frontend/auth"
	"tablestore/internal/edm"
	"tablestore/internal/filter"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

func TestParseRoute(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		decoded bool
		want    route
		code    string // expected error code, "" for success
		msg     string // substring of the message
	}{
		{name: "service", path: "/", want: route{kind: routeService}},
		{name: "service empty", path: "", want: route{kind: routeService}},
		{name: "tables", path: "/Tables", want: route{kind: routeTables}},
		{name: "tables parens", path: "/Tables()", want: route{kind: routeTables}},
		{name: "tables lower", path: "/tables", want: route{kind: routeTables}},
		{name: "table", path: "/Tables('abc')", want: route{kind: routeTable, table: "abc"}},
		{name: "table escaped", path: "/Tables(%27abc%27)", want: route{kind: routeTable, table: "abc"}},
		{name: "table named key", path: "/Tables(TableName='abc')", want: route{kind: routeTable, table: "abc"}},
		{name: "batch", path: "/$batch", want: route{kind: routeBatch}},
		{name: "entity set", path: "/people", want: route{kind: routeEntitySet, table: "people"}},
		{name: "entity set parens", path: "/people()", want: route{kind: routeEntitySet, table: "people"}},
		{name: "entity", path: "/people(PartitionKey='a',RowKey='b')", want: route{kind: routeEntity, table: "people", pk: "a", rk: "b"}},
		{name: "entity reversed", path: "/people(RowKey='b',PartitionKey='a')", want: route{kind: routeEntity, table: "people", pk: "a", rk: "b"}},
		{name: "entity empty keys", path: "/people(PartitionKey='',RowKey='')", want: route{kind: routeEntity, table: "people"}},
		{name: "entity doubled quotes escaped", path: "/people(PartitionKey='p%20k%27%271',RowKey='r%2F%C3%BC')", want: route{kind: routeEntity, table: "people", pk: "p k'1", rk: "r/ü"}},
		{name: "entity doubled quotes literal", path: "/people(PartitionKey='p''1',RowKey='''')", want: route{kind: routeEntity, table: "people", pk: "p'1", rk: "'"}},
		{name: "entity escaped delimiters", path: "/people(PartitionKey=%27a%27,RowKey=%27b%27)", want: route{kind: routeEntity, table: "people", pk: "a", rk: "b"}},
		{name: "plus is literal in paths", path: "/people(PartitionKey='a+b',RowKey='c%2Bd')", want: route{kind: routeEntity, table: "people", pk: "a+b", rk: "c+d"}},
		{name: "decoded path", path: "/people(PartitionKey='a b',RowKey='x%y')", decoded: true, want: route{kind: routeEntity, table: "people", pk: "a b", rk: "x%y"}},
		{name: "spaces around", path: "/people(PartitionKey= 'a' , RowKey='b')", want: route{kind: routeEntity, table: "people", pk: "a", rk: "b"}},
		{name: "partial key", path: "/people(PartitionKey='a')", code: "InvalidInput", msg: "number of keys"},
		{name: "positional key", path: "/people('a')", code: "InvalidInput", msg: "number of keys"},
		{name: "undoubled quote", path: "/people(PartitionKey='it%27s',RowKey='x')", code: "InvalidInput", msg: "query syntax"},
		{name: "unknown key", path: "/people(PartitionKey='a',Foo='b')", code: "InvalidInput", msg: "query syntax"},
		{name: "three keys", path: "/people(PartitionKey='a',RowKey='b',RowKey='c')", code: "InvalidInput"},
		{name: "unquoted", path: "/people(PartitionKey=a,RowKey=b)", code: "InvalidInput", msg: "query syntax"},
		{name: "unterminated", path: "/people(PartitionKey='a',RowKey='b", code: "InvalidInput", msg: "query syntax"},
		{name: "bad escape", path: "/people(PartitionKey='%zz',RowKey='b')", code: "InvalidInput", msg: "query syntax"},
		{name: "sub path", path: "/people/x", code: "InvalidUri"},
		{name: "bad table chars", path: "/my-table()", code: "InvalidResourceName"},
		{name: "table starts with digit", path: "/1abc", code: "InvalidResourceName"},
		{name: "table too short", path: "/ab", code: "OutOfRangeInput"},
		{name: "table too long", path: "/" + strings.Repeat("a", 64), code: "OutOfRangeInput"},
		{name: "table max length", path: "/" + strings.Repeat("a", 63), want: route{kind: routeEntitySet, table: strings.Repeat("a", 63)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRoute(tc.path, tc.decoded)
			if tc.code != "" {
				if err == nil {
					t.Fatalf("want %s, got %+v", tc.code, got)
				}
				a := classify(err)
				if a.code != tc.code || !strings.Contains(a.msg, tc.msg) {
					t.Fatalf("got %s %q, want %s containing %q", a.code, a.msg, tc.code, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestResourcePath(t *testing.T) {
	s, _ := newTestServer(t)
	tests := []struct {
		name, host, target   string
		wantPath             string
		hostStyle, secondary bool
		wantErr              bool
	}{
		{name: "path style", host: "127.0.0.1:10002", target: "/devstoreaccount1/people()", wantPath: "/people()"},
		{name: "path style root", host: "127.0.0.1:10002", target: "/devstoreaccount1", wantPath: ""},
		{name: "host style", host: "devstoreaccount1.table.localhost:10002", target: "/people()", wantPath: "/people()", hostStyle: true},
		{name: "host style with account path", host: "devstoreaccount1.table.localhost", target: "/devstoreaccount1/people()", wantPath: "/people()"},
		{name: "other account", host: "127.0.0.1", target: "/other/people()", wantErr: true},
		{name: "account prefix only", host: "127.0.0.1", target: "/devstoreaccount12/people()", wantErr: true},
		{name: "secondary path style", host: "127.0.0.1:10002", target: "/devstoreaccount1-secondary/people()", wantPath: "/people()", secondary: true},
		{name: "secondary host style", host: "devstoreaccount1-secondary.table.localhost:10002", target: "/people()", wantPath: "/people()", hostStyle: true, secondary: true},
		{name: "IP host is never production style", host: "127.0.0.1:10002", target: "/people()", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "http://"+tc.host+tc.target, nil)
			p, _, a, err := s.resourcePath(r)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v", err)
			}
			if err == nil && (p != tc.wantPath || a.hostStyle != tc.hostStyle || a.secondary != tc.secondary || a.name != "devstoreaccount1") {
				t.Fatalf("got %q %+v", p, a)
			}
		})
	}
}

func TestContinuationTokens(t *testing.T) {
	for _, key := range []string{"", "Smith", "p k'1", "rü", "a+b/c", strings.Repeat("x", 1024), strings.Repeat("行", 1024), "1!2!ab", "~~~"} {
		tok := encodeToken(key)
		if !strings.HasPrefix(tok, "1!") {
			t.Errorf("token %q lacks the Azure shape", tok)
		}
		if got, ok := decodeToken(tok); got != key || !ok {
			t.Errorf("round trip %q: token %q decodes to %q, %v", key, tok, got, ok)
		}
	}
	if got := encodeToken("Smith"); got != "1!8!U21pdGg-" {
		t.Errorf("Smith encodes to %q, Azure writes 1!8!U21pdGg-", got)
	}
	lenient := map[string]string{
		"1!8!U21pdGg-": "Smith",
		"1!8!U21pdGg=": "Smith",
		"1!8!U21pdGg":  "Smith",
		"Smith":        "Smith", // not a token: the key itself
		"1!x!abc":      "1!x!abc",
		"1!abc":        "1!abc",
		"rü":           "rü",
		"1!0!":         "",
		"1!4!YSti":     "a+b",
		"1!4!YT8_":     "a??",
	}
	for tok, want := range lenient {
		if got, ok := decodeToken(tok); got != want || !ok {
			t.Errorf("decodeToken(%q) = %q, %v; want %q", tok, got, ok, want)
		}
	}
	// Malformed: the token shape with a key that is not base64, or not
	// UTF-8 text; a value that is not UTF-8 text.
	for _, tok := range []string{"1!4!%%%", "1!1!Q", "1!4!U2*p", "1!4!_w--", "1!4!/w==", "1!4!wyg-", "\xff", "Sm\xc3"} {
		if got, ok := decodeToken(tok); ok {
			t.Errorf("decodeToken(%q) = %q, ok; want malformed", tok, got)
		}
	}
	// A '+' turned into a space by a query string is restored.
	plus := encodeToken("~~~") // base64 "fn5+"
	if got, ok := decodeToken(strings.ReplaceAll(plus, "+", " ")); got != "~~~" || !ok {
		t.Errorf("space-for-plus token decodes to %q, %v", got, ok)
	}
}

func TestNegotiate(t *testing.T) {
	tests := []struct {
		format string
		accept []string
		want   edm.Metadata
		atom   bool
		bad    bool
	}{
		{want: edm.MinimalMetadata},
		{accept: []string{"*/*"}, want: edm.MinimalMetadata},
		{accept: []string{"application/json"}, want: edm.MinimalMetadata},
		{accept: []string{"application/json;odata=nometadata"}, want: edm.NoMetadata},
		{accept: []string{"application/json; odata=fullmetadata"}, want: edm.FullMetadata},
		{accept: []string{"application/json;odata=minimalmetadata"}, want: edm.MinimalMetadata},
		{accept: []string{"application/atom+xml"}, atom: true},
		{accept: []string{"application/atom+xml,application/xml"}, atom: true},
		{accept: []string{"application/atom+xml, application/json;odata=nometadata"}, want: edm.NoMetadata},
		{accept: []string{"text/html"}, want: edm.MinimalMetadata},
		{format: "application/json;odata=fullmetadata", accept: []string{"application/json;odata=nometadata"}, want: edm.FullMetadata},
		{format: "json", want: edm.MinimalMetadata},
		{format: "atom", atom: true},
		{format: "text/plain", bad: true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s|%s", tc.format, strings.Join(tc.accept, ";")), func(t *testing.T) {
			got, err := negotiate(tc.format, tc.accept)
			switch {
			case tc.atom:
				if err != errAtomNotSupported {
					t.Fatalf("want AtomFormatNotSupported, got %v", err)
				}
			case tc.bad:
				if classify(err).code != "InvalidQueryParameterValue" {
					t.Fatalf("want InvalidQueryParameterValue, got %v", err)
				}
			case err != nil:
				t.Fatal(err)
			case got != tc.want:
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	_, filterSyntax := filter.Parse("A eq")
	_, filterUnsupported := filter.Parse("startswith(A,'x')")
	tests := []struct {
		name   string
		err    error
		status int
		code   string
		retry  time.Duration
	}{
		{"api error", errMissingIfMatch, 400, "MissingRequiredHeader", 0},
		{"max bytes", &http.MaxBytesError{Limit: 1}, 413, "RequestBodyTooLarge", 0},
		{"auth failed", fmt.Errorf("x: %w", auth.ErrAuthenticationFailed), 403, "AuthenticationFailed", 0},
		{"auth permission", auth.ErrAuthorizationPermissionMismatch, 403, "AuthorizationPermissionMismatch", 0},
		{"auth resource type", auth.ErrAuthorizationResourceTypeMismatch, 403, "AuthorizationResourceTypeMismatch", 0},
		{"auth key range", auth.ErrKeyOutOfRange, 403, "AuthorizationFailure", 0},
		{"filter syntax", filterSyntax, 400, "InvalidInput", 0},
		{"filter too many", filter.ErrTooManyComparisons, 400, "InvalidInput", 0},
		{"filter unsupported", filterUnsupported, 501, "NotImplemented", 0},
		{"edm invalid", fmt.Errorf("%w: bad", edm.ErrInvalidInput), 400, "InvalidInput", 0},
		{"edm value too large", edm.ErrPropertyValueTooLarge, 400, "PropertyValueTooLarge", 0},
		{"edm entity too large", edm.ErrEntityTooLarge, 400, "EntityTooLarge", 0},
		{"edm too many", edm.ErrTooManyProperties, 400, "TooManyProperties", 0},
		{"edm name invalid", edm.ErrPropertyNameInvalid, 400, "PropertyNameInvalid", 0},
		{"edm name too long", edm.ErrPropertyNameTooLong, 400, "PropertyNameTooLong", 0},
		{"edm need value", edm.ErrPropertiesNeedValue, 400, "PropertiesNeedValue", 0},
		{"edm key too large", fmt.Errorf("RowKey: %w", edm.ErrKeyValueTooLarge), 400, "KeyValueTooLarge", 0},
		{"edm corrupt", edm.ErrCorrupt, 500, "InternalError", 0},
		{"entity exists", rpcerr.New(codes.AlreadyExists, rpcerr.ReasonEntityAlreadyExists, "", nil), 409, "EntityAlreadyExists", 0},
		{"entity missing", rpcerr.New(codes.NotFound, rpcerr.ReasonEntityNotFound, "", nil), 404, "ResourceNotFound", 0},
		{"condition", rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonConditionNotSatisfied, "", nil), 412, "UpdateConditionNotSatisfied", 0},
		{"table missing", rpcerr.New(codes.NotFound, rpcerr.ReasonTableNotFound, "", nil), 404, "TableNotFound", 0},
		{"table exists", rpcerr.New(codes.AlreadyExists, rpcerr.ReasonTableAlreadyExists, "", nil), 409, "TableAlreadyExists", 0},
		{"invalid input", rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, "", nil), 400, "InvalidInput", 0},
		{"invalid name", rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidName, "", nil), 400, "InvalidResourceName", 0},
		{"filter invalid", rpcerr.New(codes.InvalidArgument, rpcerr.ReasonFilterInvalid, "", nil), 400, "InvalidInput", 0},
		{"server busy hint", rpcerr.New(codes.Unavailable, rpcerr.ReasonServerBusy, "", map[string]string{rpcerr.MetaRetryAfterMs: "250"}), 503, "ServerBusy", 250 * time.Millisecond},
		{"not leader", rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, "", nil), 503, "ServerBusy", time.Second},
		{"stale range", rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonStaleRange, "", nil), 503, "ServerBusy", time.Second},
		{"unavailable reason", rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "", nil), 503, "ServerBusy", time.Second},
		{"range not found", rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "", nil), 503, "ServerBusy", time.Second},
		{"not leader deadline", rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonNotLeader, "", nil), 500, "OperationTimedOut", 0},
		{"grpc deadline", rpcerr.New(codes.DeadlineExceeded, "", "", nil), 500, "OperationTimedOut", 0},
		{"ctx deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), 500, "OperationTimedOut", 0},
		{"grpc unavailable", rpcerr.New(codes.Unavailable, "", "", nil), 503, "ServerBusy", time.Second},
		{"grpc exhausted", rpcerr.New(codes.ResourceExhausted, "", "", nil), 503, "ServerBusy", time.Second},
		{"grpc not found", rpcerr.New(codes.NotFound, "", "", nil), 404, "ResourceNotFound", 0},
		{"grpc unimplemented", rpcerr.New(codes.Unimplemented, "", "", nil), 501, "NotImplemented", 0},
		{"grpc internal", rpcerr.New(codes.Internal, "", "", nil), 500, "InternalError", 0},
		{"plain error", errors.New("boom"), 500, "InternalError", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := classify(tc.err)
			if a.status != tc.status || a.code != tc.code || a.retryAfter != tc.retry {
				t.Fatalf("got %d %s retry %v, want %d %s retry %v", a.status, a.code, a.retryAfter, tc.status, tc.code, tc.retry)
			}
			if a.msg == "" {
				t.Fatal("empty message")
			}
		})
	}
}

func TestConfig(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	c.RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage == "" {
			t.Errorf("flag %s has no help", f.Name)
		}
		if strings.ToLower(f.Name) != f.Name || strings.Contains(f.Name, "_") {
			t.Errorf("flag %s is not kebab-case", f.Name)
		}
	})
	if err := fs.Parse([]string{"-http-addr", "0.0.0.0:9999", "-account-name", "acct1", "-request-timeout", "5s", "-max-body-bytes", "2000000", "-host-style=false"}); err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "0.0.0.0:9999" || c.AccountName != "acct1" || c.RequestTimeout != 5*time.Second || c.MaxBodyBytes != 2000000 || c.HostStyle {
		t.Fatalf("flags not applied: %+v", c)
	}
	bad := []func(*Config){
		func(c *Config) { c.HTTPAddr = "" },
		func(c *Config) { c.HTTPAddr = "nohostport" },
		func(c *Config) { c.AccountName = "Dev_Account" },
		func(c *Config) { c.AccountKey = "not base64!" },
		func(c *Config) { c.MaxBodyBytes = 10 },
		func(c *Config) { c.RequestTimeout = 0 },
	}
	for i, mutate := range bad {
		c := DefaultConfig()
		mutate(&c)
		if c.Validate() == nil {
			t.Errorf("bad config %d accepted", i)
		}
	}
}

// panicBackend panics on every call.
type panicBackend struct{ *fakeBackend }

func (panicBackend) Get(context.Context, string, string, string) (*edm.Entity, error) {
	panic("backend exploded")
}

func signedRequest(t testing.TB, method, target, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(method, "http://127.0.0.1:10002"+target, strings.NewReader(body))
	if body == "" {
		r.ContentLength = 0
	}
	r.Header.Set("Accept", "application/json;odata=nometadata")
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if err := auth.SignSharedKeyLite(r, auth.DevAccount()); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRecoverMiddleware(t *testing.T) {
	s, err := NewServer(DefaultConfig(), panicBackend{newFakeBackend()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, signedRequest(t, "GET", "/devstoreaccount1/people(PartitionKey='a',RowKey='b')", ""))
	if rec.Code != 500 || rec.Header().Get("x-ms-error-code") != "InternalError" {
		t.Fatalf("got %d %s", rec.Code, rec.Header().Get("x-ms-error-code"))
	}
}

func TestBodyLimits(t *testing.T) {
	s, _ := newTestServer(t)
	tests := []struct {
		name string
		body string
		code string
	}{
		{"over cap", `{"PartitionKey":"a","RowKey":"b","S":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`, "RequestBodyTooLarge"},
		{"property too large", `{"PartitionKey":"a","RowKey":"b","S":"` + strings.Repeat("x", 40000) + `"}`, "PropertyValueTooLarge"},
		{"entity too large", entityOfSize(1100000), "EntityTooLarge"},
		{"key too large", `{"PartitionKey":"` + strings.Repeat("k", 1025) + `","RowKey":"b"}`, "KeyValueTooLarge"},
		{"too many properties", manyProps(253), "TooManyProperties"},
		{"empty body", ``, "InvalidInput"},
		{"array body", `[]`, "InvalidInput"},
		{"trailing garbage", `{"PartitionKey":"a","RowKey":"b"} x`, "InvalidInput"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, signedRequest(t, "POST", "/devstoreaccount1/people", tc.body))
			if got := rec.Header().Get("x-ms-error-code"); got != tc.code {
				t.Fatalf("got %d %s, want %s: %s", rec.Code, got, tc.code, rec.Body.String())
			}
		})
	}
	// Nothing was written by any of them.
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, signedRequest(t, "GET", "/devstoreaccount1/people()?$filter=PartitionKey%20eq%20%27a%27", ""))
	if !strings.Contains(rec.Body.String(), `"value":[]`) {
		t.Fatalf("partial write: %s", rec.Body.String())
	}
}

func entityOfSize(n int) string {
	var b strings.Builder
	b.WriteString(`{"PartitionKey":"a","RowKey":"b"`)
	chunk := strings.Repeat("y", 30000)
	for i := 0; b.Len() < n/2+1000; i++ {
		fmt.Fprintf(&b, `,"P%d":"%s"`, i, chunk)
	}
	b.WriteString("}")
	return b.String()
}

func manyProps(n int) string {
	var b strings.Builder
	b.WriteString(`{"PartitionKey":"a","RowKey":"b"`)
	for i := range n {
		fmt.Fprintf(&b, `,"P%d":1`, i)
	}
	b.WriteString("}")
	return b.String()
}

func TestCommonHeaders(t *testing.T) {
	s, _ := newTestServer(t)
	r := signedRequest(t, "GET", "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')", "")
	r.Header.Set("x-ms-version", "2021-12-02")
	r.Header.Set("x-ms-client-request-id", "abc-123")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, r)
	h := rec.Header()
	if h.Get("x-ms-version") != "2021-12-02" || h.Get("x-ms-client-request-id") != "abc-123" {
		t.Fatalf("headers not echoed: %v", h)
	}
	if !reUUID.MatchString(h.Get("x-ms-request-id")) {
		t.Fatalf("request id %q", h.Get("x-ms-request-id"))
	}
	if _, err := http.ParseTime(h.Get("Date")); err != nil {
		t.Fatal(err)
	}
	if h.Get("ETag") == "" {
		t.Fatal("no ETag on a point read")
	}
	// Two requests get different ids.
	rec2 := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec2, signedRequest(t, "GET", "/devstoreaccount1/Tables", ""))
	if rec2.Header().Get("x-ms-request-id") == h.Get("x-ms-request-id") {
		t.Fatal("request ids repeat")
	}
}

func TestOptionsPreflight(t *testing.T) {
	s, _ := newTestServer(t)
	r := signedRequest(t, "OPTIONS", "/devstoreaccount1/people()", "")
	r.Header.Set("Origin", "http://example.com")
	r.Header.Set("Access-Control-Request-Method", "GET")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, r)
	if rec.Code != 403 || rec.Header().Get("x-ms-error-code") != "CorsPreflightFailure" {
		t.Fatalf("got %d %s", rec.Code, rec.Header().Get("x-ms-error-code"))
	}
}

func TestServiceSASClipsQueries(t *testing.T) {
	s, _ := newTestServer(t)
	sas, err := auth.ServiceSAS{
		Table: "people", Permissions: "raud", Expiry: time.Now().Add(time.Hour),
		StartPartitionKey: "Jones", EndPartitionKey: "Smith", EndRowKey: "Ben",
	}.Encode(auth.DevAccount())
	if err != nil {
		t.Fatal(err)
	}
	get := func(target string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://127.0.0.1:10002"+target, nil)
		r.Header.Set("Accept", "application/json;odata=nometadata")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		return rec
	}
	rec := get("/devstoreaccount1/people()?" + sas.Encode())
	var body struct{ Value []map[string]any }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	var keys []string
	for _, e := range body.Value {
		keys = append(keys, e["PartitionKey"].(string)+"/"+e["RowKey"].(string))
	}
	if fmt.Sprint(keys) != "[Jones/Ann Smith/Ben]" {
		t.Fatalf("clipped query returned %v", keys)
	}
	if rec.Header().Get("x-ms-continuation-NextPartitionKey") != "" {
		t.Fatal("continuation past the SAS range")
	}
	// A point read outside the range is refused.
	rec = get("/devstoreaccount1/people(PartitionKey='Adams',RowKey='Zed')?" + sas.Encode())
	if rec.Code != 403 {
		t.Fatalf("point read outside SAS range: %d", rec.Code)
	}
	// Table operations are not allowed with a service SAS.
	rec = get("/devstoreaccount1/Tables?" + sas.Encode())
	if rec.Code != 403 || rec.Header().Get("x-ms-error-code") != "AuthorizationFailure" {
		t.Fatalf("list tables with service SAS: %d %s", rec.Code, rec.Header().Get("x-ms-error-code"))
	}
}

func TestServeAndShutdown(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	s, err := NewServer(cfg, newFakeBackend(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	r := signedRequest(t, "GET", "/devstoreaccount1/Tables", "")
	r.URL.Host = ln.Addr().String()
	r.URL.Scheme = "http"
	r.RequestURI = ""
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after Shutdown", err)
	}
}

func TestWriteOpsSentToBackend(t *testing.T) {
	// The HTTP verbs map to the right op kinds and conditions.
	rb := &recordingBackend{fakeBackend: newFakeBackend()}
	seedFixture(t, rb.fakeBackend)
	s, err := NewServer(DefaultConfig(), rb, nil)
	if err != nil {
		t.Fatal(err)
	}
	etag := `W/"datetime'2024-01-02T03%3A04%3A11.1234567Z'"`
	wantNano := time.Date(2024, 1, 2, 3, 4, 11, 123456700, time.UTC).UnixNano()
	tests := []struct {
		name, method, xmethod, ifMatch string
		kind                           pb.OpKind
		any                            bool
		nano                           int64
	}{
		{"insert or replace", "PUT", "", "", pb.OpKind_OP_KIND_INSERT_OR_REPLACE, false, 0},
		{"replace any", "PUT", "", "*", pb.OpKind_OP_KIND_REPLACE, true, 0},
		{"replace etag", "PUT", "", etag, pb.OpKind_OP_KIND_REPLACE, false, wantNano},
		{"insert or merge", "PATCH", "", "", pb.OpKind_OP_KIND_INSERT_OR_MERGE, false, 0},
		{"merge verb", "MERGE", "", "*", pb.OpKind_OP_KIND_MERGE, true, 0},
		{"tunnelled merge", "POST", "MERGE", etag, pb.OpKind_OP_KIND_MERGE, false, wantNano},
		{"tunnelled upsert", "POST", "MERGE", "", pb.OpKind_OP_KIND_INSERT_OR_MERGE, false, 0},
		{"delete any", "DELETE", "", "*", pb.OpKind_OP_KIND_DELETE, true, 0},
		{"tunnelled delete", "POST", "DELETE", etag, pb.OpKind_OP_KIND_DELETE, false, wantNano},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"X":1}`
			if tc.method == "DELETE" || tc.xmethod == "DELETE" {
				body = ""
			}
			r := signedRequest(t, tc.method, "/devstoreaccount1/people(PartitionKey='Smith',RowKey='John')", body)
			if tc.xmethod != "" {
				r.Header.Set("X-HTTP-Method", tc.xmethod)
			}
			if tc.ifMatch != "" {
				r.Header.Set("If-Match", tc.ifMatch)
			}
			rb.last = nil
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			if rb.last == nil {
				t.Fatalf("no write (%d %s)", rec.Code, rec.Body.String())
			}
			op := rb.last
			if op.Kind != tc.kind || op.IfMatchAny != tc.any || op.IfMatchUnixNano != tc.nano || op.PartitionKey != "Smith" || op.RowKey != "John" {
				t.Fatalf("op %v", op)
			}
			if tc.kind != pb.OpKind_OP_KIND_DELETE {
				e, err := edm.UnmarshalBinary(op.Entity)
				if err != nil || e.PartitionKey != "Smith" || e.RowKey != "John" {
					t.Fatalf("entity %+v %v", e, err)
				}
			}
		})
	}
}

type recordingBackend struct {
	*fakeBackend
	last *pb.EntityOp
}

func (r *recordingBackend) Write(ctx context.Context, table, pk string, ops []*pb.EntityOp) (time.Time, error) {
	r.last = ops[0]
	return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), nil
}
