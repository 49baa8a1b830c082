package http1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxHeaderBytes bounds a request's line and header fields together,
// as net/http's http.DefaultMaxHeaderBytes does.
const DefaultMaxHeaderBytes = 1 << 20

// maxDrainBytes is how much of a request body the handler left unread is
// read and discarded to keep the connection; more, and it is closed
// (net/http's maxPostHandlerReadBytes).
const maxDrainBytes = 256 << 10

// writeSlack is how many times RequestTimeout from a request's header its
// answer's writes may take to finish.
const writeSlack = 2

// bufSize is the size of each connection's read and write buffers, and the
// most of an answer held back to send it with a Content-Length.
const bufSize = 4 << 10

// Server serves Handler over HTTP/1.1 connections. Set its fields before
// Serve; it must not be copied after.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's line and header fields,
	// from its first byte, and a TLS connection's handshake; 0: none (the
	// handshake then gets IdleTimeout).
	ReadHeaderTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection waits for its next
	// request; 0: ReadHeaderTimeout, and without both, forever.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and header fields; 0:
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// RequestTimeout is the deadline of each request's context, counted
	// from when its header has been read: at it the context ends with
	// context.DeadlineExceeded. 0: no deadline. It is here, not in the
	// handler, so that a request has one context: a handler's own
	// context.WithTimeout under the server's cancelable one costs a second
	// context, a map of children in the first and its registration there,
	// per request.
	//
	// It bounds the connection too, as net/http's ReadTimeout and
	// WriteTimeout would: the request's body is read by the same deadline
	// (a read after it fails with os.ErrDeadlineExceeded), and its answer
	// is written by writeSlack times RequestTimeout from the header (the
	// handler of a request that ran out its time still gets to answer).
	// Without it a client that sends its body slowly or never, or stops
	// reading its answer, holds its connection and handler until it
	// leaves.
	RequestTimeout time.Duration
	// Logger receives handler panics and accept errors; nil discards them.
	Logger *slog.Logger

	inShutdown atomic.Bool
	mu         sync.Mutex
	listeners  map[*net.Listener]struct{}
	conns      map[*conn]struct{}
	watching   bool // the watch goroutine runs (watch.go)
	date       atomic.Pointer[dateValue]
}

// Serve accepts connections on ln and serves each on its own goroutine
// until Shutdown or Close, when it returns http.ErrServerClosed; any other
// accept error ends it too and is returned. ln is closed on return.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(&ln, true) {
		ln.Close()
		return http.ErrServerClosed
	}
	defer s.track(&ln, false)
	s.startWatch()
	var backoff time.Duration
	for {
		rw, err := ln.Accept()
		if err != nil {
			if s.inShutdown.Load() {
				return http.ErrServerClosed
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				// Out of descriptors and the like: back off as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logger().Warn("http accept failed; retrying", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			ln.Close()
			return err
		}
		backoff = 0
		c := s.newConn(rw)
		if c == nil {
			rw.Close()
			continue
		}
		go c.serve()
	}
}

// track adds or removes a listener; false when adding during shutdown.
func (s *Server) track(ln *net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.inShutdown.Load() {
			return false
		}
		if s.listeners == nil {
			s.listeners = map[*net.Listener]struct{}{}
		}
		s.listeners[ln] = struct{}{}
	} else {
		delete(s.listeners, ln)
	}
	return true
}

// Shutdown stops accepting connections, closes idle ones, and waits for
// those serving a request to finish it (each then closes) or until ctx
// ends, which it returns.
func (s *Server) Shutdown(ctx context.Context) error {
	s.inShutdown.Store(true)
	s.closeListeners()
	wait := time.Millisecond
	for {
		if s.closeIdle() {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.inShutdown.Store(true)
	s.closeListeners()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.state.Store(stateClosed)
		c.rwc.Close()
	}
	return nil
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.listeners {
		(*ln).Close()
	}
}

// closeIdle closes the connections waiting for a request and reports
// whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.rwc.Close()
		}
	}
	return len(s.conns) == 0
}

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func (s *Server) maxHeaderBytes() int {
	if s.MaxHeaderBytes > 0 {
		return s.MaxHeaderBytes
	}
	return DefaultMaxHeaderBytes
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return s.ReadHeaderTimeout
}

// Connection states: a connection is idle while it waits for a request
// (Shutdown may close it then), active from a request's first byte to its
// answer, and closed once Shutdown or Close took it.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

