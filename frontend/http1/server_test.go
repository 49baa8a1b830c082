package http1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ioTimeout bounds every read and write a test makes, so that a broken
// server fails the test instead of hanging it.
const ioTimeout = 5 * time.Second

// startServer serves s on a fresh loopback listener until the test ends.
func startServer(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case err := <-done:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
			}
		case <-time.After(ioTimeout):
			t.Error("Serve did not return after Close")
		}
	})
	return ln.Addr().String()
}

// client is one raw connection to the server under test.
type client struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(ioTimeout))
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

func (cl *client) send(raw string) {
	cl.t.Helper()
	if _, err := io.WriteString(cl.c, raw); err != nil {
		cl.t.Fatalf("write: %v", err)
	}
}

// read reads one answer to a request of method and all its body.
func (cl *client) read(method string) (*http.Response, string) {
	cl.t.Helper()
	resp, err := http.ReadResponse(cl.br, &http.Request{Method: method})
	if err != nil {
		cl.t.Fatalf("reading answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		cl.t.Fatalf("reading answer body: %v", err)
	}
	return resp, string(b)
}

// closed asserts that the server closes the connection with nothing more
// to read.
func (cl *client) closed() {
	cl.t.Helper()
	b, err := io.ReadAll(cl.br)
	if len(b) > 0 {
		cl.t.Fatalf("read %q, want the connection closed", b)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		cl.t.Fatal("connection still open")
	}
}

// alive asserts that the connection serves one more request.
func (cl *client) alive() {
	cl.t.Helper()
	cl.send("GET /alive HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _ := cl.read("GET")
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		cl.t.Fatalf("keep-alive request answered %s", resp.Status)
	}
}

// poll waits until cond holds or fails the test after ioTimeout.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// echo answers with the request's method, target, host and body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%s %s host=%s body=%s", r.Method, r.RequestURI, r.Host, b)
})

