package http1

import (
	"bufio"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// response is the http.ResponseWriter of one request. An answer is held
// back until it outgrows bufSize, so that most go out with a
// Content-Length in one write; longer ones, or a Flush, are sent chunked
// (close-delimited to an HTTP/1.0 client).
type response struct {
	c      *conn
	req    *http.Request
	body   *body
	header http.Header

	status        int
	wroteHeader   bool  // the status is fixed
	committed     bool  // the status line and header fields are in c.bw
	contentLength int64 // the handler's Content-Length, -1 for none
	written       int64
	chunked       bool
	closeAfter    bool
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.wroteHeader {
		w.c.s.logger().Warn("http: superfluous WriteHeader call", "path", w.req.URL.Path, "code", code)
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		// An informational answer goes out at once; the final one follows.
		// None to an HTTP/1.0 client (RFC 9110 15.2), and no framing
		// fields on it, whatever the handler set for the final one.
		if w.req.ProtoMinor == 0 {
			return
		}
		h := w.header.Clone()
		delete(h, "Content-Length")
		delete(h, "Transfer-Encoding")
		w.writeStatus(code)
		w.writeFields(h, nil)
		w.c.bw.WriteString("\r\n")
		w.c.bw.Flush()
		return
	}
	w.status, w.wroteHeader = code, true
	if v := w.header.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			w.contentLength = n
		} else {
			w.c.s.logger().Warn("http: invalid Content-Length from handler", "value", v)
			w.header.Del("Content-Length")
		}
	}
}

// bodyAllowed: RFC 9110 forbids a body on 1xx, 204 and 304 answers.
func (w *response) bodyAllowed() bool {
	return w.status >= 200 && w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.req.Method == http.MethodHead {
		// Nothing is sent, but the first bytes are kept to sniff the
		// Content-Type from, as net/http does for HEAD.
		if !w.committed && len(w.c.pending) < sniffLen {
			w.c.pending = append(w.c.pending, p[:min(len(p), sniffLen-len(w.c.pending))]...)
		}
		return len(p), nil
	}
	if !w.committed {
		if len(w.c.pending)+len(p) <= bufSize {
			w.c.pending = append(w.c.pending, p...)
			return len(p), nil
		}
		w.commit(false, p)
	}
	return w.writeBody(p)
}

func (w *response) writeBody(p []byte) (int, error) {
	bw := w.c.bw
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	n, err := bw.Write(p)
	if w.chunked {
		bw.WriteString("\r\n")
	}
	return n, err
}

// Flush sends what the answer holds so far (http.Flusher).
func (w *response) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false, nil)
	}
	w.c.bw.Flush()
}

// finish completes the answer after the handler returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true, nil)
	}
	if w.chunked {
		w.c.bw.WriteString("0\r\n\r\n")
	}
	if w.contentLength >= 0 && w.written < w.contentLength && w.req.Method != http.MethodHead && w.bodyAllowed() {
		w.closeAfter = true // the client waits for bytes that will not come
	}
	w.c.bw.Flush()
}

// sniffLen is how much of an answer http.DetectContentType looks at.
const sniffLen = 512