// conn is one client connection, served by one goroutine.
type conn struct {
	s          *Server
	rwc        net.Conn
	cr         *connReader
	br         *bufio.Reader
	bw         *bufio.Writer
	remoteAddr string
	tls        *tls.ConnectionState
	state      atomic.Int32
	pending    []byte // an answer's body held back to learn its length

	// Scratch of readRequest, kept between requests: the request it
	// fills (serveOne hands the handler a copy with its context, which
	// has to be made anyway), and its header values and fields.
	req    http.Request
	vals   []byte
	fields []field

	// The request's body and the ResponseWriter with its header map, one
	// set per connection, reset for each request: a handler may use
	// neither the ResponseWriter nor the body after it returns (net/http's
	// http.Handler contract), and nothing here keeps them past that.
	// (r.Header is made per request: the contract does not forbid keeping
	// it.)
	body   body
	resp   response
	header http.Header
}

func (s *Server) newConn(rwc net.Conn) *conn {
	c := &conn{s: s, rwc: rwc, remoteAddr: rwc.RemoteAddr().String()}
	c.cr = &connReader{c: c}
	c.cr.cond = sync.NewCond(&c.cr.mu)
	c.br = bufio.NewReaderSize(c.cr, bufSize)
	c.bw = bufio.NewWriterSize(checkWriter{c}, bufSize)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inShutdown.Load() {
		return nil
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return c
}

// checkWriter writes to the connection; a failed write marks it broken so
// that the handler's context ends and no further request is read.
type checkWriter struct{ c *conn }

func (w checkWriter) Write(p []byte) (int, error) {
	n, err := w.c.rwc.Write(p)
	if err != nil {
		w.c.cr.gone(err)
	}
	return n, err
}

func (c *conn) serve() {
	defer func() {
		c.rwc.Close()
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	}()
	if tc, ok := c.rwc.(*tls.Conn); ok {
		// The handshake gets what a plain connection's first byte would
		// (net/http's none without ReadHeaderTimeout: a client that
		// connects and stays silent held its goroutine for ever).
		d := c.s.ReadHeaderTimeout
		if d == 0 {
			d = c.s.idleTimeout()
		}
		if d > 0 {
			tc.SetDeadline(time.Now().Add(d))
		}
		if err := tc.Handshake(); err != nil {
			var re tls.RecordHeaderError
			if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
				// Plain HTTP to the TLS port: say so, as net/http does,
				// rather than close without a word.
				io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
				lingerClose(re.Conn, re.Conn)
				err = errors.New("client sent an HTTP request to an HTTPS server")
			}
			c.s.logger().Debug("http TLS handshake failed", "remote", c.remoteAddr, "err", err)
			return
		}
		tc.SetDeadline(time.Time{})
		st := tc.ConnectionState()
		c.tls = &st
	}
	for first := true; ; first = false {
		// A new connection gets ReadHeaderTimeout for its first byte, as
		// net/http's: IdleTimeout is for keep-alive waits between requests.
		if d := c.s.idleTimeout(); first && c.s.ReadHeaderTimeout > 0 {
			c.rwc.SetReadDeadline(time.Now().Add(c.s.ReadHeaderTimeout))
		} else if d > 0 {
			c.rwc.SetReadDeadline(time.Now().Add(d))
		} else if !first && c.s.RequestTimeout > 0 {
			c.rwc.SetReadDeadline(time.Time{}) // the last request's
		}
		if !c.awaitRequest() {
			return
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return // Shutdown closed it
		}
		if d := c.s.ReadHeaderTimeout; d > 0 {
			c.rwc.SetReadDeadline(time.Now().Add(d))
		} else if c.s.idleTimeout() > 0 {
			c.rwc.SetReadDeadline(time.Time{})
		}
		req, b, err := c.readRequest()
		if err != nil {
			c.refuse(err)
			return
		}
		now := time.Now()
		if d := c.s.RequestTimeout; d > 0 {
			// The body is read by the request's deadline, the answer
			// written by writeSlack times it (see RequestTimeout).
			c.rwc.SetReadDeadline(now.Add(d))
			c.rwc.SetWriteDeadline(now.Add(writeSlack * d))
		} else if c.s.ReadHeaderTimeout > 0 {
			c.rwc.SetReadDeadline(time.Time{})
		}
		if !c.serveOne(req, b, now) {
			if !b.eof.Load() && b.err == nil && !c.cr.broken() {
				c.lingerClose() // the client may still be sending the body
			}
			return
		}
		if c.s.inShutdown.Load() {
			return
		}
		c.state.Store(stateIdle)
	}
}

// maxLeadingCRLF is how many CR or LF bytes before a request line are
// skipped: RFC 9112 2.2 asks a server to ignore at least one empty line
// there (old clients end a POST's body with a CRLF); net/http skips 4.
const maxLeadingCRLF = 4