func TestServeCases(t *testing.T) {
	big := strings.Repeat("x", 10000)
	cases := []struct {
		name    string
		handler http.HandlerFunc // nil: echo
		req     string
		method  string // of the request, for reading its answer; "" is GET
		status  int
		// body, when not "", must equal the answer's body.
		body      string
		check     func(t *testing.T, resp *http.Response, body string)
		maxHeader int // Server.MaxHeaderBytes
		// close: the server closes the connection after the answer;
		// else it must serve another request on it.
		close bool
	}{
		{name: "get", req: "GET /a?b=c HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: "GET /a?b=c host=h body="},
		{name: "post content-length", req: "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", status: 200, body: "POST /p host=h body=hello"},
		{name: "repeated equal content-length", req: "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", status: 200, body: "POST /p host=h body=hello"},
		{name: "chunked body", req: "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", status: 200, body: "POST /p host=h body=hello world"},
		{name: "chunked body with trailers", req: "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\nX-Other: 2\r\n\r\n", status: 200, body: "POST /p host=h body=hello"},
		{name: "chunked with extension", req: "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n", status: 200, body: "POST /p host=h body=hello"},
		{name: "absolute-form target wins over Host", req: "GET http://abs.example/p?q=1 HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: "GET http://abs.example/p?q=1 host=abs.example body="},
		{name: "long request line", req: "GET /q?" + strings.Repeat("a", 9000) + " HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: "GET /q?" + strings.Repeat("a", 9000) + " host=h body="},
		{name: "long header value", req: "GET / HTTP/1.1\r\nHost: h\r\nX-Long: " + strings.Repeat("v", 9000) + "\r\n\r\n",
			handler: func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, len(r.Header.Get("X-Long"))) }, status: 200, body: "9000"},
		{name: "http/1.0 closes", req: "GET / HTTP/1.0\r\n\r\n", status: 200, close: true, body: "GET / host= body=",
			check: func(t *testing.T, resp *http.Response, _ string) {
				if resp.ProtoMinor != 0 {
					t.Errorf("answer proto %s, want HTTP/1.0", resp.Proto)
				}
			}},
		{name: "http/1.0 keep-alive", req: "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", status: 200, body: "GET / host= body=",
			check: func(t *testing.T, resp *http.Response, _ string) {
				if got := resp.Header.Get("Connection"); got != "keep-alive" {
					t.Errorf("Connection %q, want keep-alive", got)
				}
				if resp.ContentLength != int64(len("GET / host= body=")) {
					t.Errorf("Content-Length %d", resp.ContentLength)
				}
			}},
		{name: "http/1.0 keep-alive long answer closes", req: "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", close: true, status: 200, body: big,
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) },
			check: func(t *testing.T, resp *http.Response, _ string) {
				if !resp.Close || resp.TransferEncoding != nil {
					t.Errorf("Close %v, Transfer-Encoding %q; want close-delimited", resp.Close, resp.TransferEncoding)
				}
			}},
		{name: "connection close", req: "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", status: 200, close: true,
			check: wantClose},
		{name: "connection close among tokens", req: "GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, Close\r\n\r\n", status: 200, close: true,
			check: wantClose},
		{name: "handler asks close", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, close: true,
			handler: func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Connection", "close") },
			check:   wantClose},
		{name: "handler asks close in capitals", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, close: true,
			handler: func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Connection", "Close") },
			check:   wantClose},
		{name: "missing host", req: "GET / HTTP/1.1\r\n\r\n", status: 400, close: true},
		{name: "repeated host", req: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", status: 400, close: true},
		{name: "malformed host", req: "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", status: 400, close: true},
		{name: "host with invalid byte", req: "GET / HTTP/1.1\r\nHost: a<b\r\n\r\n", status: 400, close: true},
		{name: "bad content-length", req: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: abc\r\n\r\n", status: 400, close: true},
		{name: "negative content-length", req: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", status: 400, close: true},
		{name: "plus content-length", req: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\nx", status: 400, close: true},
		{name: "empty content-length", req: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", status: 400, close: true},
		{name: "conflicting content-length", req: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", status: 400, close: true},
		{name: "unsupported transfer-encoding", req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", status: 501, close: true},
		{name: "two transfer-encodings", req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", status: 501, close: true},
		{name: "chunked in http/1.0", req: "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, close: true},
		{name: "bad chunk size", handler: echo, req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", status: 400, close: true},
		{name: "chunk size line too long", req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("e", 2*bufSize) + "\r\na\r\n0\r\n\r\n", status: 400, close: true},
		{name: "chunk size overflow", req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\na\r\n0\r\n\r\n", status: 400, close: true},
		{name: "negative chunk size", req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\na\r\n0\r\n\r\n", status: 400, close: true},
		{name: "chunk without CRLF after data", req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", status: 400, close: true},
		// Many chunks of one byte with long extensions: net/http's reader
		// refuses that much framing around little data.
		{name: "chunk extensions outweigh data", req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1;"+strings.Repeat("e", 1000)+"\r\na\r\n", 200) + "0\r\n\r\n", status: 400, close: true},
		{name: "framing fields in trailer ignored", req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", status: 200, body: "POST / host=h body=a"},
		{name: "expect other", req: "POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx", status: 417, close: true},
		{name: "header too large", req: "GET / HTTP/1.1\r\nHost: h\r\nX-A: " + strings.Repeat("a", 2000) + "\r\n\r\n", maxHeader: 2000, status: 431, close: true},
		{name: "header within limit", req: "GET / HTTP/1.1\r\nHost: h\r\nX-A: " + strings.Repeat("a", 1900) + "\r\n\r\n", maxHeader: 2000, status: 200},
		{name: "many headers too large", req: "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-A: aaaaaaaaaa\r\n", 200) + "\r\n", maxHeader: 2000, status: 431, close: true},
		{name: "too many header fields", req: "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-A: a\r\n", maxHeaderFields) + "\r\n", status: 431, close: true},
		{name: "header fields at the limit", req: "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-A: a\r\n", maxHeaderFields-1) + "\r\n", status: 200},
		{name: "request line too large", req: "GET /" + strings.Repeat("a", 5000) + " HTTP/1.1\r\nHost: h\r\n\r\n", maxHeader: 4096, status: 431, close: true},
		{name: "obs-fold", req: "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n", status: 400, close: true},
		{name: "space before colon", req: "GET / HTTP/1.1\r\nHost: h\r\nX-A : a\r\n\r\n", status: 400, close: true},
		{name: "invalid header name", req: "GET / HTTP/1.1\r\nHost: h\r\nX(A): a\r\n\r\n", status: 400, close: true},
		{name: "control byte in header value", req: "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x01b\r\n\r\n", status: 400, close: true},
		{name: "no colon", req: "GET / HTTP/1.1\r\nHost: h\r\nX-A\r\n\r\n", status: 400, close: true},
		{name: "http/2.0", req: "GET / HTTP/2.0\r\nHost: h\r\n\r\n", status: 505, close: true},
		{name: "unparsable version", req: "GET / HTTP/1.1 \r\nHost: h\r\n\r\n", status: 400, close: true},
		{name: "http/1.2", req: "GET / HTTP/1.2\r\nHost: h\r\n\r\n", status: 505, close: true},
		{name: "connect authority form", req: "CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n", status: 400, close: true},
		{name: "non-ascii space is no connection token", req: "GET / HTTP/1.1\r\nHost: h\r\nConnection: \xc2\xa0close\r\n\r\n", status: 200},
		{name: "malformed version", req: "GET / FTP/1.0\r\nHost: h\r\n\r\n", status: 400, close: true},
		{name: "empty line before request", req: "\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: "GET / host=h body="},
		{name: "too many empty lines before request", req: "\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 400, close: true},
		{name: "malformed request line", req: "GET /\r\nHost: h\r\n\r\n", status: 400, close: true},
		{name: "invalid method", req: "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", status: 400, close: true},
		{name: "asterisk not options", req: "GET * HTTP/1.1\r\nHost: h\r\n\r\n", status: 400, close: true},
		{name: "head", req: "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", method: "HEAD", status: 200, body: "",
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "twelve bytes") },
			check: func(t *testing.T, resp *http.Response, _ string) {
				if resp.ContentLength != 12 {
					t.Errorf("Content-Length %d, want 12", resp.ContentLength)
				}
			}},
		{name: "head flushed", req: "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", method: "HEAD", status: 200, body: "",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "abc")
				w.(http.Flusher).Flush()
				io.WriteString(w, "def")
			},
			check: func(t *testing.T, resp *http.Response, _ string) {
				if resp.TransferEncoding != nil {
					t.Errorf("Transfer-Encoding %q on a HEAD answer", resp.TransferEncoding)
				}
			}},
		{name: "head sniffed", req: "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", method: "HEAD", status: 200, body: "",
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html><body>hi</body></html>") },
			check:   wantHeader("Content-Type", "text/html; charset=utf-8")},
		{name: "head nothing written", req: "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", method: "HEAD", status: 200, body: "",
			handler: func(w http.ResponseWriter, r *http.Request) {},
			// As net/http: no Content-Length, for 0 may not be the length
			// of the GET answer the handler skipped writing.
			check: wantNoHeader("Content-Length", "Transfer-Encoding", "Content-Type")},
		{name: "head long answer", req: "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", method: "HEAD", status: 200, body: "",
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) },
			check: func(t *testing.T, resp *http.Response, _ string) {
				if resp.ContentLength != int64(len(big)) {
					t.Errorf("Content-Length %d, want %d", resp.ContentLength, len(big))
				}
			}},
		{name: "204", req: "DELETE / HTTP/1.1\r\nHost: h\r\n\r\n", status: 204, body: "",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNoContent)
				if _, err := io.WriteString(w, "x"); err != http.ErrBodyNotAllowed {
					t.Errorf("Write on 204: %v, want ErrBodyNotAllowed", err)
				}
			},
			check: wantNoHeader("Content-Length", "Transfer-Encoding", "Content-Type")},
		{name: "204 with handler content-length", req: "DELETE / HTTP/1.1\r\nHost: h\r\n\r\n", status: 204, body: "",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Length"] = []string{"0"}
				w.WriteHeader(http.StatusNoContent)
			},
			check: wantNoHeader("Content-Length", "Transfer-Encoding")},
		{name: "304", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 304, body: "",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusNotModified)
			},
			check: wantNoHeader("Content-Length", "Transfer-Encoding", "Content-Type")},
		{name: "empty answer has content-length 0", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: "",
			handler: func(w http.ResponseWriter, r *http.Request) {},
			check: func(t *testing.T, resp *http.Response, _ string) {
				if resp.ContentLength != 0 || resp.Header.Get("Content-Length") != "0" {
					t.Errorf("Content-Length %q, want 0", resp.Header.Get("Content-Length"))
				}
				if resp.Header.Get("Content-Type") != "" {
					t.Errorf("Content-Type %q on an empty answer", resp.Header.Get("Content-Type"))
				}
			}},
		{name: "long answer chunked", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: big,
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, big[:100])
				io.WriteString(w, big[100:])
			},
			check: wantChunked},
		{name: "short answer has content-length", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: big[:bufSize],
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big[:bufSize]) },
			check: func(t *testing.T, resp *http.Response, _ string) {
				if resp.ContentLength != bufSize || resp.TransferEncoding != nil {
					t.Errorf("Content-Length %d, Transfer-Encoding %q", resp.ContentLength, resp.TransferEncoding)
				}
			}},
		{name: "flush goes chunked", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: "abcdef",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "abc")
				w.(http.Flusher).Flush()
				io.WriteString(w, "def")
			},
			check: wantChunked},
		{name: "flush before any write", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: "abc",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.(http.Flusher).Flush()
				io.WriteString(w, "abc")
			},
			check: wantChunked},
		{name: "handler content-length", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: big,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(big)))
				io.WriteString(w, big)
				if _, err := io.WriteString(w, "more"); err != http.ErrContentLength {
					t.Errorf("writing past Content-Length: %v, want ErrContentLength", err)
				}
			},
			check: func(t *testing.T, resp *http.Response, _ string) {
				if resp.ContentLength != int64(len(big)) || resp.TransferEncoding != nil {
					t.Errorf("Content-Length %d, Transfer-Encoding %q", resp.ContentLength, resp.TransferEncoding)
				}
			}},
		{name: "handler content-length short", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, close: true,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "10")
				io.WriteString(w, "abc")
			}},
		{name: "content-type sniffed", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200,
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html><body>hi</body></html>") },
			check:   wantHeader("Content-Type", "text/html; charset=utf-8")},
		{name: "content-type sniffed on long answer", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200,
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{\"a\":1}"+big) },
			check:   wantHeader("Content-Type", "text/plain; charset=utf-8")},
		{name: "content-type set", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, "<html>")
			},
			check: wantHeader("Content-Type", "application/json")},
		{name: "content-type suppressed", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Type"] = nil
				io.WriteString(w, "<html>")
			},
			check: wantNoHeader("Content-Type")},
		{name: "content-encoding not sniffed", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				io.WriteString(w, "<html>")
			},
			check: wantNoHeader("Content-Type")},
		{name: "date present", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200,
			check: func(t *testing.T, resp *http.Response, _ string) {
				d, err := http.ParseTime(resp.Header.Get("Date"))
				if err != nil || time.Since(d) > time.Minute || time.Until(d) > time.Minute {
					t.Errorf("Date %q: %v", resp.Header.Get("Date"), err)
				}
			}},
		{name: "date suppressed", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200,
			handler: func(w http.ResponseWriter, r *http.Request) { w.Header()["Date"] = nil },
			check:   wantNoHeader("Date")},
		{name: "no header injection", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-A", "a\r\nX-Injected: 1")
				w.Header().Set("X-B", "b\nX-Injected: 2")
				w.Header()["X-C\r\nX-Injected"] = []string{"3"}
			},
			check: func(t *testing.T, resp *http.Response, _ string) {
				if v, ok := resp.Header["X-Injected"]; ok {
					t.Errorf("injected field X-Injected: %q", v)
				}
				if got := resp.Header.Get("X-A"); got != "a  X-Injected: 1" {
					t.Errorf("X-A %q", got)
				}
			}},
		{name: "trailing whitespace trimmed", req: "GET / HTTP/1.1\r\nHost: h\r\nX-A: \t a b \t\r\n\r\n", status: 200, body: "\"a b\"",
			handler: func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "%q", r.Header.Get("X-A")) }},
		{name: "unread small body drained", req: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n" + strings.Repeat("bad request\r\n", 76) + "bbbbbbbbbbbb", status: 200,
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ignored") }},
		{name: "unread small chunked body drained", req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n6\r\na\r\nb\r\n\r\n0\r\nX-T: 1\r\n\r\n", status: 200,
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ignored") }},
		{name: "partly read body drained", req: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n" + strings.Repeat("bad request\r\n", 76) + "bbbbbbbbbbbb", status: 200, body: "ba",
			handler: func(w http.ResponseWriter, r *http.Request) {
				b := make([]byte, 2)
				io.ReadFull(r.Body, b)
				r.Body.Close()
				w.Write(b)
			}},
		{name: "informational answer", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 103,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Link", "</s.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				io.WriteString(w, "final")
			},
			check: wantHeader("Link", "</s.css>; rel=preload")},
		{name: "no informational answer to http/1.0", req: "GET / HTTP/1.0\r\n\r\n", status: 200, body: "final", close: true,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusEarlyHints)
				io.WriteString(w, "final")
			}},
		{name: "content-length set after WriteHeader", req: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: "abc",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusOK)
				w.Header().Set("Content-Length", "999")
				io.WriteString(w, "abc")
			},
			check: func(t *testing.T, resp *http.Response, _ string) {
				if got := resp.Header.Values("Content-Length"); len(got) != 1 || got[0] != "3" {
					t.Errorf("Content-Length %q, want one of 3", got)
				}
			}},
		{name: "chunked and content-length closes", req: "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			status: 200, body: "POST /p host=h body=hello", close: true, check: wantClose},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Handler(echo)
			if tc.handler != nil {
				h = tc.handler
			}
			mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/alive" {
					return
				}
				h.ServeHTTP(w, r)
			})
			addr := startServer(t, &Server{Handler: mux, MaxHeaderBytes: tc.maxHeader})
			cl := dial(t, addr)
			cl.send(tc.req)
			method := tc.method
			if method == "" {
				method = "GET"
			}
			resp, err := http.ReadResponse(cl.br, &http.Request{Method: method})
			if err != nil {
				t.Fatalf("reading answer: %v", err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil && !tc.close {
				t.Fatalf("reading answer body: %v", err)
			}
			body := string(b)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %s, want %d (body %q)", resp.Status, tc.status, body)
			}
			if tc.status == 103 {
				// The final answer follows the informational one.
				resp, body = cl.read(method)
				if resp.StatusCode != 200 || body != "final" {
					t.Fatalf("final answer %s %q", resp.Status, body)
				}
			}
			if tc.body != "" || tc.method == "HEAD" || tc.status == 204 || tc.status == 304 {
				if body != tc.body {
					t.Errorf("body %q, want %q", trunc(body), trunc(tc.body))
				}
			}
			if tc.check != nil {
				tc.check(t, resp, body)
			}
			if tc.close {
				if resp.StatusCode >= 400 && !resp.Close {
					t.Errorf("refusal without Connection: close")
				}
				cl.closed()
			} else {
				if resp.Close {
					t.Errorf("answer has Connection: close")
				}
				cl.alive()
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

// wantClose: the answer says Connection: close (http.ReadResponse turns
// it into resp.Close and removes the field).
func wantClose(t *testing.T, resp *http.Response, _ string) {
	t.Helper()
	if !resp.Close {
		t.Errorf("answer without Connection: close")
	}
}

func wantHeader(k, v string) func(*testing.T, *http.Response, string) {
	return func(t *testing.T, resp *http.Response, _ string) {
		t.Helper()
		if got := resp.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

func wantNoHeader(ks ...string) func(*testing.T, *http.Response, string) {
	return func(t *testing.T, resp *http.Response, _ string) {
		t.Helper()
		for _, k := range ks {
			if v, ok := resp.Header[k]; ok {
				t.Errorf("%s: %q, want none", k, v)
			}
		}
		if len(resp.TransferEncoding) > 0 && slicesContains(ks, "Transfer-Encoding") {
			t.Errorf("Transfer-Encoding %q, want none", resp.TransferEncoding)
		}
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func wantChunked(t *testing.T, resp *http.Response, _ string) {
	t.Helper()
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || resp.ContentLength != -1 {
		t.Errorf("Transfer-Encoding %q, Content-Length %d; want chunked", resp.TransferEncoding, resp.ContentLength)
	}
}

func TestKeepAliveAndPipelining(t *testing.T) {
	addr := startServer(t, &Server{Handler: echo})
	cases := []struct {
		name string
		// writes are sent one at a time, each followed by reading its
		// answers (wants), so several requests in one write are pipelined.
		writes []string
		wants  [][]string
	}{
		{name: "keep-alive twice", writes: []string{
			"GET /1 HTTP/1.1\r\nHost: h\r\n\r\n",
			"GET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
		}, wants: [][]string{{"GET /1 host=h body="}, {"GET /2 host=h body="}}},
		{name: "pipelined", writes: []string{
			"POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.1\r\nHost: h\r\n\r\nPOST /3 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n",
		}, wants: [][]string{{"POST /1 host=h body=abc", "GET /2 host=h body=", "POST /3 host=h body=z"}}},
		// RFC 9112 2.2: empty lines before a request line are ignored (old
		// clients end a POST's body with a CRLF; net/http skips up to four
		// CR or LF bytes after a POST).
		{name: "empty lines before requests", writes: []string{
			"POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\r\n",
			"\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n\nGET /3 HTTP/1.1\r\nHost: h\r\n\r\n",
		}, wants: [][]string{{"POST /1 host=h body=abc"}, {"GET /2 host=h body=", "GET /3 host=h body="}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := dial(t, addr)
			for i, w := range tc.writes {
				cl.send(w)
				for _, want := range tc.wants[i] {
					resp, body := cl.read("GET")
					if resp.StatusCode != 200 || body != want {
						t.Fatalf("answer %s %q, want 200 %q", resp.Status, body, want)
					}
					if resp.Close {
						t.Fatal("answer closes the connection")
					}
				}
			}
		})
	}
}

func TestExpectContinue(t *testing.T) {
	entered := make(chan struct{}, 1)
	proceed := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/alive" {
			return
		}
		entered <- struct{}{}
		if r.URL.Path == "/ignore" {
			io.WriteString(w, "refused")
			return
		}
		<-proceed
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading body: %v", err)
		}
		fmt.Fprintf(w, "got %s", b)
	})
	addr := startServer(t, &Server{Handler: h})

	t.Run("continue once read", func(t *testing.T) {
		cl := dial(t, addr)
		cl.send("PUT /read HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
		<-entered
		// The handler has not read yet: no 100 Continue may have been sent.
		cl.c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := cl.br.Peek(1); err == nil {
			t.Fatalf("server sent %q before the handler read the body", peekAll(cl.br))
		}
		cl.c.SetReadDeadline(time.Now().Add(ioTimeout))
		proceed <- struct{}{}
		resp, _ := cl.read("PUT")
		if resp.StatusCode != http.StatusContinue || resp.Proto != "HTTP/1.1" {
			t.Fatalf("interim answer %s, want 100 Continue", resp.Status)
		}
		cl.send("hello")
		resp, body := cl.read("PUT")
		if resp.StatusCode != 200 || body != "got hello" {
			t.Fatalf("answer %s %q", resp.Status, body)
		}
		cl.alive()
	})
	t.Run("unread closes", func(t *testing.T) {
		cl := dial(t, addr)
		cl.send("PUT /ignore HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
		<-entered
		resp, body := cl.read("PUT")
		if resp.StatusCode != 200 || body != "refused" || !resp.Close {
			t.Fatalf("answer %s %q Close=%v, want 200 refused close", resp.Status, body, resp.Close)
		}
		cl.closed()
	})
	t.Run("http/1.0 gets no continue", func(t *testing.T) {
		cl := dial(t, addr)
		cl.send("PUT /read HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
		<-entered
		proceed <- struct{}{}
		resp, body := cl.read("PUT")
		if resp.StatusCode != 200 || body != "got hello" {
			t.Fatalf("answer %s %q", resp.Status, body)
		}
	})
}

func peekAll(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// TestContinueAfterAnswerStarted: a handler that starts its answer before
// reading a 100-continue body must not get "100 Continue" written into
// the middle of its answer.
func TestContinueAfterAnswerStarted(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "head")
		w.(http.Flusher).Flush()
		// The client got a final answer and need not send the body.
		r.Body.Read(make([]byte, 1))
		io.WriteString(w, "tail")
	})
	addr := startServer(t, &Server{Handler: h})
	cl := dial(t, addr)
	cl.send("PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	// The client sends no body (so the handler's read ends at once).
	cl.c.(*net.TCPConn).CloseWrite()
	raw, err := io.ReadAll(cl.br)
	if err != nil {
		t.Fatal(err)
	}
	// Read raw: a chunked decoder could swallow a stray line.
	if bytes.Contains(raw, []byte("100 Continue")) {
		t.Fatalf("100 Continue inside the answer: %q", raw)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "headtail" || err != nil {
		t.Fatalf("answer %s %q: %v", resp.Status, body, err)
	}
}

func TestLargeUnreadBodyCloses(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "too big", http.StatusRequestEntityTooLarge)
	})
	addr := startServer(t, &Server{Handler: h})
	cl := dial(t, addr)
	const size = 1 << 20
	// The client writes the whole body as a naive client does, while the
	// answer is read: the answer must arrive whole (no reset).
	go func() {
		io.WriteString(cl.c, "PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: "+strconv.Itoa(size)+"\r\n\r\n")
		cl.c.Write(make([]byte, size))
	}()
	resp, body := cl.read("PUT")
	if resp.StatusCode != http.StatusRequestEntityTooLarge || body != "too big\n" || !resp.Close {
		t.Fatalf("answer %s %q Close=%v", resp.Status, body, resp.Close)
	}
	// The server ends its side with a FIN, not a reset that would make
	// the client's stack drop the answer it has not read yet.
	if b, err := io.ReadAll(cl.br); err != nil || len(b) > 0 {
		t.Fatalf("after the answer: %q, %v; want a clean end", b, err)
	}
}

// A body far over what is worth skipping is not read before the answer:
// the client that sends its headers and then waits (or sends slowly)
// gets the answer at once, and the connection closes after it.
func TestLargeUnreadBodyAnsweredAtOnce(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "too big", http.StatusRequestEntityTooLarge)
	})
	addr := startServer(t, &Server{Handler: h})
	cl := dial(t, addr)
	cl.send("PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: " + strconv.Itoa(1<<20) + "\r\n\r\n0123456789")
	resp, body := cl.read("PUT")
	if resp.StatusCode != http.StatusRequestEntityTooLarge || body != "too big\n" || !resp.Close {
		t.Fatalf("answer %s %q Close=%v", resp.Status, body, resp.Close)
	}
}

