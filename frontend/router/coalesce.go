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

// The lane machinery shared by write and point-read coalescing
// (writemany.go, readmany.go): one owner for the rules both sides must keep
// alike.
//
// A lane is a server address, a range and a kind of request (the read
// side's follower reads are a kind of their own). Up to maxCalls calls of a
// lane are in flight; a request that comes while they are queues, and when
// a call returns, the requests queued meanwhile go out together as one
// "many" call (WriteMany, GetMany). A lone caller is sent at once, alone.
// Lanes are per range, not per address: a many call is answered when its
// slowest range is, and one range may stall for reasons of its own (a
// leader that lost its quorum, a wake, a transfer, the capacity model's
// queue); with lanes per address every other range of that server would
// wait behind it, through every front-end. Writes' lanes are per Raft
// group (doIn): the ranges of one group stall together, and share its
// entries.
//
// Each request keeps its own attempt context and answer: a many call's
// result is the status the single call would have returned, so the range
// client's retries are the same. If the many call itself fails, every
// request in it gets that error, as its own call would have. A server that
// answers a many call with Unimplemented (an older version) is remembered
// and gets single calls from then on.

// answer is one request's outcome within a many call.
type answer[Resp any] struct {
	resp Resp
	err  error
}

// coalescerOps are what a coalescer needs of one kind of request. The
// client is passed through to the calls (a lane's client is the one its
// first caller brought: one per address).
type coalescerOps[Req, Resp any] struct {
	// many names the batch RPC in logs and errors ("WriteMany").
	many string
	// noun names a request in errors ("writes").
	noun string
	// key is the range and kind of a request (its lane at an address).
	key func(Req) (rangeID uint64, kind bool)
	// one makes the single call; callMany the batch call, answering one
	// result per request in order (a call error fails them all).
	one      func(ctx context.Context, cl pb.PartitionServiceClient, req Req) (Resp, error)
	callMany func(ctx context.Context, cl pb.PartitionServiceClient, reqs []Req) ([]answer[Resp], error)
	// maxCalls is how many calls of a lane are in flight at once;
	// maxBatch and, when size is set, maxBytes bound one many call.
	maxCalls, maxBatch int
	size               func(Req) int
	maxBytes           int
	// bypassWithoutMany sends requests to a server known to lack the
	// batch RPC at once instead of through the lane (nothing to save by
	// queueing).
	bypassWithoutMany bool
	// skipAfterMiss is how many calls a lane sends without lingering
	// after a linger that ran out before its callers came back: they are
	// not a closed loop's (a steady stream at a moderate rate), and
	// waiting for them only adds latency (reads, readmany.go). 0: always
	// linger (writes).
	skipAfterMiss int
	// lingerForAll, when above 0, makes a lingering lane wait for the
	// callers it just answered on top of those already queued (up to
	// that many together), not only for as many as it answered, and no
	// longer than the call just made took (see lingerLocked; writes,
	// writemany.go).
	lingerForAll int
	// coalesced, when set, is told how many requests a successful many
	// call carried.
	coalesced func(n int)
}

// laneKey names a lane (see above): rangeID is the range's id, or for a
// write its Raft group's (doIn).
type laneKey struct {
	addr    string
	rangeID uint64
	kind    bool
}

// lane is one lane's queue of requests waiting for a call.
type lane[Req, Resp any] struct {
	inflight int
	queue    []*pending[Req, Resp]
	// wake, while a drain lingers, is closed once the queue holds want
	// requests.
	wake chan struct{}
	want int
	// skipLinger counts down the calls sent without lingering after a
	// missed linger (coalescerOps.skipAfterMiss).
	skipLinger int
}

type pending[Req, Resp any] struct {
	ctx  context.Context
	req  Req
	done chan struct{}
	resp Resp
	err  error
}

type coalescer[Req, Resp any] struct {
	ops    coalescerOps[Req, Resp]
	mu     sync.Mutex
	lanes  map[laneKey]*lane[Req, Resp]
	noMany map[string]bool // addresses that answered the many call with Unimplemented
	linger time.Duration   // see lingerLocked; 0 turns lingering off
	// since measures a call for the bound of a lingerForAll wait
	// (time.Since; tests stretch it).
	since  func(time.Time) time.Duration
	logger *slog.Logger
}

func newLaneCoalescer[Req, Resp any](ops coalescerOps[Req, Resp], linger time.Duration) *coalescer[Req, Resp] {
	return &coalescer[Req, Resp]{ops: ops, lanes: make(map[laneKey]*lane[Req, Resp]), noMany: make(map[string]bool), linger: linger, since: time.Since, logger: slog.Default()}
}

// do sends req to the server at addr through cl, alone or with other
// requests of its lane, and returns what the single call would have.
func (c *coalescer[Req, Resp]) do(ctx context.Context, addr string, cl pb.PartitionServiceClient, req Req) (Resp, error) {
	rangeID, _ := c.ops.key(req)
	return c.doIn(ctx, addr, cl, rangeID, req)
}

