package frontend

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/frontend/auth"
	"tablestore/internal/edm"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

var update = flag.Bool("update", false, "rewrite the golden response files under testdata/golden")

// Golden files: testdata/golden/<case>.http holds one or more raw requests
// separated by a line "###": the request line (method and target), header
// lines, a blank line and the body. Every request is signed with
// SharedKeyLite for the dev account unless it carries "X-Test-Unsigned:
// true"; "X-Test-Fail: <reason>" makes the fake backend fail the next call
// with that rpcerr reason; "X-Test-CRLF: true" turns the body's line ends
// into CRLF (multipart bodies as the SDKs send them). <case>.golden holds
// the responses: status line, the headers in goldenHeaders (sorted), a
// blank line and the body, with request ids, times and batch boundaries
// normalised and carriage returns shown as ␍. Run "go test ./frontend -run Golden
// -update" to rewrite them after an intended change, and review the diff.

var goldenHeaders = []string{
	"Access-Control-Allow-Credentials", "Access-Control-Allow-Headers", "Access-Control-Allow-Methods",
	"Access-Control-Allow-Origin", "Access-Control-Expose-Headers", "Access-Control-Max-Age",
	"Content-Type", "Dataserviceid", "Dataserviceversion", "Etag", "Location", "Preference-Applied",
	"Retry-After", "Vary", "X-Ms-Client-Request-Id", "X-Ms-Continuation-Nextpartitionkey",
	"X-Ms-Continuation-Nextrowkey", "X-Ms-Continuation-Nexttablename", "X-Ms-Error-Code",
	"X-Ms-Retry-After-Ms", "X-Ms-Version",
}

var (
	reRequestID = regexp.MustCompile(`RequestId:[0-9a-f-]{36}`)
	reErrTime   = regexp.MustCompile(`Time:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z`)
	reUUID      = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	reBoundary  = regexp.MustCompile(`(batchresponse_|changesetresponse_)[0-9a-f-]{36}`)
	reSyncTime  = regexp.MustCompile(`<LastSyncTime>[^<]*</LastSyncTime>`)
)

// newTestServer returns a server over a fresh fake backend holding the
// fixture: table "people" with a few typed entities and table "empty".
func newTestServer(t testing.TB) (*Server, *fakeBackend) {
	t.Helper()
	fb := newFakeBackend()
	s, err := NewServer(DefaultConfig(), fb, nil)
	if err != nil {
		t.Fatal(err)
	}
	seedFixture(t, fb)
	return s, fb
}

func seedFixture(t testing.TB, fb *fakeBackend) {
	ctx := context.Background()
	for _, name := range []string{"people", "empty"} {
		if _, err := fb.CreateTable(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	joined := time.Date(2020, 5, 6, 7, 8, 9, 100, time.UTC)
	ents := []*edm.Entity{
		{PartitionKey: "Adams", RowKey: "Zed", Properties: []edm.Property{
			{Name: "Age", Value: edm.Int32Value(70)},
			{Name: "Name", Value: edm.StringValue("Zed Adams")},
		}},
		{PartitionKey: "Jones", RowKey: "Ann", Properties: []edm.Property{
			{Name: "Age", Value: edm.Int32Value(30)},
			{Name: "Name", Value: edm.StringValue("Ann Jones")},
		}},
		{PartitionKey: "Smith", RowKey: "Ben", Properties: []edm.Property{
			{Name: "Active", Value: edm.BoolValue(true)},
			{Name: "Age", Value: edm.Int32Value(42)},
			{Name: "Balance", Value: edm.DoubleValue(12.5)},
			{Name: "Big", Value: edm.Int64Value(12345678901234)},
			{Name: "Blob", Value: edm.BinaryValue([]byte("hi"))},
			{Name: "Id", Value: edm.GuidValue("c9da6455-213d-42c9-9a79-3e9149a57833")},
			{Name: "Joined", Value: edm.DateTimeValue(joined)},
			{Name: "Name", Value: edm.StringValue("Ben \"Benny\" Smith")},
		}},
		{PartitionKey: "Smith", RowKey: "John", Properties: []edm.Property{
			{Name: "Age", Value: edm.Int32Value(17)},
			{Name: "Name", Value: edm.StringValue("John Smith")},
		}},
		{PartitionKey: "p k'1", RowKey: "rü", Properties: []edm.Property{
			{Name: "Name", Value: edm.StringValue("odd keys")},
		}},
	}
	for _, e := range ents {
		op := &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: e.PartitionKey, RowKey: e.RowKey, Entity: edm.MarshalBinary(e)}
		if _, err := fb.Write(ctx, "people", e.PartitionKey, []*pb.EntityOp{op}); err != nil {
			t.Fatal(err)
		}
	}
}

// parseRawRequest reads one request of a .http file.
func parseRawRequest(t *testing.T, raw string) (*http.Request, string) {
	t.Helper()
	raw = strings.TrimLeft(raw, "\n")
	head, body, _ := strings.Cut(raw, "\n\n")
	lines := strings.Split(head, "\n")
	method, target, ok := strings.Cut(strings.TrimSpace(lines[0]), " ")
	if !ok {
		t.Fatalf("bad request line %q", lines[0])
	}
	target = strings.TrimSuffix(target, " HTTP/1.1")
	body = strings.TrimSuffix(body, "\n")
	r := httptest.NewRequest(method, "http://127.0.0.1:10002"+target, nil)
	r.RemoteAddr = "127.0.0.1:50000"
	fail := ""
	sign, crlf := true, false
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) == "" {
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			t.Fatalf("bad header line %q", l)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case strings.EqualFold(k, "X-Test-Unsigned"):
			sign = false
		case strings.EqualFold(k, "X-Test-Fail"):
			fail = v
		case strings.EqualFold(k, "X-Test-CRLF"):
			crlf = true
		case strings.EqualFold(k, "Host"):
			r.Host = v
		default:
			r.Header.Add(k, v)
		}
	}
	if crlf {
		body = strings.ReplaceAll(body, "\n", "\r\n")
	}
	r.Body = io.NopCloser(strings.NewReader(body))
	r.ContentLength = int64(len(body))
	if sign {
		if err := auth.SignSharedKeyLite(r, auth.DevAccount()); err != nil {
			t.Fatal(err)
		}
	}
	return r, fail
}