// logBuffer collects a Server's log output.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestHandlerPanic(t *testing.T) {
	cases := []struct {
		name   string
		value  any
		logged bool
	}{
		{name: "panic", value: "boom", logged: true},
		{name: "abort handler", value: http.ErrAbortHandler, logged: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/panic" {
					io.WriteString(w, "partial")
					panic(tc.value)
				}
			})
			addr := startServer(t, &Server{Handler: h, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			cl := dial(t, addr)
			cl.send("GET /panic HTTP/1.1\r\nHost: h\r\n\r\n")
			cl.closed()
			dial(t, addr).alive()
			if got := strings.Contains(logs.String(), "panic"); got != tc.logged {
				t.Errorf("logged %v, want %v: %s", got, tc.logged, logs.String())
			}
		})
	}
}

// blocker is a handler whose requests to /block wait for release.
type blocker struct {
	entered chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 10), release: make(chan struct{})}
}

func (b *blocker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/block" {
		b.entered <- struct{}{}
		<-b.release
	}
	io.WriteString(w, "done")
}

func TestShutdown(t *testing.T) {
	t.Run("idle closed", func(t *testing.T) {
		s := &Server{Handler: newBlocker()}
		addr := startServer(t, s)
		cl := dial(t, addr)
		cl.alive()
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		cl.closed()
		if _, err := net.Dial("tcp", addr); err == nil {
			t.Error("still accepting after Shutdown")
		}
	})
	t.Run("waits for active", func(t *testing.T) {
		b := newBlocker()
		s := &Server{Handler: b}
		addr := startServer(t, s)
		cl := dial(t, addr)
		cl.send("GET /block HTTP/1.1\r\nHost: h\r\n\r\n")
		<-b.entered
		done := make(chan error, 1)
		go func() { done <- s.Shutdown(context.Background()) }()
		// Shutdown has begun once the listener no longer accepts.
		poll(t, "the listener to close", func() bool {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			return err != nil
		})
		select {
		case err := <-done:
			t.Fatalf("Shutdown returned %v with a request active", err)
		default:
		}
		close(b.release)
		resp, body := cl.read("GET")
		if resp.StatusCode != 200 || body != "done" || !resp.Close {
			t.Fatalf("answer %s %q Close=%v", resp.Status, body, resp.Close)
		}
		cl.closed()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
		case <-time.After(ioTimeout):
			t.Fatal("Shutdown did not return")
		}
	})
	t.Run("context ends", func(t *testing.T) {
		b := newBlocker()
		s := &Server{Handler: b}
		addr := startServer(t, s)
		defer close(b.release)
		cl := dial(t, addr)
		cl.send("GET /block HTTP/1.1\r\nHost: h\r\n\r\n")
		<-b.entered
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
		}
	})
	t.Run("serve after shutdown", func(t *testing.T) {
		s := &Server{Handler: echo}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Fatalf("Serve: %v, want ErrServerClosed", err)
		}
		if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			t.Error("listener left open")
		}
	})
}

