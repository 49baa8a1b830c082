package grouptransport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/partitionserver/lease"
)

// Group is one range group's raft.Transport over the server's shared
// connections. Closing it stops deliveries to the group; the connections
// stay open for the other groups.
type Group struct {
	t           *Transport
	id          uint64
	addrs       raft.ServerAddressProvider
	consumeCh   chan raft.RPC
	heartbeatFn atomic.Pointer[func(raft.RPC)]
	gate        atomic.Pointer[func(any) (any, error)]
	stuckFn     atomic.Pointer[func(peer raft.ServerID, followerLast uint64)]
	// installedMu guards installed: the followers this member just
	// installed a snapshot on, with the term it was sent in, until their
	// next append's answer (see SetStuckFollower).
	installedMu sync.Mutex
	installed   map[raft.ServerID]uint64
	shutdown    chan struct{}
	once        sync.Once
	// fast is held (read) while a heartbeat runs in raft's handler, which
	// is called from the transport's goroutine, not raft's; Close takes it
	// (write), so none is running in raft once Close returns.
	fast       sync.RWMutex
	fastClosed bool
	// lease is this member's side of read leases as a leader (leases.go).
	lease groupLease
	// commits: what each follower acknowledged knowing committed
	// (CommitKnown).
	commits commitAcks
}

var (
	_ raft.Transport   = (*Group)(nil)
	_ raft.WithClose   = (*Group)(nil)
	_ raft.WithPreVote = (*Group)(nil)
)

// pipelineDepth is how many AppendEntries a leader may have in flight to
// one follower of one group.
const pipelineDepth = 32

// Consumer implements raft.Transport.
func (g *Group) Consumer() <-chan raft.RPC { return g.consumeCh }

// LocalAddr implements raft.Transport.
func (g *Group) LocalAddr() raft.ServerAddress { return raft.ServerAddress(g.t.localAddr) }

// EncodePeer implements raft.Transport.
func (g *Group) EncodePeer(id raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(g.resolve(id, addr))
}

// DecodePeer implements raft.Transport.
func (g *Group) DecodePeer(b []byte) raft.ServerAddress { return raft.ServerAddress(b) }

// SetHeartbeatHandler implements raft.Transport: heartbeats skip the
// consumer channel, so they never wait behind the group's disk writes.
func (g *Group) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		g.heartbeatFn.Store(nil)
		return
	}
	g.heartbeatFn.Store(&cb)
}

// Close implements raft.WithClose; it is idempotent. It returns once no
// heartbeat is running in raft's handler, and none starts after: raft
// closes its transport last when it shuts down, and the server closes the
// shared log after that. A heartbeat handler still running then (its
// goroutine descheduled on a loaded machine between raft's shutdown check
// and its write of a newer term) failed to save the term to the closed log,
// and raft panics on that (TestManualSplitMergeMove, at cluster Close).
func (g *Group) Close() error {
	g.once.Do(func() {
		g.fast.Lock()
		g.fastClosed = true
		g.fast.Unlock()
		close(g.shutdown)
		g.t.removeGroup(g)
	})
	return nil
}

func (g *Group) resolve(id raft.ServerID, target raft.ServerAddress) string {
	if g.addrs != nil {
		if a, err := g.addrs.ServerAddr(id); err == nil && a != "" {
			return string(a)
		}
	}
	return string(target)
}

// AppendEntries implements raft.Transport. Heartbeats use the control lane,
// entries the append lane.
func (g *Group) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	sent := time.Now()
	if isHeartbeat(args) {
		promised, err := g.rpcPromised(id, target, laneControl, 0, args, resp)
		g.acked(id, args, resp, promised, err, sent)
		return err
	}
	promised, err := g.rpcPromised(id, target, laneAppend, downPeerWait, args, resp)
	g.acked(id, args, resp, promised, err, sent)
	if err == nil {
		g.checkStuck(id, args, resp)
	}
	return err
}

// acked records a successful answer to an append sent at sent, and the
// promise it carries if any, before raft sees it.
func (g *Group) acked(id raft.ServerID, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, promised time.Duration, err error, sent time.Time) {
	if err == nil && resp.Success && resp.Term == args.Term {
		g.ack(id, args.Term, sent, promised)
		g.commits.note(id, args)
	}
}

