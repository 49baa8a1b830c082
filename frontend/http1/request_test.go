package http1

import (
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

func TestBodyErrors(t *testing.T) {
	cases := []struct {
		name string
		raw  string
		read func(io.ReadCloser) error // nil: read to the end
		want error                     // from the body read
	}{
		{name: "content-length short", raw: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nab", want: io.ErrUnexpectedEOF},
		{name: "chunked cut in data", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", want: io.ErrUnexpectedEOF},
		{name: "chunked cut before trailer end", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n", want: io.ErrUnexpectedEOF},
		{name: "chunked cut in trailer", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\r\n", want: io.ErrUnexpectedEOF},
		{name: "chunked cut in trailer line", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T", want: io.ErrUnexpectedEOF},
		{name: "chunked malformed trailer", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n0\r\n\r\n", want: errBadTrailer},
		{name: "chunked folded trailer", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX: 1\r\n 2\r\n\r\n", want: errBadTrailer},
		{name: "chunked trailer bad value", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX: \x01\r\n\r\n", want: errBadTrailer},
		{name: "chunked bare LF trailer end", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX: 1\n\n", want: nil},
		{name: "chunked complete", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\r\n\r\n", want: nil},
		{name: "read after close", raw: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nabcde", want: http.ErrBodyReadAfterClose,
			read: func(b io.ReadCloser) error {
				b.Close()
				_, err := b.Read(make([]byte, 1))
				return err
			}},
		{name: "error sticks", raw: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nab", want: io.ErrUnexpectedEOF,
			read: func(b io.ReadCloser) error {
				io.ReadAll(b)
				_, err := b.Read(make([]byte, 1))
				return err
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testConn(tc.raw)
			r, _, err := c.readRequest()
			if err != nil {
				t.Fatal(err)
			}
			if tc.read != nil {
				err = tc.read(r.Body)
			} else {
				_, err = readBounded(r.Body, len(tc.raw))
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("body read: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestHeaderAllocationsBounded: reading a header of up to MaxHeaderBytes
// allocates a few times its size whatever its shape. Many tiny fields
// ("a:" lines, 3 or 4 bytes each) cost ~30 bytes each in the reader's
// field list, header map and value slices: a 1 MiB header of them took
// over 90 MiB (net/http's reader: ~20 MiB) before the field count was
// bounded.
func TestHeaderAllocationsBounded(t *testing.T) {
	const size = DefaultMaxHeaderBytes - 100
	cases := []struct{ name, raw string }{
		{"tiny fields", "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("a:\r\n", size/4) + "\r\n"},
		{"tiny fields, bare LF", "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("a:\n", size/3) + "\r\n"},
		{"one long value", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("v", size) + "\r\n\r\n"},
		{"long values", "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X: "+strings.Repeat("v", size/maxHeaderFields)+"\r\n", maxHeaderFields-2) + "\r\n"},
		{"long request line", "GET /" + strings.Repeat("v", size) + " HTTP/1.1\r\nHost: h\r\n\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testConn(tc.raw)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, _, err := c.readRequest()
			runtime.ReadMemStats(&after)
			var bad *badRequest
			if err != nil && !(errors.As(err, &bad) && bad.status == http.StatusRequestHeaderFieldsTooLarge) {
				t.Fatalf("read: %v", err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 10*uint64(len(tc.raw)) {
				t.Errorf("reading a header of %d bytes allocated %d (%.0fx)", len(tc.raw), n, float64(n)/float64(len(tc.raw)))
			}
		})
	}
}
