package raftmux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ErrClosed is returned by Accept on a closed layer or mux.
var ErrClosed = errors.New("raftmux: closed")

const headerTimeout = 5 * time.Second

// Mux demultiplexes one listener to per-range stream layers.
type Mux struct {
	ln     net.Listener
	logger *slog.Logger

	mu     sync.Mutex
	layers map[uint64]*Layer
	closed bool
	wg     sync.WaitGroup
	// dial is replaced by tests to cut a server off.
	dialer func(address string, timeout time.Duration) (net.Conn, error)
	// isolated drops every Raft connection in and out (fault injection).
	isolated bool
	// conns maps every open connection to the group it serves (0 until
	// an accepted one is routed), so a closed layer drops its own.
	conns map[net.Conn]uint64
	// resume is non-nil while the mux is paused (fault injection): every
	// connection stalls in both directions until it is closed, as the
	// connections of a stopped (SIGSTOP) process do.
	resume chan struct{}
}

// SetPaused stalls (true) or resumes (false) all Raft traffic of this
// server without closing anything: peers' connections stay open and time
// out, as with a stopped process.
func (m *Mux) SetPaused(v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case v && m.resume == nil:
		m.resume = make(chan struct{})
	case !v && m.resume != nil:
		close(m.resume)
		m.resume = nil
	}
}

func (m *Mux) waitResumed() {
	m.mu.Lock()
	ch := m.resume
	m.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// ErrIsolated is returned by Dial while the mux is isolated.
var ErrIsolated = errors.New("raftmux: isolated")

// SetIsolated cuts (true) or restores (false) all Raft traffic of this
// server, closing the connections it has, as a network partition would.
func (m *Mux) SetIsolated(v bool) {
	m.mu.Lock()
	m.isolated = v
	var open []net.Conn
	if v {
		for c := range m.conns {
			open = append(open, c)
		}
	}
	m.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

// track remembers a connection so isolation can close it.
func (m *Mux) track(c net.Conn) net.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.isolated {
		c.Close()
		return nil
	}
	m.conns[c] = 0
	return &trackedConn{Conn: c, m: m}
}

type trackedConn struct {
	net.Conn
	m    *Mux
	once sync.Once
}

// setGroup records the group a tracked connection serves; m.mu is held.
func (m *Mux) setGroup(c net.Conn, id uint64) {
	if t, ok := c.(*trackedConn); ok {
		if _, open := m.conns[t.Conn]; open {
			m.conns[t.Conn] = id
		}
	}
}

func (t *trackedConn) Read(b []byte) (int, error) {
	t.m.waitResumed()
	n, err := t.Conn.Read(b)
	t.m.waitResumed()
	return n, err
}

func (t *trackedConn) Write(b []byte) (int, error) {
	t.m.waitResumed()
	return t.Conn.Write(b)
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.m.mu.Lock()
		delete(t.m.conns, t.Conn)
		t.m.mu.Unlock()
	})
	return t.Conn.Close()
}

// New starts serving ln.
func New(ln net.Listener, logger *slog.Logger) *Mux {
	m := &Mux{ln: ln, logger: logger, layers: make(map[uint64]*Layer), conns: make(map[net.Conn]uint64)}
	m.dialer = func(address string, timeout time.Duration) (net.Conn, error) {
		return net.DialTimeout("tcp", address, timeout)
	}
	m.wg.Add(1)
	go m.acceptLoop()
	return m
}

// Addr is the listener's address.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			m.mu.Lock()
			closed := m.closed
			m.mu.Unlock()
			if closed {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.logger.Warn("raft mux accept failed", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		tc := m.track(conn)
		if tc == nil {
			continue
		}
		go m.route(tc)
	}
}

func (m *Mux) route(conn net.Conn) {
	var hdr [8]byte
	_ = conn.SetReadDeadline(time.Now().Add(headerTimeout))
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	id := binary.BigEndian.Uint64(hdr[:])
	m.mu.Lock()
	l := m.layers[id]
	m.setGroup(conn, id)
	m.mu.Unlock()
	if l == nil {
		// The group is not (yet) hosted here; the sender retries.
		conn.Close()
		return
	}
	select {
	case l.ch <- conn:
	case <-l.done:
		conn.Close()
	case <-time.After(headerTimeout):
		conn.Close()
	}
}

// Layer returns the stream layer of a range, registering it.
func (m *Mux) Layer(rangeID uint64) (*Layer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, ok := m.layers[rangeID]; ok {
		return nil, fmt.Errorf("raftmux: range %d already registered", rangeID)
	}
	l := &Layer{mux: m, id: rangeID, ch: make(chan net.Conn), done: make(chan struct{})}
	m.layers[rangeID] = l
	return l, nil
}

// SetDialer replaces the dial function (fault injection in tests).
func (m *Mux) SetDialer(d func(address string, timeout time.Duration) (net.Conn, error)) {
	m.mu.Lock()
	m.dialer = d
	m.mu.Unlock()
}

// Close stops the listener and every layer.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	layers := m.layers
	m.layers = map[uint64]*Layer{}
	m.mu.Unlock()
	for _, l := range layers {
		l.closeOnce.Do(func() { close(l.done) })
	}
	err := m.ln.Close()
	m.wg.Wait()
	return err
}

// Layer is one range group's raft.StreamLayer.
type Layer struct {
	mux       *Mux
	id        uint64
	ch        chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

var _ raft.StreamLayer = (*Layer)(nil)

// Accept waits for the next connection for this group.
func (l *Layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, ErrClosed
	}
}

// Close unregisters the layer.
func (l *Layer) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	l.mux.mu.Lock()
	if l.mux.layers[l.id] == l {
		delete(l.mux.layers, l.id)
	}
	// Its connections go too: an RPC stalled on a dead peer would
	// otherwise hold the group's shutdown for the transport's timeout.
	var open []net.Conn
	for c, id := range l.mux.conns {
		if id == l.id {
			open = append(open, c)
		}
	}
	l.mux.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
	return nil
}

// Addr is the shared listener's address.
func (l *Layer) Addr() net.Addr { return l.mux.ln.Addr() }

// Dial connects to another server's mux for this group.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-l.done:
		// A closed group's last RPCs (raft's best-effort replication at
		// shutdown) must not wait on a silent peer.
		return nil, ErrClosed
	default:
	}
	l.mux.mu.Lock()
	dial := l.mux.dialer
	l.mux.mu.Unlock()
	raw, err := dial(string(address), timeout)
	if err != nil {
		return nil, err
	}
	conn := l.mux.track(raw)
	if conn == nil {
		return nil, ErrIsolated
	}
	l.mux.mu.Lock()
	l.mux.setGroup(conn, l.id)
	l.mux.mu.Unlock()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], l.id)
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(hdr[:]); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, nil
}
