package router

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// Front-end write coalescing.
//
// A Write call costs a gRPC stream on each side (headers, a context with a
// deadline, the stream's goroutines): about a third of the front-end's and
// of the range leader's CPU per insert, more than the write's own work. The
// leader already puts the writes that queue while a proposal of the range
// is in flight into one log entry; the coalescer groups them one hop
// earlier. Per range and leader address, up to maxWriteCalls calls are in flight; a
// write that comes while they are queues, and when a call returns, the
// writes queued meanwhile go out together as one WriteMany call. A lone
// writer is sent at once, alone, as before.
//
// The lane is per range and address, not per address: a WriteMany is
// answered when its slowest range's writes are, and one range may stall
// for reasons of its own (a leader that lost its quorum, a wake, a
// transfer): with one lane per address, the writes of every other range
// that server leads would wait behind it, through every front-end, up to
// an attempt timeout each, and a fault of one range would become a gap of
// its neighbours (issue 10's bound). A lane per address saved ~11 µs of
// the leaders' gRPC server per insert in the pre-split table (a server
// leading two ranges got one call for both) and moved neither ratio of
// the pre-split benchmark (docs/performance.md, "Pre-split and spread
// inserts, session 7"). The server still groups a call's writes by range
// (service.WriteMany), so a call may carry several.
//
// Each write keeps its own request id, attempt context and answer: a
// WriteMany result is the status Write would have returned, so the range
// client's retry decisions are the same. If the WriteMany call itself
// fails, every write in it gets that error, as its own call would have
// (each write's outcome unknown, its retry safe by its request id). A
// server that does not know WriteMany (an older version) gets single
// Writes.

const (
	// maxWriteCalls is how many calls to one address are in flight at
	// once. One, as the leader keeps one proposal per range in flight:
	// with two, each call (and each log entry) carried half as
	// many writes, and the deployment shape spent 223 – 306 µs of server
	// CPU per insert against 195 – 245 with one (two alternating rounds,
	// load 11 – 15), at no loss of throughput.
	maxWriteCalls = 1
	// maxCoalesced and maxCoalescedBytes bound one WriteMany (the leader's
	// batch of one log entry has the same count bound).
	maxCoalesced      = 256
	maxCoalescedBytes = 4 << 20
)

// laneKey names a lane: a range and its leader's address (see the note
// on lanes above).
type laneKey struct {
	addr    string
	rangeID uint64
}

// lane is one range leader's queue of writes waiting for a call.
type lane struct {
	inflight int
	queue    []*pendingWrite
	// wake, while a drain lingers, is closed once the queue holds want
	// writes.
	wake chan struct{}
	want int
}

type pendingWrite struct {
	ctx  context.Context
	req  *pb.WriteRequest
	done chan struct{}
	resp *pb.WriteResponse
	err  error
}

type coalescer struct {
	mu     sync.Mutex
	lanes  map[laneKey]*lane
	noMany map[string]bool // addresses that answered WriteMany with Unimplemented
	linger time.Duration   // lingerMax; 0 turns lingering off
	logger *slog.Logger
}

func newCoalescer() *coalescer {
	return &coalescer{lanes: make(map[laneKey]*lane), noMany: make(map[string]bool), linger: lingerMax, logger: slog.Default()}
}

