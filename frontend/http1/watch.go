package http1

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// watchAfter is how long a request runs before its connection is watched
// for the client going away (which cancels the request's context). net/http
// watches every request from its start, at the price of a read, a goroutine
// and a deadline per request; the handlers here answer most requests in a
// few milliseconds, and a client that leaves in between costs nothing worth
// that price (its answer is written to a closed connection).
const watchAfter = 200 * time.Millisecond

// aLongTimeAgo is a read deadline that makes a pending read return at once.
var aLongTimeAgo = time.Unix(1, 0)

// connReader is what a connection's bufio.Reader reads from. Between a
// slow request's body and its answer it may also read in the background,
// to learn that the client went away; a byte that read gets (a pipelined
// next request) is handed to the next Read.
type connReader struct {
	c    *conn
	mu   sync.Mutex
	cond *sync.Cond

	hasByte bool
	byteBuf [1]byte
	inRead  bool // a background read runs
	aborted bool // end stopped it
	err     error

	// The request being served: its context's cancel, its body, when it
	// started (zero between requests), and whether it is watched already.
	cancel  context.CancelFunc
	body    *body
	start   time.Time
	watched bool
}

func (cr *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	cr.mu.Lock()
	if cr.err != nil {
		err := cr.err
		cr.mu.Unlock()
		return 0, err
	}
	if cr.hasByte {
		p[0] = cr.byteBuf[0]
		cr.hasByte = false
		cr.mu.Unlock()
		return 1, nil
	}
	cr.mu.Unlock()
	return cr.c.rwc.Read(p)
}

// begin marks the start, at now, of a request's handler.
func (cr *connReader) begin(cancel context.CancelFunc, b *body, now time.Time) {
	cr.mu.Lock()
	cr.cancel, cr.body, cr.start, cr.watched = cancel, b, now, false
	cr.mu.Unlock()
}

// end marks the handler's return and stops a background read, keeping
// the byte it may have read.
func (cr *connReader) end() {
	cr.mu.Lock()
	cr.cancel, cr.body, cr.start = nil, nil, time.Time{}
	if !cr.inRead {
		cr.mu.Unlock()
		return
	}
	cr.aborted = true
	cr.c.rwc.SetReadDeadline(aLongTimeAgo)
	for cr.inRead {
		cr.cond.Wait()
	}
	cr.mu.Unlock()
	cr.c.rwc.SetReadDeadline(time.Time{})
}

// gone records that the client went away (a read or a write failed) and
// cancels the request being served.
func (cr *connReader) gone(err error) {
	cr.mu.Lock()
	if cr.err == nil {
		cr.err = err
	}
	if cr.cancel != nil {
		cr.cancel()
	}
	cr.mu.Unlock()
}

func (cr *connReader) broken() bool {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return cr.err != nil
}

// watchIfSlow starts a background read for a request that has run for
// watchAfter at now with its body read to the end (before that the
// handler may still read from the connection).
func (cr *connReader) watchIfSlow(now time.Time) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.start.IsZero() || cr.watched || cr.inRead || cr.hasByte || cr.err != nil ||
		now.Sub(cr.start) < watchAfter || (cr.body != nil && !cr.body.eof.Load()) {
		return
	}
	cr.watched, cr.inRead = true, true
	go cr.backgroundRead()
}

func (cr *connReader) backgroundRead() {
	n, err := cr.c.rwc.Read(cr.byteBuf[:])
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if n == 1 {
		cr.hasByte = true
	}
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		// EOF or a reset: the client is gone, nobody reads the answer
		// (a timeout is end's, or the request's deadline passed: the
		// client may still be there, and the watch ends). An EOF may be
		// a half-close after pipelined requests, though: as net/http,
		// the request is canceled but the connection serves on what it
		// has read, until its next read finds the end too.
		if cr.err == nil && err != io.EOF {
			cr.err = err
		}
		if cr.cancel != nil {
			cr.cancel()
		}
	}
	cr.inRead, cr.aborted = false, false
	cr.cond.Broadcast()
}

// startWatch starts the goroutine that watches slow requests, once.
func (s *Server) startWatch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watching {
		return
	}
	s.watching = true
	go s.watchLoop()
}

// watchLoop looks for slow requests every half watchAfter until the server
// is shut down and its last connection gone.
func (s *Server) watchLoop() {
	t := time.NewTicker(watchAfter / 2)
	defer t.Stop()
	var cs []*conn
	for now := range t.C {
		s.mu.Lock()
		// Done after Shutdown or Close, or once every Serve has returned
		// (an accept error) and the last connection ended.
		if (s.inShutdown.Load() || len(s.listeners) == 0) && len(s.conns) == 0 {
			s.watching = false
			s.mu.Unlock()
			return
		}
		cs = cs[:0]
		for c := range s.conns {
			cs = append(cs, c)
		}
		s.mu.Unlock()
		for _, c := range cs {
			c.cr.watchIfSlow(now)
		}
		clear(cs)
	}
}
