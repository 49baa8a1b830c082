package grouptransport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/partitionserver/lease"
)

// serverConn is one connection another server dialed to this one.
type serverConn struct {
	t    *Transport
	conn net.Conn
	br   *bufio.Reader
	w    *writer
	peer string

	mu      sync.Mutex
	inboxes map[uint64]*inbox
	stop    chan struct{}
	once    sync.Once
}

// inbox keeps one group's requests on one connection in order; a goroutine
// runs only while it holds any, so a group that is slow to answer delays
// only its own requests. Heartbeats go through it too: answering them in
// the reading goroutine (as NetworkTransport does, one connection per
// group) let one group whose raft was installing a snapshot stall the
// heartbeats of every group on the lane.
type inbox struct {
	q       []frame
	running bool
}

func (sc *serverConn) shut(error) {
	sc.once.Do(func() {
		close(sc.stop)
		if sc.w != nil {
			sc.w.close()
		}
		sc.conn.Close()
	})
}

func (sc *serverConn) readLoop() {
	var hdr [frameHeader]byte
	for {
		f, err := readFrame(sc.br, &hdr)
		if err != nil {
			return
		}
		if f.kind&respFlag != 0 {
			return
		}
		sc.mu.Lock()
		ib := sc.inboxes[f.group]
		if ib == nil {
			ib = &inbox{}
			sc.inboxes[f.group] = ib
		}
		ib.q = append(ib.q, f)
		start := !ib.running
		ib.running = true
		sc.mu.Unlock()
		if start {
			// Tracked, so Close waits for requests being handled: a
			// heartbeat runs raft's handler in this goroutine, and one
			// still running when the server's log closes panics raft.
			sc.t.wg.Add(1)
			go func() {
				defer sc.t.wg.Done()
				sc.drain(f.group, ib)
			}()
		}
	}
}

func (sc *serverConn) drain(group uint64, ib *inbox) {
	for {
		sc.mu.Lock()
		if len(ib.q) == 0 {
			ib.running = false
			delete(sc.inboxes, group)
			sc.mu.Unlock()
			return
		}
		f := ib.q[0]
		ib.q[0] = frame{}
		ib.q = ib.q[1:]
		sc.mu.Unlock()
		if !sc.handle(f) {
			sc.shut(nil)
			return
		}
	}
}

// handle delivers one request to its group and queues the response; false
// means the connection is unusable.
func (sc *serverConn) handle(f frame) bool {
	if sc.t.cut() {
		// Frames read before the cut are not delivered either: one could
		// wake a quiet range while the server closes its members.
		return false
	}
	// A connection shut (isolation, Close) delivers nothing more, not
	// even what it had read and queued before.
	select {
	case <-sc.stop:
		return false
	default:
	}
	if !sc.t.faulted(sc.peer) {
		return true // dropped: the sender times out, as on a lossy network
	}
	switch f.kind {
	case kindConfirmQuiet:
		return sc.confirm(f)
	case kindInstallSnapshot:
		// A snapshot comes on a connection of its own with its data after
		// it (serveSnapshot). Here it has none: delivered, raft would
		// read it from a nil Reader and panic, taking every group of the
		// server down. Answered with an error (no legitimate sender does
		// this), the lane stays for the other groups.
		sc.t.logger.Warn("raft transport: snapshot request on a stream lane refused", "from", sc.peer, "group", f.group)
		return sc.respond(f, nil, errSnapshotOnStream)
	}
	msg, tok, err := decodeRequestToken(f.kind, f.payload)
	if errors.Is(err, errUnknownKind) {
		// A newer server's request: answered, so it can fall back, and
		// the connection (other groups' traffic) stays.
		return sc.respond(f, nil, errUnknownKind)
	}
	if err != nil {
		sc.t.logger.Warn("raft transport: bad request", "from", sc.peer, "err", err)
		return false
	}
	// A request that could elect another member is admitted against this
	// server's lease promises first, whether the group is open or not.
	if req, term, ok := leaseRequest(msg, tok); ok {
		pending, err := sc.t.leases.admit(f.group, req, term)
		if err != nil {
			if r := refusal(msg); r != nil {
				return sc.respond(f, r, nil)
			}
			return sc.respond(f, nil, err)
		}
		if pending {
			defer sc.t.leases.done(f.group)
		}
		if req.Kind == lease.TimeoutNow {
			// The candidate hands the token on in its votes.
			sc.t.leases.setToken(f.group, tok)
		}
	}
	recv := time.Now()
	resp, rerr, ok, byRaft := sc.deliver(f.group, msg, nil)
	if !ok {
		return true
	}
	if byRaft && rerr == nil {
		if g := sc.t.group(f.group); g != nil && sc.t.leases.promisedAnswer(f.group, msg, resp, recv, g.following) {
			return sc.respondPromised(f, resp, sc.t.leases.d)
		}
	}
	return sc.respond(f, resp, rerr)
}