// SetStuckFollower installs fn, called (on raft's replication goroutine;
// it must not block) with a follower and the last index it reports when
// it refuses an append this member cannot follow with an earlier one:
//
//   - the first append after it installed this member's snapshot;
//   - an append from the start of the log (no previous entry), the
//     follower's log holding entries but not the first.
//
// nil removes it.
//
// hashicorp/raft (v1.7.3) gets stuck there: a follower keeps the entries
// its log holds past an installed snapshot, whatever their term (it does
// not apply Raft's rule of discarding a log that does not hold the
// snapshot's last entry), and it checks an append's previous entry, and
// the entries it already holds, only against its log, never its snapshot.
// A follower whose log holds a stale tail (entries it took while leading a
// term that committed none of them) but not the entry at the leader's
// snapshot index then refuses every append after the install; the leader
// steps back below its own log and sends the same snapshot again, every
// few tens of milliseconds, until its next scheduled snapshot (chaos seeds
// 243 and 286: a member of a split-born range, cut off while it led, had
// dropped its whole log up to its own applied index, which was past the
// new leader's snapshot; the range then ran on two members of three, and
// took no writes when one of those stopped). A leader whose log still
// starts at 1 resends its first entries forever instead. A snapshot past
// the follower's last index, with the leader's log dropped up to it, ends
// both: the follower's last entry is then the snapshot's, the next append
// matches it, and the follower's log starts afresh after it.
func (g *Group) SetStuckFollower(fn func(peer raft.ServerID, followerLast uint64)) {
	if fn == nil {
		g.stuckFn.Store(nil)
		return
	}
	g.stuckFn.Store(&fn)
}

// noteInstalled records that follower id installed this member's
// snapshot, sent in term.
func (g *Group) noteInstalled(id raft.ServerID, term uint64) {
	if g.stuckFn.Load() == nil {
		return
	}
	g.installedMu.Lock()
	if g.installed == nil {
		g.installed = map[raft.ServerID]uint64{}
	}
	g.installed[id] = term
	g.installedMu.Unlock()
}

// checkStuck calls the stuck-follower function when id's answer to an
// append is one of SetStuckFollower's refusals in this member's term (a
// newer term only deposes it). An install counts only for an append of
// the term it was sent in: a member that stepped down right after it and
// leads again later starts its next-index at its own last entry, and the
// first append's refusal is then ordinary lag, not a stale tail.
func (g *Group) checkStuck(id raft.ServerID, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	fn := g.stuckFn.Load()
	if fn == nil {
		return
	}
	g.installedMu.Lock()
	installTerm, ok := g.installed[id]
	delete(g.installed, id)
	g.installedMu.Unlock()
	installed := ok && installTerm == args.Term
	fromStart := args.PrevLogEntry == 0 && len(args.Entries) > 0 && resp.LastLog > 0
	if !resp.Success && resp.Term <= args.Term && (installed || fromStart) {
		(*fn)(id, resp.LastLog)
	}
}

// downPeerWait bounds how long an append retries a peer it cannot reach,
// and how long a failed snapshot waits to be heard from again.
const downPeerWait = time.Second

// hashicorp/raft sleeps after every failed append or snapshot to a
// follower for a time that doubles with the failures in a row (10 ms,
// 20 ms, ..., 10 s), and nothing cuts the sleep short when the follower
// returns: a follower unreachable for 3 s failed about ten of them, each at
// once, and was caught up again only 1.3 - 2.6 s after it came back (chaos
// seed 6: a merge's freeze waited that long on a restarted server; seed 32:
// a follower cut off across a move kept its old configuration past the
// heal, refused the new voter's votes when the leader then stopped, and
// the range had no leader for 3.8 s). So a request that reached no raft on
// the peer is not failed at once:
//
//   - an append (idempotent) is retried until downPeerWait has passed: the
//     connection could not be made, broke before the answer (a peer cut
//     off by a proxy or firewall that accepts and resets), or the peer
//     does not host the group yet (a replica being created). A down
//     follower costs one failure per second, and an append in progress
//     when it returns goes through at once;
//   - a snapshot (its stream cannot be replayed) that failed returns its
//     error once the peer has answered anything since, or downPeerWait
//     after it began: raft retries it at once when the follower is back.
//
// Heartbeats and votes fail at once: they measure contact.