func TestClose(t *testing.T) {
	b := newBlocker()
	defer close(b.release)
	s := &Server{Handler: b}
	addr := startServer(t, s)
	idle := dial(t, addr)
	idle.alive()
	active := dial(t, addr)
	active.send("GET /block HTTP/1.1\r\nHost: h\r\n\r\n")
	<-b.entered
	s.Close()
	idle.closed()
	active.closed()
}

func TestTimeouts(t *testing.T) {
	cases := []struct {
		name string
		s    *Server
		// first is sent, then the connection must close.
		first string
		// alive: a request is served first.
		alive bool
	}{
		{name: "idle timeout", s: &Server{IdleTimeout: 50 * time.Millisecond}, alive: true},
		{name: "idle timeout from read header timeout", s: &Server{ReadHeaderTimeout: 50 * time.Millisecond}, alive: true},
		{name: "idle timeout before first request", s: &Server{IdleTimeout: 50 * time.Millisecond}},
		{name: "read header timeout", s: &Server{ReadHeaderTimeout: 50 * time.Millisecond, IdleTimeout: time.Hour}, first: "GET / HTTP/1.1\r\nHo"},
		// A new connection that sends nothing waits ReadHeaderTimeout, not
		// IdleTimeout (as net/http's).
		{name: "read header timeout before first byte", s: &Server{ReadHeaderTimeout: 50 * time.Millisecond, IdleTimeout: time.Hour}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.Handler = echo
			addr := startServer(t, tc.s)
			cl := dial(t, addr)
			if tc.alive {
				cl.alive()
			}
			cl.send(tc.first)
			start := time.Now()
			cl.closed()
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("closed after %v", d)
			}
		})
	}
}