func renderResponse(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\n", rec.Code, http.StatusText(rec.Code))
	h := rec.Header()
	var names []string
	for k := range h {
		if slices.Contains(goldenHeaders, k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range h[k] {
			fmt.Fprintf(&b, "%s: %s\n", k, reBoundary.ReplaceAllString(v, "${1}<id>"))
		}
	}
	b.WriteString("\n")
	body := reRequestID.ReplaceAllString(rec.Body.String(), "RequestId:<request-id>")
	body = reErrTime.ReplaceAllString(body, "Time:<time>")
	body = reBoundary.ReplaceAllString(body, "${1}<id>")
	body = reSyncTime.ReplaceAllString(body, "<LastSyncTime><time></LastSyncTime>")
	// Multipart bodies end their lines in CRLF: show the CR so that the
	// golden file both records it and stays readable.
	body = strings.ReplaceAll(body, "\r", "␍")
	b.WriteString(body)
	b.WriteString("\n")
	return b.String()
}

// checkCommonHeaders asserts what every response must carry.
func checkCommonHeaders(t *testing.T, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	h := rec.Header()
	if id := h.Get("x-ms-request-id"); !reUUID.MatchString(id) {
		t.Errorf("x-ms-request-id %q is not a UUID", id)
	}
	if _, err := time.Parse(time.RFC1123, h.Get("Date")); err != nil {
		t.Errorf("Date %q: %v", h.Get("Date"), err)
	}
	if h.Get("x-ms-version") == "" {
		t.Error("no x-ms-version")
	}
	if c := req.Header.Get("x-ms-client-request-id"); c != "" && h.Get("x-ms-client-request-id") != c {
		t.Errorf("x-ms-client-request-id not echoed")
	}
	if rec.Code >= 400 {
		code := h.Get("x-ms-error-code")
		if code == "" {
			t.Errorf("error %d without x-ms-error-code", rec.Code)
		}
		body := rec.Body.String()
		if !strings.Contains(body, `"code":"`+code+`"`) && !strings.Contains(body, "<m:code>"+code+"</m:code>") &&
			!strings.Contains(body, "<code>"+code+"</code>") && !strings.Contains(body, "batchresponse_") {
			t.Errorf("error body does not carry code %q: %s", code, rec.Body.String())
		}
	}
}

func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.http"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden cases")
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".http")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			s, fb := newTestServer(t)
			var out strings.Builder
			for i, part := range strings.Split(string(raw), "\n###\n") {
				req, fail := parseRawRequest(t, part)
				if fail != "" {
					fb.failNext = injectedFailure(fail)
				}
				rec := httptest.NewRecorder()
				s.Handler().ServeHTTP(rec, req)
				checkCommonHeaders(t, req, rec)
				if i > 0 {
					out.WriteString("###\n")
				}
				fmt.Fprintf(&out, "# %s %s\n", req.Method, req.URL.RequestURI())
				out.WriteString(renderResponse(t, rec))
			}
			goldenPath := filepath.Join("testdata", "golden", name+".golden")
			if *update {
				if err := os.WriteFile(goldenPath, []byte(out.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenPath)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(want, []byte(out.String())) {
				t.Errorf("response differs from %s (run with -update after checking):\n--- got\n%s\n--- want\n%s", goldenPath, out.String(), want)
			}
		})
	}
}

func injectedFailure(reason string) error {
	switch reason {
	case rpcerr.ReasonServerBusy:
		return rpcerr.New(codes.Unavailable, reason, "partition over its target", map[string]string{rpcerr.MetaRetryAfterMs: "1500"})
	case "DEADLINE":
		return context.DeadlineExceeded
	case "INTERNAL":
		return fmt.Errorf("disk on fire")
	}
	return rpcerr.New(codes.Unavailable, reason, "injected", nil)
}