// awaitRequest waits for a request's first byte, skipping up to
// maxLeadingCRLF CR or LF bytes before it, under the same deadline; false
// when the connection ended or failed.
func (c *conn) awaitRequest() bool {
	for skipped := 0; ; skipped++ {
		p, err := c.br.Peek(1)
		if err != nil {
			return false
		}
		if p[0] != '\r' && p[0] != '\n' || skipped == maxLeadingCRLF {
			return true // more is readRequest's to refuse
		}
		c.br.Discard(1)
	}
}

// refuse answers a request that could not be read, unless the connection
// simply ended, and the connection is then closed.
func (c *conn) refuse(err error) {
	var bad *badRequest
	if !errors.As(err, &bad) {
		return // the connection failed or timed out mid-request
	}
	body := bad.msg
	if d := c.s.RequestTimeout; d > 0 {
		// Not the last request's write deadline, which may have passed.
		c.rwc.SetWriteDeadline(time.Now().Add(d))
	}
	fmt.Fprintf(c.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		bad.status, http.StatusText(bad.status), len(body), body)
	if c.bw.Flush() == nil {
		c.lingerClose() // the rest of the request is unread
	}
}

// lingerTime bounds lingerClose (net/http's rstAvoidanceDelay).
const lingerTime = 500 * time.Millisecond

// lingerClose prepares to close a connection whose client may still be
// sending what the server will not read (a refused request, a body left
// unread): closing with unread data makes the kernel reset the
// connection, and the client's stack may then drop the answer it has not
// read yet. So the write side is shut first (a FIN after the answer), and
// what the client still sends is read and dropped until it closes too or
// lingerTime passes. net/http's closeWriteAndWait sleeps instead of
// reading, which a client that sends on still ends with a reset.
func (c *conn) lingerClose() { lingerClose(c.rwc, c.cr) }

// lingerClose is conn.lingerClose of nc, read through r.
func lingerClose(nc net.Conn, r io.Reader) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	nc.SetReadDeadline(time.Now().Add(lingerTime))
	var buf [4 << 10]byte
	for {
		if _, err := r.Read(buf[:]); err != nil {
			return
		}
	}
}

// looksLikeHTTP reports whether the first bytes a TLS connection got, not
// a TLS record header, are an HTTP request's (net/http's list, and the
// Table API's other methods).
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "MERGE", "PATCH":
		return true
	}
	return false
}

// serveOne runs the handler for req, whose header was read at now, and
// finishes its answer; false when the connection must close after it.
func (c *conn) serveOne(req *http.Request, b *body, now time.Time) (keep bool) {
	// The request's context ends when the client goes away (connReader
	// cancels it), when the handler returns, or at RequestTimeout.
	var ctx context.Context
	var cancel context.CancelFunc
	if d := c.s.RequestTimeout; d > 0 {
		ctx, cancel = context.WithDeadline(context.Background(), now.Add(d))
	} else {
		ctx, cancel = context.WithCancel(context.Background())
	}
	defer cancel()
	req = req.WithContext(ctx)
	c.req = http.Request{} // the handler's copy is the request now
	if c.header == nil {
		c.header = make(http.Header, 12)
	}
	w := &c.resp
	*w = response{c: c, req: req, body: b, header: c.header, contentLength: -1}
	defer func() {
		// Nothing of this request is kept while the connection waits.
		clear(c.header)
		c.resp = response{}
	}()
	c.cr.begin(cancel, b, now)
	handled := false
	func() {
		defer func() {
			if handled {
				return
			}
			v := recover()
			if v != nil && v != http.ErrAbortHandler {
				c.s.logger().Error("http handler panic", "remote", c.remoteAddr, "method", req.Method, "path", req.URL.Path,
					"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
		}()
		c.s.Handler.ServeHTTP(w, req)
		handled = true
	}()
	c.cr.end()
	// At the handler's return, as a context the handler derived and
	// canceled on its way out would be: what it started under the
	// context stops before the answer is flushed, not after.
	cancel()
	if !handled {
		return false // as net/http: a panicking handler's connection closes
	}
	w.finish()
	if c.cr.broken() {
		return false
	}
	return !w.closeAfter
}

// dateValue is the Date header of one second.
type dateValue struct {
	unix int64
	v    []string
}

// DateHeader is the Date header's value now, formatted once a second: an
// answer whose handler sets none gets it, and a handler may set it (the
// slice is shared; do not modify it).
func (s *Server) DateHeader() []string {
	now := time.Now()
	if d := s.date.Load(); d != nil && d.unix == now.Unix() {
		return d.v
	}
	d := &dateValue{unix: now.Unix(), v: []string{now.UTC().Format(http.TimeFormat)}}
	s.date.Store(d)
	return d.v
}