func TestBodyReadNotCutByReadHeaderTimeout(t *testing.T) {
	got := make(chan string, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%s %v", b, err)
	})
	addr := startServer(t, &Server{Handler: h, ReadHeaderTimeout: 30 * time.Millisecond})
	cl := dial(t, addr)
	cl.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\na")
	// Wait past the header timeout before sending the rest of the body.
	time.Sleep(100 * time.Millisecond)
	cl.send("b")
	if g := <-got; g != "ab <nil>" {
		t.Fatalf("handler read %q", g)
	}
}

func TestSlowRequestCanceledWhenClientLeaves(t *testing.T) {
	type result struct {
		canceled bool
		err      error
	}
	results := make(chan result, 1)
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wait := 3 * watchAfter
		if r.URL.Path == "/leave" {
			wait = ioTimeout
		}
		// The watch starts once the body is read (before, the handler may
		// still read from the connection), as net/http's does.
		io.ReadAll(r.Body)
		entered <- struct{}{}
		select {
		case <-r.Context().Done():
			results <- result{true, r.Context().Err()}
		case <-time.After(wait):
			results <- result{false, nil}
			io.WriteString(w, "finished "+r.Method)
		}
	})
	addr := startServer(t, &Server{Handler: h})
	// With RequestTimeout the context is another kind (it has a timer):
	// the client leaving must cancel it all the same.
	timedAddr := startServer(t, &Server{Handler: h, RequestTimeout: time.Hour})
	for i, req := range []string{
		"GET /leave HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /leave HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc",
		"POST /leave HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"GET /leave HTTP/1.1\r\nHost: h\r\n\r\n",
	} {
		addr := addr
		name := "client leaves "
		if i == 3 {
			addr, name = timedAddr, "client leaves with RequestTimeout "
		}
		t.Run(name+strings.Fields(req)[0]+" "+strconv.Itoa(len(req)), func(t *testing.T) {
			cl := dial(t, addr)
			cl.send(req)
			<-entered
			cl.c.Close()
			start := time.Now()
			r := <-results
			if !r.canceled || !errors.Is(r.err, context.Canceled) {
				t.Fatalf("handler not canceled: %+v", r)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("canceled after %v", d)
			}
		})
	}
	t.Run("client stays", func(t *testing.T) {
		cl := dial(t, addr)
		cl.send("GET /stay HTTP/1.1\r\nHost: h\r\n\r\n")
		<-entered
		if r := <-results; r.canceled {
			t.Fatalf("handler canceled: %v", r.err)
		}
		resp, body := cl.read("GET")
		if resp.StatusCode != 200 || body != "finished GET" {
			t.Fatalf("answer %s %q", resp.Status, body)
		}
		cl.alive()
	})
	t.Run("pipelined request kept", func(t *testing.T) {
		// The background read of a watched request takes the first byte
		// of the next request; it must be handed on.
		cl := dial(t, addr)
		cl.send("GET /stay HTTP/1.1\r\nHost: h\r\n\r\n")
		<-entered
		cl.send("GET /alive HTTP/1.1\r\nHost: h\r\n\r\n")
		<-entered
		<-results
		resp, body := cl.read("GET")
		if resp.StatusCode != 200 || body != "finished GET" {
			t.Fatalf("answer %s %q", resp.Status, body)
		}
		// /alive also waits (it is not /leave) and then finishes; its
		// method shows whether its first byte was lost.
		<-results
		resp, body = cl.read("GET")
		if resp.StatusCode != 200 || body != "finished GET" {
			t.Fatalf("second answer %s %q", resp.Status, body)
		}
	})
}

