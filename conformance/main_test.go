package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/frontend/auth"
	"tablestore/internal/logging"
)

// The shared cluster and its clients, set up once by TestMain: starting a
// cluster takes seconds, every test after that takes milliseconds.
var (
	tc       *cluster.Cluster
	endpoint string // http://127.0.0.1:port/devstoreaccount1
	svc      *aztables.ServiceClient
	cred     *aztables.SharedKeyCredential
	acct     = auth.DevAccount()
	checker  = &headerChecker{next: http.DefaultTransport}
	tableSeq atomic.Int64
	// dataDir holds every cluster's data; closers stop the extra clusters
	// some tests start (once) after the tests end.
	dataDir string
	closers []func()
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	dataDir = dir
	// The harness picks free ports by listening and closing, so a test
	// binary running in parallel can take one before the cluster binds it:
	// retry start-up a few times on a fresh directory.
	for attempt := 1; ; attempt++ {
		opts := cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: filepath.Join(dir, strconv.Itoa(attempt)), Logger: logging.FromEnv("")}
		if tc, err = cluster.Start(opts); err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			fmt.Fprintln(os.Stderr, "starting the cluster:", err)
			return 1
		}
	}
	defer tc.Close()
	endpoint = tc.Endpoint(0)
	if svc, err = aztables.NewServiceClientFromConnectionString(tc.ConnectionString(0), clientOptions()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cred, err = aztables.NewSharedKeyCredential(auth.DevAccountName, auth.DevAccountKey); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	if bad := checker.failures(); len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "responses without x-ms-request-id, x-ms-version or Date:\n  %s\n", strings.Join(bad, "\n  "))
		code = 1
	}
	return code
}

// clientOptions routes every SDK call through the header checker, with a
// few quick retries for the odd leader election right after start-up.
func clientOptions() *aztables.ClientOptions {
	return &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: &http.Client{Transport: checker},
		Retry:     policy.RetryOptions{MaxRetries: 3, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 500 * time.Millisecond},
	}}
}

// headerChecker records every response that lacks the headers Azure puts
// on all of them.
type headerChecker struct {
	next http.RoundTripper
	mu   sync.Mutex
	bad  []string
}

func (c *headerChecker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		h := resp.Header
		if h.Get("x-ms-request-id") == "" || h.Get("x-ms-version") == "" || h.Get("Date") == "" {
			c.mu.Lock()
			c.bad = append(c.bad, fmt.Sprintf("%s %s -> %d", r.Method, r.URL, resp.StatusCode))
			c.mu.Unlock()
		}
	}
	return resp, err
}

func (c *headerChecker) failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bad
}

// newTable creates a table with a unique name and returns its name and
// client.
func newTable(t *testing.T, prefix string) (string, *aztables.Client) {
	t.Helper()
	name := fmt.Sprintf("%s%d", prefix, tableSeq.Add(1))
	if _, err := svc.CreateTable(context.Background(), name, nil); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	return name, svc.NewClient(name)
}

// respCode extracts the status and error code of an SDK error.
func respCode(err error) (int, string) {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode, re.ErrorCode
	}
	return 0, ""
}

// wantCode fails unless err is an Azure error with that status and code.
func wantCode(t *testing.T, err error, status int, code string) {
	t.Helper()
	if st, c := respCode(err); st != status || c != code {
		t.Fatalf("got %d %q (%v), want %d %s", st, c, err, status, code)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawResponse is a response read whole.
type rawResponse struct {
	status int
	header http.Header
	body   []byte
}

func (r rawResponse) code() string { return r.header.Get("x-ms-error-code") }

func (r rawResponse) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not JSON (%v): %s", err, r.body)
	}
	return m
}

// raw sends a request to the front-end: path is appended to the endpoint
// (it starts with "/" or "?"), signed with SharedKeyLite unless sign is
// false. It checks the headers every response carries.
func raw(t *testing.T, method, path string, hdr map[string]string, body []byte, sign bool) rawResponse {
	t.Helper()
	r, err := http.NewRequest(method, endpoint+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		r.Body, r.ContentLength = http.NoBody, 0
	}
	r.Header.Set("x-ms-version", "2019-02-02")
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	if sign {
		if err := auth.SignSharedKeyLite(r, acct); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := checker.RoundTrip(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: b}
}

// jsonHeaders are what the SDKs send with OData calls.
func jsonHeaders(extra ...string) map[string]string {
	h := map[string]string{"Accept": "application/json;odata=minimalmetadata", "DataServiceVersion": "3.0", "Content-Type": "application/json"}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

// sasClient returns a table client authenticated only by the SAS query
// string q (url.Values.Encode()).
func sasClient(t *testing.T, table, q string) *aztables.Client {
	t.Helper()
	c, err := aztables.NewClientWithNoCredential(endpoint+"/"+table+"?"+q, clientOptions())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// listAll reads every entity a query returns, following continuations, and
// the number of pages.
func listAll(t *testing.T, c *aztables.Client, opts *aztables.ListEntitiesOptions) ([]map[string]any, int) {
	t.Helper()
	var out []map[string]any
	pages := 0
	p := c.NewListEntitiesPager(opts)
	for p.More() {
		resp, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(resp.Entities) > 1000 {
			t.Fatalf("page of %d entities", len(resp.Entities))
		}
		for _, e := range resp.Entities {
			var m map[string]any
			if err := json.Unmarshal(e, &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
	}
	return out, pages
}

// keysOf lists "PartitionKey/RowKey" of entities.
func keysOf(ents []map[string]any) []string {
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = fmt.Sprint(e["PartitionKey"]) + "/" + fmt.Sprint(e["RowKey"])
	}
	return out
}
