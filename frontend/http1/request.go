package http1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"
)

// badRequest is a request refused before its handler: answered with
// status and msg, and the connection closed.
type badRequest struct {
	status int
	msg    string
}

func (e *badRequest) Error() string { return strconv.Itoa(e.status) + " " + e.msg }

func bad(status int, msg string) error { return &badRequest{status: status, msg: msg} }

var errTooLarge = bad(http.StatusRequestHeaderFieldsTooLarge, "request header too large")

// maxHeaderFields bounds a request's header fields (Host included), as
// Envoy's (100) and Apache's (100) do: within MaxHeaderBytes, a header of
// tiny fields ("a:" lines) cost ~30 bytes of the reader's state for each
// 3 or 4 read, 100 MiB for a 1 MiB header. An Azure client sends a dozen.
const maxHeaderFields = 256

var errTooManyFields = bad(http.StatusRequestHeaderFieldsTooLarge, "too many header fields")

// readLine returns the next line without its CRLF (or LF), spending its
// length from *budget. The slice may point into the reader's buffer.
func (c *conn) readLine(budget *int, long *[]byte) ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		// Longer than the buffer (a long query): gather it.
		*long = append((*long)[:0], line...)
		for err == bufio.ErrBufferFull {
			if len(*long) > *budget {
				return nil, errTooLarge
			}
			line, err = c.br.ReadSlice('\n')
			*long = append(*long, line...)
		}
		line = *long
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	*budget -= len(line)
	if *budget < 0 {
		return nil, errTooLarge
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readRequest reads a request's line and header fields and frames its
// body, the way net/http's Server does (its errors are *badRequest when
// the client is to be told).
func (c *conn) readRequest() (*http.Request, *body, error) {
	budget := c.s.maxHeaderBytes()
	var long []byte
	line, err := c.readLine(&budget, &long)
	if err != nil {
		return nil, nil, err
	}
	method, rest, ok1 := strings.Cut(string(line), " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return nil, nil, bad(http.StatusBadRequest, "malformed HTTP request "+strconv.Quote(string(line)))
	}
	if !httpguts.ValidHeaderFieldName(method) { // a token, as a field name is
		return nil, nil, bad(http.StatusBadRequest, "invalid method "+strconv.Quote(method))
	}
	var major, minor int
	switch proto {
	case "HTTP/1.1":
		major, minor = 1, 1
	case "HTTP/1.0":
		major, minor = 1, 0
	default:
		if len(proto) == len("HTTP/x.y") && strings.HasPrefix(proto, "HTTP/") && isDigit(proto[5]) && proto[6] == '.' && isDigit(proto[7]) {
			// A version net/http would parse (it serves 1.x for x > 1
			// too; ours only 1.0 and 1.1).
			return nil, nil, bad(http.StatusHTTPVersionNotSupported, "unsupported protocol version")
		}
		return nil, nil, bad(http.StatusBadRequest, "malformed HTTP version "+strconv.Quote(proto))
	}
	if target == "*" && method != http.MethodOptions || target == "" {
		return nil, nil, bad(http.StatusBadRequest, "malformed request target")
	}
	if method == http.MethodConnect && !strings.HasPrefix(target, "/") {
		// The authority form, which url.ParseRequestURI would read as a
		// scheme and an opaque part; nothing here is a proxy (net/http
		// parses it as a host and leaves it to the handler).
		return nil, nil, bad(http.StatusBadRequest, "CONNECT not supported")
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, nil, bad(http.StatusBadRequest, "malformed request target")
	}

	// The values are gathered in c.vals and become one string, and their
	// slices share one array: two allocations per request where a string
	// and a slice for each field were a quarter of a point read's in the
	// front-end (13 of 52). A value kept by the handler keeps the others'
	// bytes too (a few hundred).
	vals, fields := c.vals[:0], c.fields[:0]
	defer func() {
		// Kept for the next request unless a large header grew them.
		if cap(vals) <= maxKeptHeader {
			c.vals, c.fields = vals[:0], fields[:0]
		} else {
			c.vals, c.fields = nil, nil
		}
		clear(fields) // their keys
	}()
	for {
		line, err := c.readLine(&budget, &long)
		if err != nil {
			return nil, nil, err
		}
		if len(line) == 0 {
			break
		}
		if len(fields) == maxHeaderFields {
			return nil, nil, errTooManyFields
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, nil, bad(http.StatusBadRequest, "obsolete line folding in header")
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok || len(k) == 0 {
			return nil, nil, bad(http.StatusBadRequest, "malformed header line")
		}
		key, ok := canonicalKey(k)
		if !ok {
			return nil, nil, bad(http.StatusBadRequest, "invalid header name "+strconv.Quote(string(k)))
		}
		v = bytes.Trim(v, " \t")
		if !validFieldValue(v) {
			return nil, nil, bad(http.StatusBadRequest, "invalid header value for "+key)
		}
		fields = append(fields, field{key: key, start: len(vals), end: len(vals) + len(v)})
		vals = append(vals, v...)
	}
	all := string(vals)
	vs := make([]string, len(fields))
	// Sized for the fields read (Host's is deleted below, the framing ones
	// sometimes): eight or fewer make a map of one group, cheaper to
	// build than a table a fixed larger hint would ask for.
	h := make(http.Header, len(fields))
	for i, f := range fields {
		vs[i] = all[f.start:f.end]
		if prev, ok := h[f.key]; ok {
			h[f.key] = append(prev, vs[i]) // a copy: prev's capacity ends at its value
		} else {
			h[f.key] = vs[i : i+1 : i+1]
		}
	}

	r := &c.req
	*r = http.Request{
		Method: method, URL: u, RequestURI: target,
		Proto: proto, ProtoMajor: major, ProtoMinor: minor,
		Header: h, RemoteAddr: c.remoteAddr, TLS: c.tls,
	}
	// Host: exactly one in HTTP/1.1; an absolute target's own wins.
	hosts := h["Host"]
	if len(hosts) > 1 || major == 1 && minor == 1 && len(hosts) == 0 {
		return nil, nil, bad(http.StatusBadRequest, "missing or repeated Host header")
	}
	if len(hosts) == 1 {
		if !httpguts.ValidHostHeader(hosts[0]) {
			return nil, nil, bad(http.StatusBadRequest, "malformed Host header")
		}
		r.Host = hosts[0]
	}
	if u.Host != "" {
		r.Host = u.Host
	}
	delete(h, "Host")
	r.Close = wantsClose(h, minor)

	b, err := c.frame(r)
	if err != nil {
		return nil, nil, err
	}
	return r, b, nil
}

// maxKeptHeader bounds the header bytes a connection keeps its scratch
// for between requests: a rare large header's is left to the collector.
const maxKeptHeader = 16 << 10

// field is a header field being read: its canonical name and where its
// value lies in the request's values.
type field struct {
	key        string
	start, end int
}

// validFieldValue is httpguts.ValidHeaderFieldValue of a value still in
// the reader's buffer: no control bytes but tab.
func validFieldValue(v []byte) bool {
	for _, b := range v {
		if b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// frame sets r's body from its Content-Length or Transfer-Encoding.
func (c *conn) frame(r *http.Request) (*body, error) {
	h := r.Header
	b := &c.body
	*b = body{c: c}
	if te, ok := h["Transfer-Encoding"]; ok {
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return nil, bad(http.StatusNotImplemented, "unsupported transfer encoding")
		}
		if r.ProtoMinor == 0 {
			return nil, bad(http.StatusBadRequest, "chunked request in HTTP/1.0")
		}
		delete(h, "Transfer-Encoding")
		if _, both := h["Content-Length"]; both {
			// The chunks frame it (RFC 9112 6.3), and the connection
			// closes after the answer (6.1): a proxy in front that framed
			// it by its length would read the next request elsewhere.
			delete(h, "Content-Length")
			r.Close = true
		}
		r.TransferEncoding = []string{"chunked"}
		r.ContentLength = -1
		b.chunked = httputil.NewChunkedReader(c.br)
	} else if cl, ok := h["Content-Length"]; ok {
		for _, v := range cl[1:] {
			if v != cl[0] {
				return nil, bad(http.StatusBadRequest, "conflicting Content-Length headers")
			}
		}
		n, err := strconv.ParseUint(cl[0], 10, 63)
		if err != nil || cl[0][0] == '+' {
			return nil, bad(http.StatusBadRequest, "bad Content-Length "+strconv.Quote(cl[0]))
		}
		if len(cl) > 1 {
			h["Content-Length"] = cl[:1]
		}
		r.ContentLength = int64(n)
		b.remaining = int64(n)
	}
	if r.ContentLength == 0 {
		b.eof.Store(true)
		r.Body = http.NoBody
	} else {
		r.Body = b
	}
	if e, ok := h["Expect"]; ok {
		if len(e) != 1 || !strings.EqualFold(e[0], "100-continue") {
			return nil, bad(http.StatusExpectationFailed, "unsupported Expect")
		}
		b.wantContinue = r.ProtoMinor == 1 && r.ContentLength != 0
	}
	return b, nil
}

// wantsClose reports whether the client asks for the connection to close
// after this request (HTTP/1.0 keeps it only on request).
func wantsClose(h http.Header, minor int) bool {
	conn := h["Connection"]
	return httpguts.HeaderValuesContainsToken(conn, "close") || minor == 0 && !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
}

// body is a request body read from the connection.
type body struct {
	c            *conn
	remaining    int64     // Content-Length framing: bytes still to read
	chunked      io.Reader // chunked framing
	wantContinue bool      // "Expect: 100-continue" not answered yet
	eof          atomic.Bool
	closed       bool
	err          error
}

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.read(p)
}

func (b *body) read(p []byte) (int, error) {
	if b.eof.Load() {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.wantContinue {
		b.wantContinue = false
		b.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if err := b.c.bw.Flush(); err != nil {
			b.err = err
			return 0, err
		}
	}
	if b.chunked != nil {
		n, err := b.chunked.Read(p)
		if err == io.EOF {
			if err = b.c.skipTrailer(); err == nil {
				b.eof.Store(true)
				err = io.EOF
			}
		}
		if err != nil && err != io.EOF {
			b.err = err
		}
		return n, err
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.c.br.Read(p)
	b.remaining -= int64(n)
	if b.remaining == 0 {
		b.eof.Store(true)
		return n, nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

func (b *body) Close() error {
	b.closed = true
	return nil
}

// drain reads what the handler left of the body, up to maxDrainBytes,
// and reports whether the connection can serve another request.
func (b *body) drain() bool {
	if b.eof.Load() {
		return true
	}
	if b.wantContinue || b.err != nil {
		return false // the client may never send it, or framing is lost
	}
	if b.chunked == nil && b.remaining > maxDrainBytes {
		return false // more than is worth reading: answer now, then close
	}
	n, err := io.Copy(io.Discard, io.LimitReader(readerFunc(b.read), maxDrainBytes+1))
	return err == nil && n <= maxDrainBytes && b.eof.Load()
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

var errBadTrailer = errors.New("http1: malformed chunked trailer")

// skipTrailer reads the trailer fields after a chunked body's last chunk,
// up to the empty line. They are discarded, but checked as header fields
// are (as net/http does): a line that is not a field means the framing is
// not what the client meant.
func (c *conn) skipTrailer() error {
	budget := c.s.maxHeaderBytes()
	var long []byte
	for {
		line, err := c.readLine(&budget, &long)
		if err != nil {
			if errors.Is(err, errTooLarge) {
				return errors.New("http1: chunked trailer too large")
			}
			if err == io.EOF {
				// The body is cut short: not its end.
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(line) == 0 {
			return nil
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok || !httpguts.ValidHeaderFieldName(string(k)) || !httpguts.ValidHeaderFieldValue(string(v)) {
			return errBadTrailer
		}
	}
}

// commonKeys interns the header names clients send on every request, so
// that canonicalKey allocates none of them.
var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept", "Accept-Charset", "Accept-Encoding", "Authorization", "Connection",
		"Content-Length", "Content-Md5", "Content-Type", "Cookie", "Dataserviceversion", "Date", "Expect",
		"Host", "If-Match", "If-None-Match", "Maxdataserviceversion", "Origin", "Prefer", "Transfer-Encoding",
		"User-Agent", "X-Ms-Client-Request-Id", "X-Ms-Date", "X-Ms-Version", "X-Ms-Return-Client-Request-Id",
		"Access-Control-Request-Method", "Access-Control-Request-Headers", "Traceparent"} {
		m[k] = k
	}
	return m
}()

// canonicalKey is textproto.CanonicalMIMEHeaderKey of k, or false when k
// is not a valid field name (RFC 9110 token).
func canonicalKey(k []byte) (string, bool) {
	var buf [64]byte
	var s []byte
	if len(k) <= len(buf) {
		s = buf[:len(k)]
	} else {
		s = make([]byte, len(k))
	}
	upper := true
	for i, ch := range k {
		if !httpguts.IsTokenRune(rune(ch)) {
			return "", false
		}
		if upper && 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		} else if !upper && 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		s[i] = ch
		upper = ch == '-'
	}
	if v, ok := commonKeys[string(s)]; ok {
		return v, true
	}
	return string(s), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// Compile-time check that the canonical form matches textproto's for the
// interned names.
var _ = func() bool {
	for k := range commonKeys {
		if textproto.CanonicalMIMEHeaderKey(k) != k {
			panic("http1: " + k + " is not canonical")
		}
	}
	return true
}()
