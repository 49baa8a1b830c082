package http1

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// refusedSeeds are requests ours refuses, to start the fuzzer near the
// edges of what it accepts.
var refusedSeeds = []string{
	"GET / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
	"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx",
	"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-A : a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX(A): a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x01b\r\n\r\n",
	"GET / HTTP/2.0\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.2\r\nHost: h\r\n\r\n",
	"G(T / HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET * HTTP/1.1\r\nHost: h\r\n\r\n",
	"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
	"GET /\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n",
	// Found by hand after the first fuzz runs (see the commit adding
	// them): non-ASCII space around a Connection token, a chunked body
	// cut off in its trailer section, an unparsable version.
	"GET / HTTP/1.1\r\nHost: h\r\nConnection: \xc2\xa0close\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\xc2\x85\r\n\r\n",
	"GET / HTTP/1.0\r\nConnection: \tkeep-alive\t\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\r\n",
	"GET / HTTP/1.1 \r\nHost: h\r\n\r\n",
	"GET http://[::1%25eth0]/ HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\xff\r\n\r\n",
	// A second request after the first: both must stop at its start.
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX: y\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
	// Smuggling's usual suspects (review of 2026-11-27): a coding list,
	// a hex or listed length, a space or tab before the colon, a
	// Content-Length in the trailer, a bare CR, an empty line first.
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\nContent-Length: 1\r\n\r\nx",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x1\r\n\r\nx",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 1\r\n\r\nx",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nContent-Length: 9\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nX: a\rContent-Length: 1\r\n\r\nx",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\rx\r\n0\r\n\r\n",
	"\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("A:\r\n", maxHeaderFields) + "\r\n",
}

// FuzzReadRequest feeds the package's request reader arbitrary bytes: it
// must never panic or loop, and when net/http's http.ReadRequest accepts
// the same request the two must agree on what a handler sees, except for
// the deliberate differences listed on compareRequests (normalized away
// here).
func FuzzReadRequest(f *testing.F) {
	for _, tc := range wellFormed {
		f.Add(tc.raw)
	}
	for _, raw := range refusedSeeds {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		// A reader stuck on an input fails it (and so saves it) instead
		// of stalling the fuzzer without a word.
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				panic(fmt.Sprintf("reading %q did not end", raw))
			}
		}()
		ours, ob, on, oerr := parseOursN(raw)
		if errors.Is(oerr, errReadLoop) {
			t.Fatalf("ours: %v", oerr)
		}
		if ours == nil {
			return // refused, or the body failed to read: nothing to compare
		}
		std, sb, sn, serr := parseStdN(raw)
		if std == nil {
			return
		}
		normalizeStd(std)
		// Pragma: net/http adds Cache-Control.
		if _, ok := ours.Header["Cache-Control"]; !ok {
			if p := ours.Header["Pragma"]; len(p) > 0 && p[0] == "no-cache" {
				delete(std.Header, "Cache-Control")
			}
		}
		// Trailer: net/http moves the field to r.Trailer on chunked
		// requests, and reads (and checks) the trailer section that ours
		// discards, so the body reads may end differently.
		if ours.TransferEncoding != nil {
			if _, ok := ours.Header["Trailer"]; ok {
				if _, ok := std.Header["Trailer"]; !ok {
					ours.Header = ours.Header.Clone()
					delete(ours.Header, "Trailer")
				}
			}
			if serr != nil && oerr == nil && serr.Error() == "http: unexpected EOF reading trailer" &&
				on == len(raw) && !strings.HasSuffix(raw, "\r\n") {
				// The trailer section ended by a bare LF, then the
				// input's end: net/http peeks for a CRLF (and on a live
				// connection waits for a second byte); ours takes the
				// LF as the empty line, as textproto does in headers.
				serr, sn = nil, on
			}
			if serr != nil && oerr == nil && serr.Error() == "http: suspiciously long trailer after chunked body" {
				// net/http wants a CRLF CRLF within its buffer after
				// a trailer field: it refuses a trailer section ended
				// by a bare LF, which ours takes as textproto takes it
				// in headers.
				serr, sn = nil, on
			}
		}
		if (oerr == nil) != (serr == nil) {
			t.Errorf("body read: ours %v, net/http %v", oerr, serr)
		}
		if oerr != nil || serr != nil {
			ob, sb = nil, nil // a failed read's bytes may differ
		}
		if oerr == nil && serr == nil && on != sn {
			// Where the next request starts: a disagreement here is
			// what request smuggling is made of.
			t.Errorf("request took %d bytes in ours, %d in net/http", on, sn)
		}
		if ours.Close && !std.Close && ours.TransferEncoding != nil && bothFramings(raw) {
			// Deliberate (TestParseDeliberateDifferences "chunked and
			// length"): ours closes after such a request, RFC 9112 6.1.
			c := *std
			c.Close = true
			std = &c
		}
		for _, d := range compareRequests(ours, std, ob, sb) {
			t.Error(d)
		}
		if t.Failed() {
			t.Logf("request %q", raw)
		}
	})
}

// TestReadRequestNoBody checks the body a handler gets when there is none.
func TestReadRequestNoBody(t *testing.T) {
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
	} {
		r, b, err := parseOurs(raw)
		if err != nil || r.Body != http.NoBody || len(b) != 0 || r.ContentLength != 0 {
			t.Errorf("%q: body %v %q %d: %v", strings.Fields(raw)[0], r.Body, b, r.ContentLength, err)
		}
	}
}

// bothFramings reports whether raw's header section has a Content-Length
// field as well as (by the caller's check) a chunked Transfer-Encoding.
func bothFramings(raw string) bool {
	head, _, _ := strings.Cut(raw, "\r\n\r\n")
	return strings.Contains(strings.ToLower(head), "\ncontent-length:")
}
