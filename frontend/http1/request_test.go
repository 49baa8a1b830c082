package http1

import (
	"errors"
	"io"
	"net/http"
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
