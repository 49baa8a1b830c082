package grouptransport

import (
	"bufio"
	"net"
	"sync"
	"time"
)

// writer owns the write side of one connection. The sender that finds it
// idle becomes the writer: it writes its own frame and every frame other
// senders queue meanwhile, then flushes once. So an uncontended message
// costs no goroutine hand-off, and under load many groups' messages share
// one flush and syscall.
type writer struct {
	conn    net.Conn
	timeout time.Duration
	onErr   func(error)
	bw      *bufio.Writer

	mu      sync.Mutex
	queue   []*[]byte
	spare   []*[]byte
	writing bool
	closed  bool
}

const writeBufferSize = 64 << 10

func newWriter(conn net.Conn, timeout time.Duration, onErr func(error)) *writer {
	return &writer{conn: conn, timeout: timeout, onErr: onErr, bw: bufio.NewWriterSize(conn, writeBufferSize)}
}

// send writes (or queues, while another sender writes) a frame; it reports
// false, recycling the buffer, when the connection is closed. A write
// error closes the connection through onErr.
func (w *writer) send(b *[]byte) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		putBuf(b)
		return false
	}
	w.queue = append(w.queue, b)
	if w.writing {
		w.mu.Unlock()
		return true
	}
	w.writing = true
	for {
		batch := w.queue
		w.queue, w.spare = w.spare[:0], nil
		w.mu.Unlock()
		err := w.write(batch)
		w.mu.Lock()
		w.spare = batch[:0]
		if err != nil {
			w.closed = true
			w.dropLocked()
			w.writing = false
			w.mu.Unlock()
			w.onErr(err)
			return true
		}
		if len(w.queue) == 0 || w.closed {
			w.writing = false
			if w.closed {
				w.dropLocked()
			}
			w.mu.Unlock()
			return true
		}
	}
}

func (w *writer) write(batch []*[]byte) error {
	if w.timeout > 0 {
		_ = w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
	}
	var err error
	for i, b := range batch {
		if err == nil {
			_, err = w.bw.Write(*b)
		}
		putBuf(b)
		batch[i] = nil
	}
	if err == nil {
		err = w.bw.Flush()
	}
	return err
}

// close refuses further frames; queued ones are dropped. The owner closes
// the connection, which ends a write in progress.
func (w *writer) close() {
	w.mu.Lock()
	w.closed = true
	if !w.writing {
		w.dropLocked()
	}
	w.mu.Unlock()
}

func (w *writer) dropLocked() {
	for i, b := range w.queue {
		putBuf(b)
		w.queue[i] = nil
	}
	w.queue = w.queue[:0]
}
