package grouptransport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Errors of the transport.
var (
	ErrClosed        = errors.New("grouptransport: closed")
	ErrIsolated      = errors.New("grouptransport: isolated")
	ErrDropped       = errors.New("grouptransport: dropped by fault hook")
	ErrUnknownGroup  = errors.New("grouptransport: group not open on the receiving server")
	ErrGroupOpen     = errors.New("grouptransport: group already open")
	ErrTimeout       = errors.New("grouptransport: rpc timed out")
	ErrConnectFailed = errors.New("grouptransport: connect failed recently")
	// ErrUnsupported: the receiving server does not know the request's
	// kind (it runs an older version).
	ErrUnsupported = errors.New("grouptransport: request kind not supported by the receiving server")
)

// DialFunc opens a connection to another server's transport listener. TLS
// (or any other wrapping) goes here.
type DialFunc func(ctx context.Context, address string) (net.Conn, error)

// Fault decides, before a request is sent to or delivered from peer (a Raft
// address), whether to drop it or how long to hold it. Chaos tests install
// one; it is consulted only when set.
type Fault interface {
	Outgoing(peer string) (delay time.Duration, drop bool)
}

// Config configures a Transport.
type Config struct {
	// Listener accepts the connections of other servers; the transport
	// owns it and closes it on Close.
	Listener net.Listener
	// Dial connects to other servers; nil dials plain TCP.
	Dial DialFunc
	// LocalAddr is the address other servers dial to reach this one (the
	// listener's when empty).
	LocalAddr string
	// Timeout bounds one RPC, a connection attempt and each write (10 s
	// when zero). A snapshot gets this per 256 KiB.
	Timeout time.Duration
	Logger  *slog.Logger
	// Dormant answers requests for groups not open here; nil answers them
	// all with ErrUnknownGroup.
	Dormant Dormant
	// LeaseDuration is how long a follower's lease promise lasts (package
	// lease); 0 turns read leases off. It must be at most half of raft's
	// heartbeat timeout.
	LeaseDuration time.Duration
	// Started is when this server started (New's time when zero): no vote
	// is admitted for LeaseDuration after it.
	Started time.Time
}

// Dormant is the server's side of groups that are hosted but not open (a
// quiet range): a request for one is answered without opening it, or
// waits while it opens.
type Dormant interface {
	// Answer returns the response to msg for group, or nil when the group
	// must be opened to answer (or is not hosted here).
	Answer(group uint64, msg any) any
	// Wake opens group and reports whether it is open now; it returns
	// within a bounded time.
	Wake(group uint64) bool
}

// Confirmer is the optional part of a Dormant that answers quiet-read
// confirmations (ConfirmQuiet); without it every confirmation is a no.
type Confirmer interface {
	// ConfirmQuiet reports whether this server's member of group is, right
	// now, at position p. It must not open the group, and must return
	// quickly (the asking read waits for it).
	ConfirmQuiet(group uint64, p QuietPosition) bool
}

// Transport is a server's Raft transport, shared by all its groups.
type Transport struct {
	ln        net.Listener
	dial      DialFunc
	localAddr string
	timeout   time.Duration
	logger    *slog.Logger
	fault     atomic.Pointer[faultBox]
	dormant   Dormant
	leases    *leases

	mu       sync.RWMutex
	groups   map[uint64]*Group
	peers    map[string]*peer
	conns    map[shutter]struct{}
	isolated bool
	closed   bool
	cutFlag  atomic.Bool // isolated || closed, read per request frame

	closing chan struct{}
	wg      sync.WaitGroup
}

type faultBox struct{ f Fault }

// shutter is an open connection the transport closes on Close or isolation.
type shutter interface{ shut(error) }

// dialRetryAfter is how long a failed connection attempt to a peer's lane is
// remembered: raft retries heartbeats every few milliseconds to a dead
// server, and each should not cost a dial.
const dialRetryAfter = 50 * time.Millisecond