func TestTLS(t *testing.T) {
	cert := selfSigned(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || !r.TLS.HandshakeComplete {
			http.Error(w, "no TLS state", 500)
			return
		}
		fmt.Fprintf(w, "tls %s %s", tls.VersionName(r.TLS.Version), r.Host)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, ReadHeaderTimeout: time.Second}
	done := make(chan error, 1)
	go func() { done <- s.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})) }()
	defer func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(ioTimeout))
	cl := &client{t: t, c: c, br: bufio.NewReader(c)}
	for range 2 {
		cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		resp, body := cl.read("GET")
		if resp.StatusCode != 200 || body != "tls TLS 1.3 h" {
			t.Fatalf("answer %s %q", resp.Status, body)
		}
	}
	// A plain HTTP request to the TLS port (an http:// endpoint for an
	// https:// one) is told so, as net/http tells it, instead of seeing
	// its connection closed without a word; the methods of the Table
	// API's writes are recognized too.
	for _, method := range []string{"GET", "POST", "PUT", "DELETE", "MERGE", "PATCH", "HEAD", "OPTIONS"} {
		t.Run("plain http "+method, func(t *testing.T) {
			cl := dial(t, ln.Addr().String())
			cl.send(method + " /devstoreaccount1/Tables HTTP/1.1\r\nHost: h\r\n\r\n")
			resp, body := cl.read("GET")
			if resp.StatusCode != http.StatusBadRequest || body != "Client sent an HTTP request to an HTTPS server.\n" {
				t.Fatalf("answer %s %q", resp.Status, body)
			}
			cl.closed()
		})
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestConcurrentConns runs many connections at once, for the race detector.
func TestConcurrentConns(t *testing.T) {
	addr := startServer(t, &Server{Handler: echo})
	var wg sync.WaitGroup
	var fails atomic.Int32
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				fails.Add(1)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(ioTimeout))
			br := bufio.NewReader(c)
			for j := range 20 {
				fmt.Fprintf(c, "POST /%d/%d HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", i, j)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					fails.Add(1)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				if string(b) != fmt.Sprintf("POST /%d/%d host=h body=x", i, j) {
					fails.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := fails.Load(); n > 0 {
		t.Fatalf("%d failures", n)
	}
}

// TestRequestTimeout: a request's context has RequestTimeout's deadline,
// counted from its header, and ends with DeadlineExceeded at it; without
// RequestTimeout it has none. Either way it ends (Canceled) when the
// handler returns.
func TestRequestTimeout(t *testing.T) {
	type seen struct {
		ctx      context.Context
		deadline time.Time
		hasDL    bool
		err      error     // the context's once Done, for /wait
		doneAt   time.Time // when it was, for /wait
	}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{
		{"no timeout", 0},
		{"long timeout", time.Hour},
		{"short timeout", 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan seen, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				sn := seen{ctx: ctx}
				sn.deadline, sn.hasDL = ctx.Deadline()
				if r.URL.Path == "/wait" {
					select {
					case <-ctx.Done():
						sn.err, sn.doneAt = ctx.Err(), time.Now()
					case <-time.After(ioTimeout):
					}
				}
				got <- sn
			})
			addr := startServer(t, &Server{Handler: h, RequestTimeout: tc.timeout})
			cl := dial(t, addr)
			before := time.Now()
			cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
			sn := <-got
			cl.read("GET")
			after := time.Now()
			if tc.timeout == 0 {
				if sn.hasDL {
					t.Fatalf("deadline %v without RequestTimeout", sn.deadline)
				}
			} else if !sn.hasDL || sn.deadline.Before(before.Add(tc.timeout)) || sn.deadline.After(after.Add(tc.timeout)) {
				t.Fatalf("deadline %v (%v), want RequestTimeout %v after the request, between %v and %v",
					sn.deadline, sn.hasDL, tc.timeout, before.Add(tc.timeout), after.Add(tc.timeout))
			}
			// The handler has returned: its context is done, canceled, not
			// timed out.
			poll(t, "context canceled at the handler's return", func() bool { return sn.ctx.Err() != nil })
			if err := sn.ctx.Err(); err != context.Canceled {
				t.Fatalf("after the handler returned: %v, want context.Canceled", err)
			}
			if tc.timeout == 0 || tc.timeout == time.Hour {
				return
			}
			cl.send("GET /wait HTTP/1.1\r\nHost: h\r\n\r\n")
			sn = <-got
			cl.read("GET")
			if sn.err != context.DeadlineExceeded {
				t.Fatalf("at the deadline: %v, want context.DeadlineExceeded", sn.err)
			}
			if sn.doneAt.Before(sn.deadline) {
				t.Fatalf("done %v before its deadline", sn.deadline.Sub(sn.doneAt))
			}
		})
	}
}

