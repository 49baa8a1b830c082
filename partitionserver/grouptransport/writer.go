package grouptransport

import (
	"bufio"
	"net"
	"sync"
	"time"
)

// writer owns the write side of one connection: senders queue encoded
// frames, one goroutine drains the queue and writes everything queued with
// one flush, so many groups' messages share a syscall.
type writer struct {
	conn    net.Conn
	timeout time.Duration
	onErr   func(error)

	mu     sync.Mutex
	queue  []*[]byte
	spare  []*[]byte
	closed bool
	wake   chan struct{}
	done   chan struct{}
}

const writeBufferSize = 64 << 10

func newWriter(conn net.Conn, timeout time.Duration, onErr func(error)) *writer {
	w := &writer{conn: conn, timeout: timeout, onErr: onErr, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop()
	return w
}

// send queues a frame; it reports false (and recycles the buffer) when the
// connection is closed.
func (w *writer) send(b *[]byte) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		putBuf(b)
		return false
	}
	w.queue = append(w.queue, b)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

// close stops the writer; queued frames are dropped.
func (w *writer) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.done)
	}
	w.mu.Unlock()
}

func (w *writer) loop() {
	bw := bufio.NewWriterSize(w.conn, writeBufferSize)
	for {
		select {
		case <-w.wake:
		case <-w.done:
			w.drop()
			return
		}
		w.mu.Lock()
		batch := w.queue
		if len(batch) == 0 {
			w.mu.Unlock()
			continue
		}
		w.queue, w.spare = w.spare[:0], nil
		w.mu.Unlock()
		if w.timeout > 0 {
			_ = w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
		}
		var err error
		for i, b := range batch {
			if err == nil {
				_, err = bw.Write(*b)
			}
			putBuf(b)
			batch[i] = nil
		}
		if err == nil {
			err = bw.Flush()
		}
		w.mu.Lock()
		w.spare = batch[:0]
		w.mu.Unlock()
		if err != nil {
			w.close()
			w.onErr(err)
			w.drop()
			return
		}
	}
}

func (w *writer) drop() {
	w.mu.Lock()
	q := w.queue
	w.queue = nil
	w.mu.Unlock()
	for _, b := range q {
		putBuf(b)
	}
}