// New starts serving cfg.Listener.
func New(cfg Config) *Transport {
	t := &Transport{
		ln: cfg.Listener, dial: cfg.Dial, localAddr: cfg.LocalAddr, timeout: cfg.Timeout, logger: cfg.Logger, dormant: cfg.Dormant,
		groups: map[uint64]*Group{}, peers: map[string]*peer{}, conns: map[shutter]struct{}{},
		closing: make(chan struct{}),
		leases:  newLeases(cfg.LeaseDuration, cfg.Started),
	}
	if t.timeout <= 0 {
		t.timeout = 10 * time.Second
	}
	if t.logger == nil {
		t.logger = slog.New(slog.DiscardHandler)
	}
	if t.localAddr == "" {
		t.localAddr = cfg.Listener.Addr().String()
	}
	if t.dial == nil {
		d := &net.Dialer{}
		t.dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	t.wg.Add(1)
	go t.acceptLoop()
	return t
}

// Addr is the listener's address.
func (t *Transport) Addr() net.Addr { return t.ln.Addr() }

// SetFault installs (or, with nil, removes) the fault hook.
func (t *Transport) SetFault(f Fault) {
	if f == nil {
		t.fault.Store(nil)
		return
	}
	t.fault.Store(&faultBox{f})
}

// faulted applies the fault hook to one request; it reports false to drop.
func (t *Transport) faulted(peer string) bool {
	fb := t.fault.Load()
	if fb == nil {
		return true
	}
	delay, drop := fb.f.Outgoing(peer)
	if drop {
		return false
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-t.closing:
		}
	}
	return true
}

// cut reports whether the transport is isolated or closed.
func (t *Transport) cut() bool { return t.cutFlag.Load() }

// SetIsolated cuts (true) or restores (false) all traffic of this server,
// closing its connections, as a network partition would.
func (t *Transport) SetIsolated(v bool) {
	t.mu.Lock()
	t.isolated = v
	t.cutFlag.Store(v || t.closed)
	var open []shutter
	if v {
		for c := range t.conns {
			open = append(open, c)
		}
	}
	t.mu.Unlock()
	for _, c := range open {
		c.shut(ErrIsolated)
	}
}

// Conns is the number of open connections this server dialed and accepted.
func (t *Transport) Conns() (dialed, accepted int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for c := range t.conns {
		switch c.(type) {
		case *clientConn:
			dialed++
		default:
			accepted++
		}
	}
	return dialed, accepted
}

// track registers an open connection; it refuses when closed or isolated.
func (t *Transport) track(c shutter) error { return t.admit(c, false) }

// trackWorker is track for a connection whose reader goroutine the
// caller starts: the goroutine is counted in t.wg under the same lock that
// admits the connection, so a Close either refuses it or waits for it
// (an Add after Close's Wait began is a WaitGroup misuse).
func (t *Transport) trackWorker(c shutter) error { return t.admit(c, true) }

func (t *Transport) admit(c shutter, worker bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if t.isolated {
		return ErrIsolated
	}
	t.conns[c] = struct{}{}
	if worker {
		t.wg.Add(1)
	}
	return nil
}

func (t *Transport) untrack(c shutter) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

// Close stops the listener and closes every connection; groups still open
// get ErrClosed from then on.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.cutFlag.Store(true)
	close(t.closing)
	var open []shutter
	for c := range t.conns {
		open = append(open, c)
	}
	t.mu.Unlock()
	err := t.ln.Close()
	for _, c := range open {
		c.shut(ErrClosed)
	}
	t.wg.Wait()
	return err
}

// Group opens the raft.Transport view of one range group. addrs resolves
// server ids to addresses (as NetworkTransport's ServerAddressProvider);
// nil uses the addresses raft passes.
func (t *Transport) Group(id uint64, addrs raft.ServerAddressProvider) (*Group, error) {
	return t.GroupWithGate(id, addrs, nil)
}

// GroupWithGate is Group with gate (Group.SetGate) installed before the
// group is registered: no request reaches the group ungated.
func (t *Transport) GroupWithGate(id uint64, addrs raft.ServerAddressProvider, gate func(msg any) (resp any, err error)) (*Group, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if _, ok := t.groups[id]; ok {
		return nil, fmt.Errorf("%w: %d", ErrGroupOpen, id)
	}
	g := &Group{t: t, id: id, addrs: addrs, consumeCh: make(chan raft.RPC), shutdown: make(chan struct{})}
	g.SetGate(gate)
	t.groups[id] = g
	t.leases.revive(id)
	return g, nil
}