// write sends req to the server at addr through cl, alone or with other
// writes to the same range leader, and returns what Write would have.
func (c *coalescer) write(ctx context.Context, addr string, cl pb.PartitionServiceClient, req *pb.WriteRequest) (*pb.WriteResponse, error) {
	k := laneKey{addr: addr, rangeID: req.GetRangeId()}
	c.mu.Lock()
	l := c.lanes[k]
	if l == nil {
		l = &lane{}
		c.lanes[k] = l
	}
	if l.inflight < maxWriteCalls && len(l.queue) == 0 {
		l.inflight++
		c.mu.Unlock()
		resp, err := cl.Write(ctx, req)
		c.release(k, l, cl)
		return resp, err
	}
	p := &pendingWrite{ctx: ctx, req: req, done: make(chan struct{})}
	l.queue = append(l.queue, p)
	if l.wake != nil && len(l.queue) >= l.want {
		close(l.wake)
		l.wake = nil
	}
	c.mu.Unlock()
	select {
	case <-p.done:
		return p.resp, p.err
	case <-ctx.Done():
		// What the call would have returned; the write may still be sent
		// (an unknown outcome, which its request id makes safe to retry).
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// release ends one call of lane l: the writes that queued meanwhile go out
// from a goroutine of their own (the caller returns its answer now).
func (c *coalescer) release(k laneKey, l *lane, cl pb.PartitionServiceClient) {
	c.mu.Lock()
	batch := c.takeLocked(k, l)
	c.mu.Unlock()
	if batch != nil {
		go c.drain(k, l, cl, batch)
	}
}

// drain sends batch after batch of lane l until its queue is empty.
func (c *coalescer) drain(k laneKey, l *lane, cl pb.PartitionServiceClient, batch []*pendingWrite) {
	for batch != nil {
		c.send(k.addr, cl, batch)
		c.mu.Lock()
		if wake := lingerLocked(l, len(batch), c.linger); wake != nil {
			linger := c.linger
			c.mu.Unlock()
			t := time.NewTimer(linger)
			select {
			case <-wake:
			case <-t.C:
			}
			t.Stop()
			c.mu.Lock()
			l.wake = nil
		}
		batch = c.takeLocked(k, l)
		c.mu.Unlock()
	}
}

// lingerMax bounds how long a lane waits for the writers it just answered
// to come back (see lingerLocked). Pre-split table, server CPU per insert
// (means of 3 – 24 alternating runs, load 8.5 – 20, lingering only with
// writes queued): none ~410 µs, 1 ms 405, 3 ms 376, 5 ms 371
// (docs/performance.md, session 7).
const lingerMax = 3 * time.Millisecond

// lingerTarget is the most writes a lane waits for: a call of that many
// already spreads its per-call and per-entry costs thinly (one range
// under 32 writers: calls of ~16 without waiting, and waiting for all 32
// cost latency — the slowest writer's turnaround — for no CPU).
const lingerTarget = 16

// lingerLocked decides whether the lane, having just answered answered
// writes, waits before its next call: when it answered several and fewer
// than half as many (at most lingerTarget) are queued. Under a closed loop (a fixed set of
// clients, each sending its next write when answered) the writers of the
// call that just returned come back a client's turnaround later; calling
// at once would send the few queued now and leave those to the call
// after, halving every call (and log entry) of a lane whose writers are
// few — as each of four ranges' leaders has a quarter of them. That holds
// with nothing queued too: giving the slot back would send the first
// writer to come back alone and queue the rest behind it (calls of 1 and
// n-1 in turn). The wait ends as soon as as many are queued as were
// answered, or lingerTarget; a lane whose writers do not come back gives
// its slot back after lingerMax. A lone writer never waits (one
// answered). It returns the channel to wait on, or nil not to wait.
func lingerLocked(l *lane, answered int, linger time.Duration) chan struct{} {
	target := min(answered, lingerTarget)
	if linger <= 0 || answered < 2 || 2*len(l.queue) >= target {
		return nil
	}
	l.want = target
	l.wake = make(chan struct{})
	return l.wake
}

// takeLocked removes the next batch from l's queue, skipping writes whose
// caller gave up, or, with nothing queued, gives back l's call slot (and
// forgets l once idle) and returns nil.
func (c *coalescer) takeLocked(k laneKey, l *lane) []*pendingWrite {
	for len(l.queue) > 0 {
		n, bytes := 0, 0
		for n < len(l.queue) && n < maxCoalesced {
			b := requestBytes(l.queue[n].req)
			if n > 0 && bytes+b > maxCoalescedBytes {
				break
			}
			bytes += b
			n++
		}
		batch := make([]*pendingWrite, 0, n)
		for _, p := range l.queue[:n] {
			if p.ctx.Err() == nil {
				batch = append(batch, p)
			}
		}
		rest := copy(l.queue, l.queue[n:])
		clear(l.queue[rest:])
		l.queue = l.queue[:rest]
		if len(batch) > 0 {
			return batch
		}
	}
	l.inflight--
	if l.inflight == 0 && c.lanes[k] == l {
		delete(c.lanes, k)
	}
	return nil
}

func requestBytes(req *pb.WriteRequest) int {
	n := 64 + len(req.GetRequestId())
	for _, op := range req.GetOps() {
		n += 32 + len(op.GetEntity()) + len(op.GetPartitionKey()) + len(op.GetRowKey())
	}
	return n
}

// send makes one call for batch and hands every write its answer.
func (c *coalescer) send(addr string, cl pb.PartitionServiceClient, batch []*pendingWrite) {
	defer func() {
		for _, p := range batch {
			close(p.done)
		}
	}()
	c.mu.Lock()
	single := c.noMany[addr]
	c.mu.Unlock()
	if len(batch) == 1 || single {
		c.sendEach(cl, batch)
		return
	}
	// The call lives as long as the longest attempt it carries; a caller
	// that gives up earlier stops waiting for it (write above).
	var deadline time.Time
	reqs := make([]*pb.WriteRequest, len(batch))
	for i, p := range batch {
		reqs[i] = p.req
		d, ok := p.ctx.Deadline()
		if !ok {
			d = time.Now().Add(time.Hour)
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp, err := cl.WriteMany(ctx, &pb.WriteManyRequest{Writes: reqs})
	if status.Code(err) == codes.Unimplemented {
		c.mu.Lock()
		first := !c.noMany[addr]
		c.noMany[addr] = true
		c.mu.Unlock()
		if first {
			// Said once per address: writes to it stay uncoalesced
			// until this front-end restarts (an older partition
			// server; restart the front-ends after the servers).
			c.logger.Warn("partition server has no WriteMany: its writes go one call each", "addr", addr)
		}
		c.sendEach(cl, batch)
		return
	}
	if err == nil && len(resp.GetResults()) != len(batch) {
		// The writes may have applied: an unknown outcome, which the
		// request ids make safe to retry, not a final failure.
		err = rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable,
			fmt.Sprintf("router: WriteMany answered %d results for %d writes", len(resp.GetResults()), len(batch)), nil)
	}
	for i, p := range batch {
		if err != nil {
			p.err = err
			continue
		}
		p.resp, p.err = manyAnswer(resp.GetResults()[i])
	}
}

// sendEach sends every write of batch as its own call, concurrently.
func (c *coalescer) sendEach(cl pb.PartitionServiceClient, batch []*pendingWrite) {
	if len(batch) == 1 {
		batch[0].resp, batch[0].err = cl.Write(batch[0].ctx, batch[0].req)
		return
	}
	var wg sync.WaitGroup
	for _, p := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.resp, p.err = cl.Write(p.ctx, p.req)
		}()
	}
	wg.Wait()
}

// manyAnswer turns one WriteMany result back into Write's answer.
func manyAnswer(r *pb.WriteManyResult) (*pb.WriteResponse, error) {
	if r.GetResponse() != nil {
		return r.GetResponse(), nil
	}
	var st spb.Status
	if err := proto.Unmarshal(r.GetStatus(), &st); err != nil {
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, fmt.Sprintf("router: undecodable WriteMany status: %v", err), nil)
	}
	if codes.Code(st.GetCode()) == codes.OK {
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "router: WriteMany result with neither a response nor an error", nil)
	}
	return nil, status.ErrorProto(&st)
}