// doIn is do in the lane of unit (at addr, of req's kind) instead of
// req's range: writes go in the lane of their range's Raft group, so that
// the writes of several ranges that are spans of one group share its
// calls as they share its log entries (the server groups a WriteMany's
// writes by group), and the group's ranges stall together anyway (one
// leader, one quorum).
func (c *coalescer[Req, Resp]) doIn(ctx context.Context, addr string, cl pb.PartitionServiceClient, unit uint64, req Req) (Resp, error) {
	_, kind := c.ops.key(req)
	k := laneKey{addr: addr, rangeID: unit, kind: kind}
	c.mu.Lock()
	if c.ops.bypassWithoutMany && c.noMany[addr] {
		c.mu.Unlock()
		return c.ops.one(ctx, cl, req)
	}
	l := c.lanes[k]
	if l == nil {
		l = &lane[Req, Resp]{}
		c.lanes[k] = l
	}
	if l.inflight < c.ops.maxCalls && len(l.queue) == 0 {
		l.inflight++
		c.mu.Unlock()
		resp, err := c.ops.one(ctx, cl, req)
		c.release(k, l, cl)
		return resp, err
	}
	p := &pending[Req, Resp]{ctx: ctx, req: req, done: make(chan struct{})}
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
		// What the call would have returned; the request may still be
		// sent (for a write an unknown outcome, which its request id
		// makes safe to retry).
		var zero Resp
		return zero, status.FromContextError(ctx.Err()).Err()
	}
}

// release ends one call of lane l: the requests that queued meanwhile go
// out from a goroutine of their own (the caller returns its answer now).
func (c *coalescer[Req, Resp]) release(k laneKey, l *lane[Req, Resp], cl pb.PartitionServiceClient) {
	c.mu.Lock()
	batch := c.takeLocked(k, l)
	c.mu.Unlock()
	if batch != nil {
		go c.drain(k, l, cl, batch)
	}
}

// drain sends batch after batch of lane l until its queue is empty.
func (c *coalescer[Req, Resp]) drain(k laneKey, l *lane[Req, Resp], cl pb.PartitionServiceClient, batch []*pending[Req, Resp]) {
	for batch != nil {
		var sent time.Time
		if c.ops.lingerForAll > 0 {
			sent = time.Now()
		}
		c.send(k.addr, cl, batch)
		var took time.Duration
		if c.ops.lingerForAll > 0 {
			took = c.since(sent)
		}
		c.mu.Lock()
		var wake chan struct{}
		if l.skipLinger > 0 {
			l.skipLinger--
		} else {
			wake = lingerLocked(l, len(batch), c.linger, c.ops.lingerForAll)
		}
		if wake != nil {
			linger := c.linger
			if c.ops.lingerForAll > 0 {
				// See lingerLocked: no longer than the call took.
				linger = min(linger, took)
			}
			c.mu.Unlock()
			t := time.NewTimer(linger)
			missed := false
			select {
			case <-wake:
			case <-t.C:
				missed = true
			}
			t.Stop()
			c.mu.Lock()
			l.wake = nil
			if missed {
				l.skipLinger = c.ops.skipAfterMiss
			}
		}
		batch = c.takeLocked(k, l)
		c.mu.Unlock()
	}
}

// lingerTarget is the most requests a lane waits for (reads; writes wait
// for up to coalescerOps.lingerForAll): a call of that many already
// spreads its per-call costs thinly.
const lingerTarget = 16

// lingerLocked decides whether the lane, having just answered answered
// requests, waits before its next call: when it answered several and fewer
// than half as many (at most lingerTarget) are queued. Under a closed loop (a fixed set of
// clients, each sending its next request when answered) the callers of the
// call that just returned come back a client's turnaround later; calling
// at once would send the few queued now and leave those to the call
// after, halving every call (and log entry) of a lane whose callers are
// few — as each of four ranges' leaders has a quarter of them. That holds
// with nothing queued too: giving the slot back would send the first
// caller to come back alone and queue the rest behind it (calls of 1 and
// n-1 in turn). The wait ends as soon as as many are queued as were
// answered, or lingerTarget; a lane whose callers do not come back gives
// its slot back after linger. A lone caller never waits (one
// answered). It returns the channel to wait on, or nil not to wait.
// Writes linger up to lingerMax (writemany.go), reads up to readLinger
// (readmany.go).
//
// With all above 0 (writes), the lane waits for the callers it answered
// on top of those already queued (up to all together), and so whenever
// fewer than that are queued. Waiting only for as many as it
// answered leaves a closed loop in two cohorts for good: a call of half
// the callers returns while the other half are queued, half as many as
// it answered are queued, and the lane sends them at once — every call
// and log entry carries half the lane's callers (4.5 writes per entry
// for each range of a table pre-split into four under 32 writers, 6.6 –
// 6.8 with the cohorts merged: docs/performance.md, session 12). The
// drain then bounds the wait by the duration of the call just made: a
// closed loop's answered callers come back within about that, while a
// steady stream at a moderate rate would make every call wait out the
// whole linger for callers that are not coming (at 1,000 inserts/s on
// one range p50 rose 1.8 → 4.1 ms without the bound, 1.85 with it). With
// the time bound the count needs no cap of its own below a call's: one
// range under 32 writers gets entries of 22 – 24 writes instead of two
// cohorts' 16 (server CPU per insert −14 to −20 %, same pairs).
func lingerLocked[Req, Resp any](l *lane[Req, Resp], answered int, linger time.Duration, all int) chan struct{} {
	target := min(answered, lingerTarget)
	waitBelow := (target + 1) / 2 // fewer than half as many queued
	if all > 0 {
		target = min(answered+len(l.queue), all)
		waitBelow = target
	}
	if linger <= 0 || answered < 2 || len(l.queue) >= waitBelow {
		return nil
	}
	l.want = target
	l.wake = make(chan struct{})
	return l.wake
}

