package frontend

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"tablestore/internal/edm"
)

// deadlineBackend reports the context of each point read; a read of the
// row "stall" waits for that context to end (5 s at most) and returns its
// error.
type deadlineBackend struct {
	*fakeBackend
	entered chan struct{} // a read of "stall" has begun
	seen    chan getSeen
}

type getSeen struct {
	deadline time.Time
	hasDL    bool
	err      error // the context's, for "stall"
}

func (b deadlineBackend) Get(ctx context.Context, table, pk, rk string) (*edm.Entity, error) {
	g := getSeen{}
	g.deadline, g.hasDL = ctx.Deadline()
	if rk == "stall" {
		b.entered <- struct{}{}
		select {
		case <-ctx.Done():
			g.err = ctx.Err()
		case <-time.After(5 * time.Second): // a context that never ends fails the test
		}
		b.seen <- g
		return nil, ctx.Err()
	}
	b.seen <- g
	return b.fakeBackend.Get(ctx, table, pk, rk)
}

// TestRequestDeadline: the back-end works under Config.RequestTimeout, or
// the shorter "timeout" query parameter, counted from the request, whether
// it came through the server's own listener (whose context carries the
// deadline already) or through Handler(); at the deadline its context
// ends with DeadlineExceeded (500 OperationTimedOut), and a client that
// goes away cancels it.
func TestRequestDeadline(t *testing.T) {
	const point = "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')"
	const stall = "/devstoreaccount1/people(PartitionKey='Smith',RowKey='stall')"
	for _, tc := range []struct {
		name     string
		config   time.Duration // Config.RequestTimeout
		target   string
		handler  bool // through Handler(), not the listener
		leave    bool // the client closes its connection once the back-end has the request
		wantTime time.Duration
		wantErr  error // the back-end's context's at its end (stall only)
		status   int
	}{
		{name: "server timeout", config: time.Hour, target: point, wantTime: time.Hour, status: 200},
		{name: "shorter query timeout", config: time.Hour, target: point + "?timeout=2", wantTime: 2 * time.Second, status: 200},
		{name: "longer query timeout", config: time.Minute, target: point + "?timeout=3600", wantTime: time.Minute, status: 200},
		{name: "server timeout via Handler", config: time.Hour, target: point, handler: true, wantTime: time.Hour, status: 200},
		{name: "query timeout via Handler", config: time.Hour, target: point + "?timeout=2", handler: true, wantTime: 2 * time.Second, status: 200},
		{name: "deadline", config: 150 * time.Millisecond, target: stall, wantTime: 150 * time.Millisecond, wantErr: context.DeadlineExceeded, status: 500},
		{name: "deadline via Handler", config: 150 * time.Millisecond, target: stall, handler: true, wantTime: 150 * time.Millisecond, wantErr: context.DeadlineExceeded, status: 500},
		{name: "client goes away", config: time.Hour, target: stall, leave: true, wantTime: time.Hour, wantErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb := newFakeBackend()
			seedFixture(t, fb)
			b := deadlineBackend{fakeBackend: fb, entered: make(chan struct{}, 1), seen: make(chan getSeen, 1)}
			cfg := DefaultConfig()
			cfg.RequestTimeout = tc.config
			s, err := NewServer(cfg, b, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := signedRequest(t, "GET", tc.target, "")
			var before time.Time
			var status func() int
			var c net.Conn
			if tc.handler {
				rec := httptest.NewRecorder()
				before = time.Now()
				s.Handler().ServeHTTP(rec, r)
				status = func() int { return rec.Code }
			} else {
				c = serveOne(t, s)
				before = time.Now()
				r.RequestURI = ""
				if err := r.Write(c); err != nil {
					t.Fatal(err)
				}
				status = func() int {
					resp, err := http.ReadResponse(bufio.NewReader(c), r)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					return resp.StatusCode
				}
			}
			var g getSeen
			if tc.leave {
				<-b.entered
				c.Close()
			}
			select {
			case g = <-b.seen:
			case <-time.After(5 * time.Second):
				t.Fatal("the back-end got no request")
			}
			after := time.Now()
			if !g.hasDL || g.deadline.Before(before.Add(tc.wantTime)) || g.deadline.After(after.Add(tc.wantTime)) {
				t.Fatalf("back-end deadline %v (%v), want %v after the request", g.deadline, g.hasDL, tc.wantTime)
			}
			if !errors.Is(g.err, tc.wantErr) || (g.err == nil) != (tc.wantErr == nil) {
				t.Fatalf("back-end context ended with %v, want %v", g.err, tc.wantErr)
			}
			if tc.leave {
				return
			}
			if got := status(); got != tc.status {
				t.Fatalf("status %d, want %d", got, tc.status)
			}
		})
	}
}

// serveOne serves s on a loopback listener until the test ends and
// returns a connection to it.
func serveOne(t *testing.T, s *Server) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
	})
	return c
}

// TestSlowBodyTimesOut: a body that has not all come by the request's
// deadline (the listener's read deadline, http1.Server.RequestTimeout)
// is answered 500 OperationTimedOut, as a request whose back-end work ran
// out of time is (Azure's clients retry it), not 400 InvalidInput.
func TestSlowBodyTimesOut(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RequestTimeout = 150 * time.Millisecond
	s, err := NewServer(cfg, newFakeBackend(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := serveOne(t, s)
	r := signedRequest(t, "POST", "/devstoreaccount1/people", `{"PartitionKey":"a","RowKey":"b"}`)
	r.RequestURI = ""
	var raw bytes.Buffer
	if err := r.Write(&raw); err != nil {
		t.Fatal(err)
	}
	// All but the body's last bytes, which never come.
	if _, err := c.Write(raw.Bytes()[:raw.Len()-5]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("x-ms-error-code") != "OperationTimedOut" {
		t.Fatalf("answer %s %s, want 500 OperationTimedOut", resp.Status, resp.Header.Get("x-ms-error-code"))
	}
}