// unreached reports whether err, from a request on a connection, says the
// request reached no raft on the peer and is worth retrying: not a local
// shutdown or isolation, and not a timeout (the peer may hold it; the
// timeout already exceeds the wait).
func unreached(err error) bool {
	return err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrIsolated) && !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrDropped)
}

// pause sleeps d unless the group shuts down first.
func (g *Group) pause(d time.Duration) bool {
	select {
	case <-g.shutdown:
		return false
	case <-time.After(d):
		return true
	}
}

// RequestVote implements raft.Transport.
func (g *Group) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	out := voteOut{RequestVoteRequest: args}
	if args.LeadershipTransfer {
		out.token = g.t.leases.token(g.id)
	}
	return g.rpc(id, target, laneControl, 0, out, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (g *Group) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return g.rpc(id, target, laneControl, 0, args, resp)
}

// HeardFrom reports whether the server of Raft peer (id, target) answered
// a request of this server's on a raft lane, in any group, after since:
// evidence that requests to it get through now (a server may answer the
// master and still be out of this one's reach: a one-way cut).
func (g *Group) HeardFrom(id raft.ServerID, target raft.ServerAddress, since time.Time) bool {
	return g.t.heardSince(g.resolve(id, target), since)
}

// TimeoutNow implements raft.Transport.
func (g *Group) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return g.rpc(id, target, laneControl, 0, timeoutNowOut{TimeoutNowRequest: args, term: g.transferTerm()}, resp)
}

// rpc sends args on lane and waits for resp; with wait > 0 a request that
// reached no raft on the peer is retried until wait has passed (see
// downPeerWait).
func (g *Group) rpc(id raft.ServerID, target raft.ServerAddress, lane byte, wait time.Duration, args, resp any) error {
	_, err := g.rpcPromised(id, target, lane, wait, args, resp)
	return err
}

// rpcPromised is rpc, and the lease promise the answer carries (0: none).
func (g *Group) rpcPromised(id raft.ServerID, target raft.ServerAddress, lane byte, wait time.Duration, args, resp any) (time.Duration, error) {
	addr := g.resolve(id, target)
	deadline := time.Now().Add(wait)
	for {
		if !g.t.faulted(addr) {
			return 0, fmt.Errorf("%w: to %s", ErrDropped, addr)
		}
		payload, err := g.call(addr, lane, args)
		if err == nil {
			var promised time.Duration
			promised, err = promisedResult(payload, resp)
			if !errors.Is(err, ErrUnknownGroup) {
				return promised, err
			}
		}
		if wait <= 0 || !unreached(err) || !time.Now().Before(deadline) || !g.pause(dialRetryAfter) {
			return 0, err
		}
	}
}

// call sends args on lane and returns the answer's payload.
func (g *Group) call(addr string, lane byte, args any) ([]byte, error) {
	cc, err := g.t.conn(addr, lane)
	if err != nil {
		return nil, err
	}
	rid, c, err := cc.send(g.id, args)
	if err != nil {
		return nil, err
	}
	return cc.wait(rid, c, g.t.timeout, g.shutdown)
}

// SetGate installs a check run on every request to this group before raft
// sees it. A non-nil response is the answer (raft acts on it as on one of
// its own: a rejected AppendEntries makes the leader step back to an
// earlier index, or to a snapshot); a non-nil error is the answer too,
// which the sender's raft takes as a failed RPC (it backs off and retries
// the same request). nil removes the check.
func (g *Group) SetGate(fn func(msg any) (resp any, err error)) {
	if fn == nil {
		g.gate.Store(nil)
		return
	}
	g.gate.Store(&fn)
}

