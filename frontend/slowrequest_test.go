package frontend

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/frontend/auth"
)

// stallingBackend answers no query until the request's context ends.
type stallingBackend struct{ *fakeBackend }

func (stallingBackend) Query(ctx context.Context, _ string, _ Query) (*Page, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// warnRecorder keeps the messages logged at warn or above.
type warnRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (h *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}
func (h *warnRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnRecorder) WithGroup(string) slog.Handler      { return h }

func (h *warnRecorder) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// shortSlowRequestWarn lowers slowRequestWarn to 1.5 s for one test (the
// behaviour under test is the threshold, not its 5 s): the client that gives
// up early still does so 1.2 s before it, the late one 1 s after it.
func shortSlowRequestWarn(t *testing.T) {
	t.Helper()
	old := slowRequestWarn
	slowRequestWarn = 1500 * time.Millisecond
	t.Cleanup(func() { slowRequestWarn = old })
}

// A client that gives up on a request the service has worked on for
// longer than slowRequestWarn is a failure worth a warning; one that goes
// away sooner stays at debug (chaos seed 246: seven 8 s SDK tries of one
// query page left no line in the front-end's log).
func TestSlowRequestClientGoneIsLogged(t *testing.T) {
	for _, tc := range []struct {
		name string
		try  time.Duration
		want int
	}{
		{"client gives up early", 300 * time.Millisecond, 0},
		{"client gives up after the threshold", 2500 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shortSlowRequestWarn(t)
			fb := newFakeBackend()
			if _, err := fb.CreateTable(context.Background(), "stall"); err != nil {
				t.Fatal(err)
			}
			h := &warnRecorder{}
			s, err := NewServer(DefaultConfig(), stallingBackend{fb}, slog.New(h))
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(s.Handler())
			t.Cleanup(ts.Close)
			cred, err := aztables.NewSharedKeyCredential(auth.DevAccountName, auth.DevAccountKey)
			if err != nil {
				t.Fatal(err)
			}
			opts := &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{
				Retry:     policy.RetryOptions{MaxRetries: -1, TryTimeout: tc.try},
				Transport: ts.Client(),
			}}
			svc, err := aztables.NewServiceClientWithSharedKey(ts.URL+"/"+auth.DevAccountName, cred, opts)
			if err != nil {
				t.Fatal(err)
			}
			pager := svc.NewClient("stall").NewListEntitiesPager(nil)
			if _, err := pager.NextPage(context.Background()); err == nil {
				t.Fatal("a query the backend never answers succeeded")
			}
			// The handler logs after the client's cancel reaches it.
			const msg = "client gave up on a slow request"
			deadline := time.Now().Add(20 * time.Second)
			for h.count(msg) < tc.want && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			// Let the handler finish (its answer goes nowhere) before
			// counting what it logged.
			ts.CloseClientConnections()
			ts.Close()
			if got := h.count(msg); got != tc.want {
				t.Fatalf("%d warnings %q, want %d (all warnings: %q)", got, msg, tc.want, h.msgs)
			}
		})
	}
}

// The same for the query of a query batch ($batch holding one GET): its
// sub-request carries the batch's start time (it did not, and a client
// giving up on a slow batch query was logged at debug only).
func TestSlowBatchQueryClientGoneIsLogged(t *testing.T) {
	shortSlowRequestWarn(t)
	fb := newFakeBackend()
	if _, err := fb.CreateTable(context.Background(), "stall"); err != nil {
		t.Fatal(err)
	}
	h := &warnRecorder{}
	s, err := NewServer(DefaultConfig(), stallingBackend{fb}, slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	body := strings.ReplaceAll(`--batch_q
Content-Type: application/http
Content-Transfer-Encoding: binary

GET `+ts.URL+`/devstoreaccount1/stall() HTTP/1.1
Accept: application/json;odata=nometadata

--batch_q--
`, "\n", "\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), slowRequestWarn+time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/devstoreaccount1/$batch", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "multipart/mixed; boundary=batch_q")
	req.Header.Set("x-ms-version", "2019-02-02")
	req.Header.Set("DataServiceVersion", "3.0")
	if err := auth.SignSharedKeyLite(req, auth.DevAccount()); err != nil {
		t.Fatal(err)
	}
	resp, err := ts.Client().Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a batch query the backend never answers got %s", resp.Status)
	}
	const msg = "client gave up on a slow request"
	deadline := time.Now().Add(20 * time.Second)
	for h.count(msg) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ts.CloseClientConnections()
	ts.Close()
	if got := h.count(msg); got != 1 {
		t.Fatalf("%d warnings %q, want 1 (all warnings: %q)", got, msg, h.msgs)
	}
}