// ForgetGroup drops what the transport keeps of group id beyond its open
// Group (its lease state): call it when the range is removed from this
// server for good, its raft state dropped, not when its member merely
// closes (a quiet range keeps its promises). What a running promise still
// needs is kept until the promise has run out (leases.forget).
//
// It forgets nothing, and reports false, while a member of the group is
// open here: that member's Voter guards its appends against its votes
// (lease.Voter.Idle), and dropped once idle it would lose the highest vote
// admitted, which keeps the member from promising, on an append raft
// answered before that vote, a leader of an older term. Keeping the
// state is the safe side (it costs memory only), so the caller may ignore
// the answer; a member open at its range's removal is a caller's race,
// logged at debug. Checked under t.mu, which GroupWithGate holds to
// open and revive a group: a member opened after the check finds the
// group gone and revives it.
func (t *Transport) ForgetGroup(id uint64) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if _, open := t.groups[id]; open {
		t.logger.Debug("raft transport: lease state of an open group kept", "group", id)
		return false
	}
	t.leases.forget(id, t.leases.now())
	return true
}

func (t *Transport) group(id uint64) *Group {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.groups[id]
}

func (t *Transport) removeGroup(g *Group) {
	t.mu.Lock()
	if t.groups[g.id] == g {
		delete(t.groups, g.id)
	}
	t.mu.Unlock()
}

// peer holds the long-lived lanes to one remote server.
type peer struct {
	addr    string
	lanes   [numLanes]laneSlot
	confirm laneSlot
}

func (p *peer) slot(lane byte) *laneSlot {
	if lane == laneConfirm {
		return &p.confirm
	}
	return &p.lanes[lane]
}

type laneSlot struct {
	mu       sync.Mutex
	cc       *clientConn
	failedAt time.Time
	err      error
	// dialing is the dial in progress (nil: none). It runs in a goroutine
	// of its own, without mu held and bounded by the transport's timeout
	// alone: a caller with a deadline of its own (a quiet read's
	// confirmation) gives up waiting for it when its context ends, while
	// the dial goes on and opens the lane for the next caller (cut with
	// that caller, a dial to a peer slower than a quiet read's deadline
	// never opened the lane, and every quiet read dialled again).
	dialing *dial
}

// dial is one dial of a lane; err is set before done is closed.
type dial struct {
	done chan struct{}
	err  error
}

// heardSince reports whether addr answered a request on a raft lane after
// since (a failed snapshot waits for that, see downPeerWait).
func (t *Transport) heardSince(addr string, since time.Time) bool {
	t.mu.RLock()
	p := t.peers[addr]
	t.mu.RUnlock()
	if p == nil {
		return false
	}
	for i := range p.lanes {
		s := &p.lanes[i]
		s.mu.Lock()
		cc := s.cc
		s.mu.Unlock()
		if cc != nil && cc.heard.Load() > since.UnixNano() {
			return true
		}
	}
	return false
}

// conn returns the open connection of a lane to addr, dialing if needed.
func (t *Transport) conn(addr string, lane byte) (*clientConn, error) {
	return t.connCtx(context.Background(), addr, lane)
}

// connCtx is conn for a caller that waits at most until ctx ends, for a
// dial in progress or its own (which the transport's timeout bounds too).
func (t *Transport) connCtx(ctx context.Context, addr string, lane byte) (*clientConn, error) {
	t.mu.RLock()
	p := t.peers[addr]
	closed, isolated := t.closed, t.isolated
	t.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if isolated {
		return nil, ErrIsolated
	}
	if p == nil {
		t.mu.Lock()
		if p = t.peers[addr]; p == nil {
			p = &peer{addr: addr}
			t.peers[addr] = p
		}
		t.mu.Unlock()
	}
	s := p.slot(lane)
	s.mu.Lock()
	for {
		if s.cc != nil && !s.cc.broken() {
			cc := s.cc
			s.mu.Unlock()
			return cc, nil
		}
		if !s.failedAt.IsZero() && time.Since(s.failedAt) < dialRetryAfter {
			err := s.err
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: %s: %w", ErrConnectFailed, addr, err)
		}
		if s.dialing == nil {
			s.dialing = &dial{done: make(chan struct{})}
			go t.dialSlot(s, s.dialing, addr, lane)
		}
		d := s.dialing
		s.mu.Unlock()
		select {
		case <-d.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s: waiting for a connection: %w", ErrConnectFailed, addr, ctx.Err())
		}
		if d.err != nil {
			return nil, d.err
		}
		s.mu.Lock()
	}
}