// takeLocked removes the next batch from l's queue, skipping requests
// whose caller gave up, or, with nothing queued, gives back l's call slot
// (and forgets l once idle) and returns nil.
func (c *coalescer[Req, Resp]) takeLocked(k laneKey, l *lane[Req, Resp]) []*pending[Req, Resp] {
	for len(l.queue) > 0 {
		n := min(len(l.queue), c.ops.maxBatch)
		if c.ops.size != nil {
			n = 0
			for bytes := 0; n < len(l.queue) && n < c.ops.maxBatch; n++ {
				b := c.ops.size(l.queue[n].req)
				if n > 0 && bytes+b > c.ops.maxBytes {
					break
				}
				bytes += b
			}
		}
		batch := make([]*pending[Req, Resp], 0, n)
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

// send makes one call for batch and hands every request its answer.
func (c *coalescer[Req, Resp]) send(addr string, cl pb.PartitionServiceClient, batch []*pending[Req, Resp]) {
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
	// that gives up earlier stops waiting for it (do above).
	var deadline time.Time
	reqs := make([]Req, len(batch))
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
	answers, err := c.ops.callMany(ctx, cl, reqs)
	if status.Code(err) == codes.Unimplemented {
		c.mu.Lock()
		first := !c.noMany[addr]
		c.noMany[addr] = true
		c.mu.Unlock()
		if first {
			// Said once per address: its requests stay uncoalesced
			// until this front-end restarts (an older partition
			// server; restart the front-ends after the servers).
			c.logger.Warn("partition server has no "+c.ops.many+": its "+c.ops.noun+" go one call each", "addr", addr)
		}
		c.sendEach(cl, batch)
		return
	}
	if err != nil && ctx.Err() != nil {
		// The call ran out the latest attempt deadline it carries. For
		// the callers still waiting (that attempt's, whose own context
		// may not show its deadline yet: its timer and this call's fire
		// for the same instant in no set order) it is an attempt
		// abandoned without an answer, as rangeclient's attempt timeout
		// reports one: an unknown outcome, retried (a write by its
		// request id), not a bare DeadlineExceeded that ends the request
		// with 500 OperationTimedOut.
		err = rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable,
			fmt.Sprintf("router: %s gave no answer within its callers' attempt deadline (%v)", c.ops.many, err), nil)
	}
	if err == nil && len(answers) != len(batch) {
		// A write may have applied: an unknown outcome, which the
		// request ids make safe to retry, not a final failure.
		err = rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable,
			fmt.Sprintf("router: %s answered %d results for %d %s", c.ops.many, len(answers), len(batch), c.ops.noun), nil)
	}
	if err == nil && c.ops.coalesced != nil {
		c.ops.coalesced(len(batch))
	}
	for i, p := range batch {
		if err != nil {
			p.err = err
			continue
		}
		p.resp, p.err = answers[i].resp, answers[i].err
	}
}

// sendEach sends every request of batch as its own call, concurrently.
func (c *coalescer[Req, Resp]) sendEach(cl pb.PartitionServiceClient, batch []*pending[Req, Resp]) {
	if len(batch) == 1 {
		batch[0].resp, batch[0].err = c.ops.one(batch[0].ctx, cl, batch[0].req)
		return
	}
	var wg sync.WaitGroup
	for _, p := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.resp, p.err = c.ops.one(p.ctx, cl, p.req)
		}()
	}
	wg.Wait()
}

// answersOf turns a many call's results into its requests' answers by
// conv (nil with the call's error).
func answersOf[R, Resp any](results []R, err error, conv func(R) (Resp, error)) ([]answer[Resp], error) {
	if err != nil {
		return nil, err
	}
	out := make([]answer[Resp], len(results))
	for i, r := range results {
		out[i].resp, out[i].err = conv(r)
	}
	return out, nil
}

// manyStatus turns one many-call result's status bytes back into the
// single call's error (a result with a response has no status).
func manyStatus(many string, b []byte) error {
	var st spb.Status
	if err := proto.Unmarshal(b, &st); err != nil {
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, fmt.Sprintf("router: undecodable %s status: %v", many, err), nil)
	}
	if codes.Code(st.GetCode()) == codes.OK {
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "router: "+many+" result with neither a response nor an error", nil)
	}
	return status.ErrorProto(&st)
}