// TestConnStateResetBetweenRequests: the answer's header map, the body and
// the header scratch a connection keeps between requests start each
// request empty.
func TestConnStateResetBetweenRequests(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var leftover []string
		for k := range w.Header() {
			leftover = append(leftover, k)
		}
		w.Header().Set("X-Path", r.URL.Path)
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "left=%v v=%q w=%q body=%q err=%v", leftover, r.Header["X-V"], r.Header["X-W"], b, err)
	})
	addr := startServer(t, &Server{Handler: h})
	cl := dial(t, addr)
	for _, tc := range []struct{ req, want string }{
		{"POST /a HTTP/1.1\r\nHost: h\r\nX-V: first value\r\nX-W: 1\r\nX-W: 2\r\nContent-Length: 3\r\n\r\nabc",
			`left=[] v=["first value"] w=["1" "2"] body="abc" err=<nil>`},
		{"GET /b HTTP/1.1\r\nHost: h\r\nX-V: 2\r\n\r\n",
			`left=[] v=["2"] w=[] body="" err=<nil>`},
		{"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nde\r\n0\r\n\r\n",
			`left=[] v=[] w=[] body="de" err=<nil>`},
		{"GET /d HTTP/1.1\r\nHost: h\r\n\r\n",
			`left=[] v=[] w=[] body="" err=<nil>`},
	} {
		cl.send(tc.req)
		resp, body := cl.read("GET")
		if body != tc.want {
			t.Errorf("%s: answered %q, want %q", strings.Fields(tc.req)[1], body, tc.want)
		}
		if got, want := resp.Header["X-Path"], strings.Fields(tc.req)[1]; len(got) != 1 || got[0] != want {
			t.Errorf("%s: X-Path %q", want, got)
		}
	}
}