// dialSlot runs dial d of slot s (connCtx) to its end, bounded by the
// transport's timeout and its Close, and records the outcome.
func (t *Transport) dialSlot(s *laneSlot, d *dial, addr string, lane byte) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	cc, err := t.dialLane(ctx, addr, lane)
	s.mu.Lock()
	s.dialing = nil
	switch {
	case err == nil:
		s.failedAt, s.err = time.Time{}, nil
		s.cc = cc
	case errors.Is(err, ErrClosed), errors.Is(err, ErrIsolated), ctx.Err() != nil:
		// A close or isolation that raced the dial says nothing about
		// the peer.
	default:
		s.failedAt, s.err = time.Now(), err
	}
	d.err = err
	s.mu.Unlock()
	close(d.done)
}

// dialLane connects a lane to addr and starts its reader.
func (t *Transport) dialLane(ctx context.Context, addr string, lane byte) (*clientConn, error) {
	conn, err := t.connect(ctx, addr, lane)
	if err != nil {
		return nil, err
	}
	cc := &clientConn{t: t, addr: addr, conn: conn, pending: map[uint64]*call{}}
	cc.w = newWriter(conn, t.timeout, cc.shut)
	if err := t.trackWorker(cc); err != nil {
		cc.w.close()
		conn.Close()
		return nil, err
	}
	go cc.readLoop()
	return cc, nil
}

// connect dials addr and sends the hello naming the lane and this server.
func (t *Transport) connect(ctx context.Context, addr string, lane byte) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	conn, err := t.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	hello := append(helloMagic[:], helloVersion, lane)
	hello = binary.AppendUvarint(hello, uint64(len(t.localAddr)))
	hello = append(hello, t.localAddr...)
	_ = conn.SetWriteDeadline(time.Now().Add(t.timeout))
	if _, err := conn.Write(hello); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			select {
			case <-t.closing:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t.logger.Warn("raft transport accept failed", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.serve(conn)
		}()
	}
}

const helloTimeout = 5 * time.Second

// serve reads a connection's hello and runs its lane.
func (t *Transport) serve(conn net.Conn) {
	br := bufio.NewReaderSize(conn, 64<<10)
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	var h [6]byte
	if _, err := io.ReadFull(br, h[:]); err != nil || [4]byte(h[:4]) != helloMagic || h[4] != helloVersion {
		conn.Close()
		return
	}
	n, err := binary.ReadUvarint(br)
	if err != nil || n > 1024 {
		conn.Close()
		return
	}
	from := make([]byte, n)
	if _, err := io.ReadFull(br, from); err != nil {
		conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	sc := &serverConn{t: t, conn: conn, br: br, peer: string(from), inboxes: map[uint64]*inbox{}, stop: make(chan struct{})}
	lane := h[5]
	if lane == laneControl || lane == laneAppend || lane == laneConfirm {
		// Before track: a Close or an isolation shuts every tracked
		// connection, and shut reads w (a data race, and a writer left
		// on a closed connection, when it was set after).
		sc.w = newWriter(conn, t.timeout, sc.shut)
	}
	if err := t.track(sc); err != nil {
		conn.Close()
		return
	}
	defer t.untrack(sc)
	switch lane {
	case laneControl, laneAppend, laneConfirm:
		sc.readLoop()
	case laneSnapshot:
		sc.serveSnapshot()
	}
	sc.shut(io.EOF)
}

// ConfirmQuiet asks the server at addr whether its member of group is, right
// now, at position p (Confirmer). It returns false with an error when there
// is no answer before ctx ends, the request was dropped, or the server does
// not support the question (ErrUnsupported, or a connection it closed): the
// caller treats all of those as a no. The question goes on its own lane,
// so it never waits behind raft traffic, and it is subject to the fault
// hook and isolation like raft's requests.
func (t *Transport) ConfirmQuiet(ctx context.Context, addr string, group uint64, p QuietPosition) (bool, error) {
	if !t.faulted(addr) {
		return false, fmt.Errorf("%w: to %s", ErrDropped, addr)
	}
	cc, err := t.connCtx(ctx, addr, laneConfirm)
	if err != nil {
		return false, err
	}
	b := getBuf()
	*b = endFrame(encodeConfirm(enc(startFrame((*b)[:0], kindConfirmQuiet, group, 0)), p))
	rid, c, err := cc.sendFrame(b)
	if err != nil {
		return false, err
	}
	timeout := t.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	payload, err := cc.wait(rid, c, timeout, ctx.Done())
	if err != nil {
		return false, err
	}
	var a confirmAnswer
	if err := result(payload, &a); err != nil {
		return false, err
	}
	return a.yes, nil
}