// confirm answers a quiet read's question from the server's Confirmer. It
// never opens the group (unlike raft requests for a quiet group): a closed
// member's answer comes from its recorded mark.
func (sc *serverConn) confirm(f frame) bool {
	p, err := decodeConfirm(f.payload)
	if err != nil {
		sc.t.logger.Warn("raft transport: bad confirm request", "from", sc.peer, "err", err)
		return false
	}
	yes := false
	if c, ok := sc.t.dormant.(Confirmer); ok {
		yes = c.ConfirmQuiet(f.group, p)
	}
	return sc.respond(f, &confirmAnswer{yes: yes}, nil)
}

func (sc *serverConn) respond(f frame, resp any, rerr error) bool {
	b := getBuf()
	*b = endFrame(appendResponse(startFrame((*b)[:0], f.kind|respFlag, f.group, f.id), resp, rerr))
	return sc.w.send(b)
}

// respondPromised answers a successful resp with a promise of d:
// statusPromised, d in microseconds, then the message.
func (sc *serverConn) respondPromised(f frame, resp any, d time.Duration) bool {
	b := getBuf()
	e := enc(append(startFrame((*b)[:0], f.kind|respFlag, f.group, f.id), statusPromised)).u(uint64(d / time.Microsecond))
	out, err := encodeResponse(e, resp)
	if err != nil {
		putBuf(b)
		return sc.respond(f, nil, err)
	}
	*b = endFrame(out)
	return sc.w.send(b)
}

// deliver hands a request to its group and waits for raft's answer; ok is
// false when the connection or transport closed first. byRaft: the answer
// is raft's own (not the server's for a closed member, nor a gate's).
func (sc *serverConn) deliver(group uint64, msg any, reader io.Reader) (resp any, err error, ok, byRaft bool) {
	g := sc.t.group(group)
	if g == nil && sc.t.dormant != nil {
		if resp := sc.t.dormant.Answer(group, msg); resp != nil {
			return resp, nil, true, false
		}
		// The request waits (bounded) while its group opens, rather
		// than failing and being retried after raft's backoff.
		if sc.t.dormant.Wake(group) {
			g = sc.t.group(group)
		}
	}
	if g == nil {
		return nil, ErrUnknownGroup, true, false
	}
	return g.deliver(msg, reader, sc.stop)
}

// appendResponse appends a response payload: the status, then the message
// or the error text.
func appendResponse(b []byte, resp any, rerr error) []byte {
	switch {
	case errors.Is(rerr, ErrUnknownGroup):
		return append(b, statusUnknownGroup)
	case errors.Is(rerr, errUnknownKind):
		return append(b, statusUnsupported)
	case rerr != nil:
		return append(append(b, statusRaftError), rerr.Error()...)
	}
	out, err := encodeResponse(enc(append(b, statusOK)), resp)
	if err != nil {
		return append(append(b, statusRaftError), err.Error()...)
	}
	return out
}

// serveSnapshot handles a snapshot lane: one InstallSnapshot request with
// its data streamed after it, one response, then the connection closes.
func (sc *serverConn) serveSnapshot() {
	// Every read must make progress within the transport's timeout: a
	// sender that stalls (cut off without a reset, stopped) would
	// otherwise hold the group's raft in its snapshot install until TCP
	// keepalive gave up, minutes later. The sender bounds its whole
	// stream the same way (timeout per chunk).
	in := &progressReader{conn: sc.conn, r: sc.br, idle: sc.t.timeout}
	var hdr [frameHeader]byte
	f, err := readFrame(in, &hdr)
	if err != nil || f.kind != kindInstallSnapshot {
		return
	}
	msg, err := decodeRequest(f.kind, f.payload)
	if err != nil {
		return
	}
	req := msg.(*raft.InstallSnapshotRequest)
	if sc.t.cut() || !sc.t.faulted(sc.peer) {
		return
	}
	resp, rerr, ok, _ := sc.deliver(f.group, req, io.LimitReader(in, req.Size))
	if !ok {
		return
	}
	b := appendResponse(startFrame(nil, f.kind|respFlag, f.group, f.id), resp, rerr)
	_ = sc.conn.SetWriteDeadline(time.Now().Add(sc.t.timeout))
	if _, err := sc.conn.Write(endFrame(b)); err != nil {
		sc.t.logger.Debug("raft transport: snapshot response not sent", "to", sc.peer, "err", fmt.Sprint(err))
	}
}

// progressReader reads r, giving each read until idle to make progress
// (conn's read deadline, moved before every read).
type progressReader struct {
	conn interface{ SetReadDeadline(time.Time) error }
	r    io.Reader
	idle time.Duration
}

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.conn.SetReadDeadline(time.Now().Add(p.idle)); err != nil {
		return 0, err
	}
	return p.r.Read(b)
}