// deliver hands one request to raft and waits for its answer; byRaft is
// false when the gate answered instead.
func (g *Group) deliver(msg any, reader io.Reader, stop <-chan struct{}) (resp any, err error, ok, byRaft bool) {
	if fn := g.gate.Load(); fn != nil {
		if resp, err := (*fn)(msg); resp != nil || err != nil {
			if reader != nil {
				// A refused snapshot: its sender writes all the data
				// before it reads the answer, so the data is read and
				// dropped first. Answered unread, the sender's write
				// would fail, which raft takes as a failed RPC and
				// retries (with the whole snapshot) instead of acting on
				// the answer (a stale leader steps down on its term).
				if _, derr := io.Copy(io.Discard, reader); derr != nil {
					return nil, derr, true, false
				}
			}
			return resp, err, true, false
		}
	}
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: msg, Reader: reader, RespChan: respCh}
	fast := false
	if ae, ok := msg.(*raft.AppendEntriesRequest); ok && isHeartbeat(ae) {
		if fn := g.heartbeatFn.Load(); fn != nil {
			g.fast.RLock()
			if g.fastClosed {
				g.fast.RUnlock()
				return nil, ErrUnknownGroup, true, false
			}
			(*fn)(rpc)
			g.fast.RUnlock()
			fast = true
		}
	}
	if !fast {
		select {
		case g.consumeCh <- rpc:
		case <-g.shutdown:
			return nil, ErrUnknownGroup, true, false
		case <-stop:
			return nil, nil, false, false
		}
	}
	select {
	case r := <-respCh:
		return r.Response, r.Error, true, true
	case <-g.shutdown:
		return nil, ErrUnknownGroup, true, false
	case <-stop:
		return nil, nil, false, false
	}
}

// snapshotChunk is the size per which a snapshot's deadline grows by one
// Timeout, as NetworkTransport's TimeoutScale.
const snapshotChunk = 256 << 10

// InstallSnapshot implements raft.Transport over a connection of its own,
// so the stream never delays another group's traffic.
func (g *Group) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	start := time.Now()
	err := g.installSnapshot(id, target, args, resp, data)
	if err == nil && resp.Success {
		g.noteInstalled(id, args.Term)
	}
	if !unreached(err) {
		return err
	}
	// Wait for the peer to be heard from again (downPeerWait); a peer that
	// answers without hosting the group yet is only paced.
	failed, addr := time.Now(), g.resolve(id, target)
	heard := func() bool { return !errors.Is(err, ErrUnknownGroup) && g.t.heardSince(addr, failed) }
	for time.Since(start) < downPeerWait && !heard() && g.pause(dialRetryAfter) {
	}
	return err
}

func (g *Group) installSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	addr := g.resolve(id, target)
	if !g.t.faulted(addr) {
		return fmt.Errorf("%w: to %s", ErrDropped, addr)
	}
	conn, err := g.t.connect(context.Background(), addr, laneSnapshot)
	if err != nil {
		return err
	}
	sc := &snapshotConn{conn: conn}
	if err := g.t.track(sc); err != nil {
		conn.Close()
		return err
	}
	defer g.t.untrack(sc)
	defer conn.Close()
	timeout := g.t.timeout * time.Duration(max(1, args.Size/snapshotChunk))
	_ = conn.SetDeadline(time.Now().Add(timeout))
	e, kind, err := encodeRequest(enc(startFrame(nil, 0, g.id, 1)), args)
	if err != nil {
		return err
	}
	frameBytes := endFrame(e)
	frameBytes[4] = kind
	bw := bufio.NewWriterSize(conn, writeBufferSize)
	if _, err := bw.Write(frameBytes); err != nil {
		return err
	}
	if n, err := io.Copy(bw, data); err != nil {
		return err
	} else if n != args.Size {
		return fmt.Errorf("grouptransport: snapshot of %d bytes had %d", args.Size, n)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	var hdr [frameHeader]byte
	f, err := readFrame(bufio.NewReader(conn), &hdr)
	if err != nil {
		return err
	}
	if f.kind != kindInstallSnapshot|respFlag {
		return fmt.Errorf("%w: snapshot response kind %d", ErrFrame, f.kind)
	}
	return result(f.payload, resp)
}

// snapshotConn lets Close and isolation cut a snapshot stream.
type snapshotConn struct{ conn io.Closer }

func (s *snapshotConn) shut(error) { s.conn.Close() }