// TestSlowClientsBounded: with RequestTimeout, a client that sends its
// body slowly or not at all, or does not read its answer, holds the
// connection and its handler for a bounded time (RequestTimeout from the
// request's header for the body, writeSlack times it for the answer), not
// until it goes away.
func TestSlowClientsBounded(t *testing.T) {
	const timeout = 50 * time.Millisecond
	bound := writeSlack*timeout + time.Second // the slack: a loaded machine's scheduling
	t.Run("body never sent", func(t *testing.T) {
		got := make(chan error, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			got <- err
			http.Error(w, "body too slow", http.StatusRequestTimeout)
		})
		addr := startServer(t, &Server{Handler: h, RequestTimeout: timeout, ReadHeaderTimeout: time.Hour, IdleTimeout: time.Hour})
		cl := dial(t, addr)
		start := time.Now()
		cl.send("PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
		select {
		case err := <-got:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("body read: %v, want a deadline error", err)
			}
			if d := time.Since(start); d > bound {
				t.Errorf("body read ended after %v", d)
			}
		case <-time.After(ioTimeout):
			t.Fatal("body read still waiting for the client")
		}
		// The handler's answer after its deadline is still written.
		resp, body := cl.read("PUT")
		if resp.StatusCode != http.StatusRequestTimeout || body != "body too slow\n" || !resp.Close {
			t.Fatalf("answer %s %q Close=%v", resp.Status, body, resp.Close)
		}
		cl.closed()
	})
	t.Run("unread body never sent", func(t *testing.T) {
		// The handler answers without reading (as the front-end's
		// refusals before authentication do); the body, small enough to
		// be skipped, never comes: the answer must all the same.
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "denied", http.StatusForbidden)
		})
		addr := startServer(t, &Server{Handler: h, RequestTimeout: timeout})
		cl := dial(t, addr)
		start := time.Now()
		cl.send("PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\nabc")
		resp, body := cl.read("PUT")
		if resp.StatusCode != http.StatusForbidden || body != "denied\n" || !resp.Close {
			t.Fatalf("answer %s %q Close=%v", resp.Status, body, resp.Close)
		}
		if d := time.Since(start); d > bound {
			t.Errorf("answered after %v", d)
		}
	})
	t.Run("answer never read", func(t *testing.T) {
		got := make(chan error, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			chunk := make([]byte, 64<<10)
			for range 1 << 10 { // 64 MiB, more than socket buffers hold
				if _, err := w.Write(chunk); err != nil {
					got <- err
					return
				}
			}
			got <- nil
		})
		addr := startServer(t, &Server{Handler: h, RequestTimeout: timeout})
		cl := dial(t, addr)
		start := time.Now()
		cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		select {
		case err := <-got:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("answer write: %v, want a deadline error", err)
			}
			if d := time.Since(start); d > bound {
				t.Errorf("answer write ended after %v", d)
			}
		case <-time.After(ioTimeout):
			t.Fatal("answer write still waiting for the client")
		}
	})
	t.Run("handler past the deadline", func(t *testing.T) {
		// The watch for a vanished client (from watchAfter) reads under
		// the request's read deadline, passed by then: its timeout is not
		// the client leaving, and the connection is kept.
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-r.Context().Done() // at the read deadline too
				time.Sleep(50 * time.Millisecond)
			}
			io.WriteString(w, "late")
		})
		addr := startServer(t, &Server{Handler: h, RequestTimeout: 2 * watchAfter})
		cl := dial(t, addr)
		cl.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
		if resp, body := cl.read("GET"); resp.StatusCode != 200 || body != "late" || resp.Close {
			t.Fatalf("answer %s %q Close=%v", resp.Status, body, resp.Close)
		}
		cl.alive()
	})
	t.Run("keep-alive past the deadline", func(t *testing.T) {
		// The request's deadline is its own: a keep-alive connection
		// idle past it (without IdleTimeout) serves the next request,
		// and an answer refused after that idle time is still written.
		addr := startServer(t, &Server{Handler: echo, RequestTimeout: timeout})
		cl := dial(t, addr)
		cl.alive()
		time.Sleep(3 * writeSlack * timeout)
		cl.alive()
		time.Sleep(3 * writeSlack * timeout)
		cl.send("GET / HTTP/1.1\r\n\r\n")
		if resp, _ := cl.read("GET"); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("answer %s, want 400", resp.Status)
		}
	})
}

// TestTLSHandshakeTimeout: a TLS connection that never completes its
// handshake is closed after the time a plain one waits for its first
// byte: ReadHeaderTimeout, or IdleTimeout without it.
func TestTLSHandshakeTimeout(t *testing.T) {
	cert := selfSigned(t)
	for _, tc := range []struct {
		name string
		s    *Server
		sent string // by the client, which then waits
	}{
		{"read header timeout", &Server{ReadHeaderTimeout: 50 * time.Millisecond}, ""},
		{"idle timeout", &Server{IdleTimeout: 50 * time.Millisecond}, ""},
		{"idle timeout, partial hello", &Server{IdleTimeout: 50 * time.Millisecond}, "\x16\x03\x01\x00\xff\x01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.Handler = echo
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- tc.s.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})) }()
			defer func() {
				tc.s.Close()
				<-done
			}()
			cl := dial(t, ln.Addr().String())
			cl.send(tc.sent)
			start := time.Now()
			cl.closed()
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("closed after %v", d)
			}
		})
	}
}

// TestWatchOverTLS: the watch for a vanished client reads through the TLS
// connection, and end stops that read with a deadline in the past: the
// connection must serve on after it (crypto/tls keeps a timed-out read's
// state), and a pipelined request's first byte, read by the watch, must
// reach the next request.
func TestWatchOverTLS(t *testing.T) {
	cert := selfSigned(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(2 * watchAfter) // watched from watchAfter on
		}
		io.WriteString(w, r.Method+" "+r.URL.Path)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, ReadHeaderTimeout: ioTimeout, RequestTimeout: ioTimeout}
	done := make(chan error, 1)
	go func() { done <- s.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})) }()
	defer func() {
		s.Close()
		<-done
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(ioTimeout))
	cl := &client{t: t, c: c, br: bufio.NewReader(c)}
	// Watched, stopped by end.
	cl.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, body := cl.read("GET"); resp.StatusCode != 200 || body != "GET /slow" || resp.Close {
		t.Fatalf("answer %s %q Close=%v", resp.Status, body, resp.Close)
	}
	cl.send("GET /after HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, body := cl.read("GET"); resp.StatusCode != 200 || body != "GET /after" {
		t.Fatalf("answer %s %q", resp.Status, body)
	}
	// Watched, with the next request arriving meanwhile.
	cl.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	time.Sleep(watchAfter + watchAfter/2)
	cl.send("GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
	for _, want := range []string{"GET /slow", "GET /next"} {
		if resp, body := cl.read("GET"); resp.StatusCode != 200 || body != want {
			t.Fatalf("answer %s %q, want %q", resp.Status, body, want)
		}
	}
}