// commit writes the status line and the header fields, then what was held
// back; final when the handler has returned, so the length is known. next
// is the write that outgrew the buffer, if any (not written here).
func (w *response) commit(final bool, next []byte) {
	w.committed = true
	h := w.header
	var extra [4]string // name, value pairs not in h
	ex := extra[:0]
	if _, ok := h["Date"]; !ok {
		h["Date"] = w.c.s.DateHeader()
	}
	pending := w.c.pending
	if _, ok := h["Content-Type"]; !ok && w.bodyAllowed() && h.Get("Content-Encoding") == "" {
		// Sniffed from the answer's first bytes, as net/http does, even
		// when the first write alone outgrew the buffer.
		sniff := pending
		if len(sniff) < sniffLen && len(next) > 0 {
			sniff = append(sniff, next[:min(len(next), sniffLen-len(sniff))]...)
		}
		if len(sniff) > 0 {
			h["Content-Type"] = []string{http.DetectContentType(sniff)}
		}
	}
	delete(h, "Transfer-Encoding") // framing is ours to choose
	if !w.bodyAllowed() {
		// RFC 9110 8.6, 15.4.5: no framing on answers without a body,
		// whatever the handler set; net/http's suppressedHeaders.
		delete(h, "Content-Length")
		if w.status == http.StatusNotModified {
			delete(h, "Content-Type")
		}
	}
	if w.contentLength < 0 {
		// A Content-Length set after WriteHeader is not the handler's
		// framing (net/http sends the header as it was then): ours wins,
		// and a second field with another value must not go out.
		delete(h, "Content-Length")
	}
	if w.contentLength < 0 && w.bodyAllowed() {
		switch {
		case final && (w.req.Method != http.MethodHead || w.written > 0):
			ex = append(ex, "Content-Length", strconv.FormatInt(w.written, 10))
		case final || w.req.Method == http.MethodHead:
			// No body follows: a HEAD answer flushed early has none to
			// frame, and a chunk terminator would be read as the next
			// answer.
		case w.req.ProtoMinor >= 1:
			w.chunked = true
			ex = append(ex, "Transfer-Encoding", "chunked")
		default:
			w.closeAfter = true // an HTTP/1.0 answer of unknown length ends with the connection
		}
	}
	// A body the handler left unread is read here, while the client may
	// still be sending it; one too long to skip closes the connection.
	if w.body != nil {
		if !w.body.drain() {
			w.closeAfter = true
		}
		// The final answer starts now: "100 Continue" can no longer be
		// sent (it would land inside this answer). A handler that reads
		// on gets what the client sends regardless, and the connection
		// closes after (drain failed).
		w.body.wantContinue = false
	}
	if w.req.Close || w.c.s.inShutdown.Load() || httpguts.HeaderValuesContainsToken(h["Connection"], "close") {
		w.closeAfter = true
	}
	delete(h, "Connection")
	if w.closeAfter {
		ex = append(ex, "Connection", "close")
	} else if w.req.ProtoMinor == 0 {
		ex = append(ex, "Connection", "keep-alive")
	}
	w.writeStatus(w.status)
	w.writeFields(h, ex)
	w.c.bw.WriteString("\r\n")
	if len(pending) > 0 && w.req.Method != http.MethodHead {
		w.writeBody(pending)
	}
	w.c.pending = pending[:0]
}

func (w *response) writeStatus(code int) {
	bw := w.c.bw
	if w.req.ProtoMinor == 0 {
		bw.WriteString("HTTP/1.0 ")
	} else {
		bw.WriteString("HTTP/1.1 ")
	}
	bw.WriteString(strconv.Itoa(code))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code " + strconv.Itoa(code))
	}
	bw.WriteString("\r\n")
}

// writeFields writes h's fields in key order, then extra's (name, value)
// pairs. Field names that are not tokens are dropped and line breaks in
// values become spaces, so a value cannot add a field of its own.
func (w *response) writeFields(h http.Header, extra []string) {
	var keysBuf [24]string
	keys := keysBuf[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	bw := w.c.bw
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range h[k] {
			writeField(bw, k, v)
		}
	}
	for i := 0; i+1 < len(extra); i += 2 {
		writeField(bw, extra[i], extra[i+1])
	}
}

// lineBreaks turns a value's line breaks into spaces.
var lineBreaks = strings.NewReplacer("\r", " ", "\n", " ")

func writeField(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	// Two byte scans: ContainsAny builds a set on every call, and this
	// runs for every field of every response.
	if strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\n') >= 0 {
		v = lineBreaks.Replace(v)
	}
	bw.WriteString(strings.TrimSpace(v))
	bw.WriteString("\r\n")
}