// AppendEntriesPipeline implements raft.Transport: appends of this group to
// one follower stream on the append lane without waiting for each other.
func (g *Group) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	addr := g.resolve(id, target)
	if !g.t.faulted(addr) {
		return nil, fmt.Errorf("%w: to %s", ErrDropped, addr)
	}
	cc, err := g.t.conn(addr, laneAppend)
	if err != nil {
		return nil, err
	}
	p := &pipeline{
		g: g, cc: cc, addr: addr, id: id,
		inflight: make(chan *appendFuture, pipelineDepth),
		doneCh:   make(chan raft.AppendFuture, pipelineDepth),
		stop:     make(chan struct{}),
	}
	go p.collect()
	// raft shuts a member down without closing its pipelines first: its
	// send loop can sit in AppendEntries on a full pipeline to a silent
	// follower. Closing the group closes the pipeline, so neither that
	// send nor collect's wait outlives the group (a paused peer held a
	// restarting member for the transport's timeout).
	go func() {
		select {
		case <-g.shutdown:
			p.Close()
		case <-p.stop:
		}
	}()
	return p, nil
}

type pipeline struct {
	g        *Group
	cc       *clientConn
	addr     string
	id       raft.ServerID
	inflight chan *appendFuture
	doneCh   chan raft.AppendFuture
	stop     chan struct{}
	once     sync.Once
}

// AppendEntries implements raft.AppendPipeline; it blocks when
// pipelineDepth requests are in flight.
func (p *pipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if !p.g.t.faulted(p.addr) {
		return nil, fmt.Errorf("%w: to %s", ErrDropped, p.addr)
	}
	f := &appendFuture{start: time.Now(), args: args, resp: resp, done: make(chan struct{})}
	id, c, err := p.cc.send(p.g.id, args)
	if err != nil {
		return nil, err
	}
	f.id, f.call = id, c
	select {
	case p.inflight <- f:
		return f, nil
	case <-p.stop:
		p.cc.forget(id)
		return nil, raft.ErrPipelineShutdown
	}
}

// collect resolves futures in the order they were sent (responses of one
// group on one connection come back in that order) and hands them to raft.
func (p *pipeline) collect() {
	for {
		select {
		case f := <-p.inflight:
			payload, err := p.cc.wait(f.id, f.call, p.g.t.timeout, p.stop)
			var promised time.Duration
			if err == nil {
				promised, err = promisedResult(payload, f.resp)
			}
			p.g.acked(p.id, f.args, f.resp, promised, err, f.start)
			f.err = err
			close(f.done)
			select {
			case p.doneCh <- f:
			case <-p.stop:
				return
			}
		case <-p.stop:
			return
		}
	}
}

// Consumer implements raft.AppendPipeline.
func (p *pipeline) Consumer() <-chan raft.AppendFuture { return p.doneCh }

// Close implements raft.AppendPipeline; the shared connection stays open.
func (p *pipeline) Close() error {
	p.once.Do(func() { close(p.stop) })
	return nil
}

type appendFuture struct {
	start time.Time
	args  *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	id    uint64
	call  *call
	done  chan struct{}
	err   error
}

// Error implements raft.Future.
func (f *appendFuture) Error() error {
	<-f.done
	return f.err
}

func (f *appendFuture) Start() time.Time                      { return f.start }
func (f *appendFuture) Request() *raft.AppendEntriesRequest   { return f.args }
func (f *appendFuture) Response() *raft.AppendEntriesResponse { return f.resp }

// Campaign makes the group's raft member start an election at once, as a
// leader's TimeoutNow would: a range woken by a request gets a leader in
// one round trip instead of an election timeout. It waits at most limit
// for raft to take the request.
func (g *Group) Campaign(limit time.Duration) error {
	stop := make(chan struct{})
	t := time.AfterFunc(limit, func() { close(stop) })
	defer t.Stop()
	// Against a lease promise this member gave, a campaign is refused as
	// any other member's would be (its votes would carry no token).
	pending, err := g.t.leases.admit(g.id, lease.Request{Kind: lease.TimeoutNow}, 0)
	if err != nil {
		return fmt.Errorf("grouptransport: campaign of group %d: %w", g.id, err)
	}
	if pending {
		defer g.t.leases.done(g.id)
	}
	g.t.leases.setToken(g.id, lease.Token{})
	_, err, ok, _ := g.deliver(&raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, Addr: []byte(g.t.localAddr)}}, nil, stop)
	if !ok {
		return fmt.Errorf("%w: campaign not taken within %v", ErrTimeout, limit)
	}
	return err
}
