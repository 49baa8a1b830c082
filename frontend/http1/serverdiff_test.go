package http1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// answer is what a client reads of one answer, as compared between
// servers.
type answer struct {
	status int
	body   string
	close  bool
}

func showAnswers(as []answer) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "[%d %q close=%v] ", a.status, trunc(a.body), a.close)
	}
	return b.String()
}

// answersTo sends raw on a new connection to addr, ends its side, and
// reads the answers until the server closes.
func answersTo(t *testing.T, addr, raw string) []answer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(c)
	var out []answer
	for {
		var req *http.Request // a GET's answer is read alike
		if len(out) == 0 && strings.HasPrefix(raw, "HEAD ") {
			req = &http.Request{Method: http.MethodHead}
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("no answer and no close: %v", err)
			}
			return out
		}
		b, _ := io.ReadAll(resp.Body)
		out = append(out, answer{resp.StatusCode, string(b), resp.Close})
	}
}

// diffHandler is echo but for a few paths: /ignore answers without
// reading the body, /panic panics, /close asks to close the connection,
// /big writes an answer longer than the server's buffers, /slow answers
// after the watch for a vanished client has begun.
var diffHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/ignore":
		io.WriteString(w, "ignored")
	case "/panic":
		panic("diff")
	case "/close":
		w.Header().Set("Connection", "close")
		io.WriteString(w, "closing")
	case "/slow":
		// Past watchAfter: watched for the client leaving, which the
		// half-close answersTo makes look like it.
		time.Sleep(2 * watchAfter)
		io.WriteString(w, "slow")
	case "/big":
		io.WriteString(w, strings.Repeat("b", 3*bufSize))
	default:
		echo(w, r)
	}
})

// serverSeeds are connections' worth of bytes for TestServerMatchesNetHTTP
// beyond the parser's corpora: pipelining, connection ends and limits.
var serverSeeds = []string{
	"GET /1 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /1 HTTP/1.0\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
	"GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
	"POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"PUT /1 HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nxGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nab",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("e", 2*bufSize) + "\r\na\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nContent-Length: 9\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-A: " + strings.Repeat("a", DefaultMaxHeaderBytes+8<<10) + "\r\n\r\n",
	"GET /" + strings.Repeat("a", DefaultMaxHeaderBytes+8<<10) + " HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\nContent-Length: 3\r\n\r\nabc",
	"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\nabc",
	"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x3\r\n\r\nabc",
	"GET / HTTP/1.1\nHost: h\nContent-Length: 1\n\nxGET /2 HTTP/1.1\nHost: h\n\n",
	"PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
	// Handlers' side: a body left unread is skipped when small, a large
	// one or one awaiting 100-continue closes; a panic closes without an
	// answer; the handler's Connection: close; a long answer.
	"POST /ignore HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST /ignore HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST /ignore HTTP/1.1\r\nHost: h\r\nContent-Length: 300000\r\n\r\n" + strings.Repeat("x", 300000) + "GET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST /ignore HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhelloGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /panic HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /close HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /slow HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"HEAD /big HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /big HTTP/1.1\r\nHost: h\r\n\r\nGET /big HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
	"PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
}

// TestServerMatchesNetHTTP: for each input, the answers a client gets on
// one connection (their number, statuses, and bodies of successful ones)
// are net/http's Server's, but for the deliberate differences listed,
// each of which must still differ.
func TestServerMatchesNetHTTP(t *testing.T) {
	ours := startServer(t, &Server{Handler: diffHandler})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	std := &http.Server{Handler: diffHandler, ErrorLog: log.New(io.Discard, "", 0)}
	go std.Serve(ln)
	t.Cleanup(func() { std.Close() })
	deliberate := map[string]string{
		"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n":                          "net/http answers OPTIONS * itself; ours hands it to the handler",
		"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n": "Transfer-Encoding in HTTP/1.0 (doc.go)",
		"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n":              "obs-fold (doc.go)",
		"GET / HTTP/1.2\r\nHost: h\r\n\r\n":                              "HTTP/1.2 (doc.go)",
		"GET * HTTP/1.1\r\nHost: h\r\n\r\n":                              "* outside OPTIONS (doc.go)",
		"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n":                  "CONNECT's authority form (doc.go)",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n": "both framings close after the answer (doc.go)",
	}
	for raw, why := range map[string]string{
		"GET /1 HTTP/1.1\r\nHost: h\r\n\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n":           "ours skips an empty line before any request (RFC 9112 2.2), net/http only after a POST",
		"\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n":                                              "ours skips an empty line before a first request too",
		"GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("A:\r\n", maxHeaderFields) + "\r\n": "the field count (doc.go)",
	} {
		deliberate[raw] = why
		serverSeeds = append(serverSeeds, raw)
	}
	var inputs []string
	for _, tc := range wellFormed {
		inputs = append(inputs, tc.raw)
	}
	inputs = append(inputs, refusedSeeds...)
	inputs = append(inputs, serverSeeds...)
	for _, raw := range inputs {
		o := answersTo(t, ours, raw)
		s := answersTo(t, ln.Addr().String(), raw)
		same := len(o) == len(s)
		for i := 0; same && i < len(o); i++ {
			same = o[i].status == s[i].status && (o[i].status >= 300 || o[i].body == s[i].body)
		}
		why, ok := deliberate[raw]
		switch {
		case !same && !ok:
			t.Errorf("%s:\n  ours     %s\n  net/http %s", trunc(raw), showAnswers(o), showAnswers(s))
		case same && ok:
			t.Errorf("%s: no longer differs from net/http (%s)", trunc(raw), why)
		}
	}
}
