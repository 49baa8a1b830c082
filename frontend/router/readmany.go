package router

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// Front-end point-read coalescing.
//
// A Get call costs a gRPC stream on each side (headers, a context, the
// stream's goroutines, a flush and a socket write per answer): in the
// deployment shape about a third of the front-end's CPU per point read and
// half of the range leader's, more than the read itself. As for writes
// (writemany.go), the reads that come while a call to a server is in
// flight queue, and when the call returns they go out together as one
// GetMany call; a lone reader's read is sent at once, alone, as before.
//
// A lane is a server address, a range and a kind of read (linearizable or
// a follower read). Not the address alone: a GetMany is answered when its
// slowest range is, and one range's read may be slow for reasons of its
// own (a quiet range waking, a leader that lost its quorum, the capacity
// model's queue): with lanes per address, every read of every range of
// that server would wait behind it (a reviewer's test: a read of one range
// waited 290 ms behind another range's 300 ms read). Each read keeps its
// own attempt context and answer: a GetMany result is the
// status Get would have returned, so the range client's retries (leader
// hints, stale maps) are the same. If the GetMany call itself fails, every
// read in it gets that error, as its own call would have. A server that
// does not know GetMany (an older version) gets single Gets.

const (
	// maxReadCalls is how many GetMany/Get calls of one lane are in
	// flight at once. One: the reads that come meanwhile make the next
	// call larger, which is the point (see docs/performance.md, "Point
	// reads, session 7").
	maxReadCalls = 1
	// maxReadsCoalesced bounds one GetMany.
	maxReadsCoalesced = 256
)

// coalescedReadsTotal counts the reads sent in GetMany calls (with the
// front-end's gets served, how well reads are coalesced).
var coalescedReadsTotal = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: "tablestore", Subsystem: "router", Name: "coalesced_reads_total",
	Help: "Point reads sent to a partition server together with others in one GetMany call.",
})

func init() { prometheus.MustRegister(coalescedReadsTotal) }

type readLaneKey struct {
	addr     string
	rangeID  uint64
	follower bool
}

// readLane is one server's queue of reads waiting for a call.
type readLane struct {
	inflight int
	queue    []*pendingRead
}

type pendingRead struct {
	ctx  context.Context
	req  *pb.GetRequest
	done chan struct{}
	resp *pb.GetResponse
	err  error
}

type readCoalescer struct {
	mu     sync.Mutex
	lanes  map[readLaneKey]*readLane
	noMany map[string]bool // addresses that answered GetMany with Unimplemented
	logger *slog.Logger
}

func newReadCoalescer() *readCoalescer {
	return &readCoalescer{lanes: make(map[readLaneKey]*readLane), noMany: make(map[string]bool), logger: slog.Default()}
}

// get sends req to the server at addr through cl, alone or with other
// reads to the same server, and returns what Get would have.
func (c *readCoalescer) get(ctx context.Context, addr string, cl pb.PartitionServiceClient, req *pb.GetRequest) (*pb.GetResponse, error) {
	k := readLaneKey{addr: addr, rangeID: req.GetRangeId(), follower: req.GetFollowerRead()}
	c.mu.Lock()
	if c.noMany[addr] {
		// Nothing to save by queueing for a server without GetMany.
		c.mu.Unlock()
		return cl.Get(ctx, req)
	}
	l := c.lanes[k]
	if l == nil {
		l = &readLane{}
		c.lanes[k] = l
	}
	if l.inflight < maxReadCalls && len(l.queue) == 0 {
		l.inflight++
		c.mu.Unlock()
		resp, err := cl.Get(ctx, req)
		c.release(k, l, cl)
		return resp, err
	}
	p := &pendingRead{ctx: ctx, req: req, done: make(chan struct{})}
	l.queue = append(l.queue, p)
	c.mu.Unlock()
	select {
	case <-p.done:
		return p.resp, p.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// release ends one call of lane l: the reads that queued meanwhile go out
// from a goroutine of their own (the caller returns its answer now).
func (c *readCoalescer) release(k readLaneKey, l *readLane, cl pb.PartitionServiceClient) {
	c.mu.Lock()
	batch := c.takeLocked(k, l)
	c.mu.Unlock()
	if batch != nil {
		go c.drain(k, l, cl, batch)
	}
}

// drain sends batch after batch of lane l until its queue is empty.
func (c *readCoalescer) drain(k readLaneKey, l *readLane, cl pb.PartitionServiceClient, batch []*pendingRead) {
	for batch != nil {
		c.send(k.addr, cl, batch)
		c.mu.Lock()
		batch = c.takeLocked(k, l)
		c.mu.Unlock()
	}
}

// takeLocked removes the next batch from l's queue, skipping reads whose
// caller gave up, or, with nothing queued, gives back l's call slot (and
// forgets l once idle) and returns nil.
func (c *readCoalescer) takeLocked(k readLaneKey, l *readLane) []*pendingRead {
	for len(l.queue) > 0 {
		n := min(len(l.queue), maxReadsCoalesced)
		batch := make([]*pendingRead, 0, n)
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

// send makes one call for batch and hands every read its answer.
func (c *readCoalescer) send(addr string, cl pb.PartitionServiceClient, batch []*pendingRead) {
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
	// that gives up earlier stops waiting for it (get above).
	var deadline time.Time
	reqs := make([]*pb.GetRequest, len(batch))
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
	resp, err := cl.GetMany(ctx, &pb.GetManyRequest{Gets: reqs})
	if status.Code(err) == codes.Unimplemented {
		c.mu.Lock()
		first := !c.noMany[addr]
		c.noMany[addr] = true
		c.mu.Unlock()
		if first {
			// Said once per address: reads from it stay uncoalesced
			// until this front-end restarts (an older partition
			// server; restart the front-ends after the servers).
			c.logger.Warn("partition server has no GetMany: its reads go one call each", "addr", addr)
		}
		c.sendEach(cl, batch)
		return
	}
	if err == nil && len(resp.GetResults()) != len(batch) {
		err = rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable,
			fmt.Sprintf("router: GetMany answered %d results for %d reads", len(resp.GetResults()), len(batch)), nil)
	}
	if err == nil {
		coalescedReadsTotal.Add(float64(len(batch)))
	}
	for i, p := range batch {
		if err != nil {
			p.err = err
			continue
		}
		p.resp, p.err = getManyAnswer(resp.GetResults()[i])
	}
}

// sendEach sends every read of batch as its own call, concurrently.
func (c *readCoalescer) sendEach(cl pb.PartitionServiceClient, batch []*pendingRead) {
	if len(batch) == 1 {
		batch[0].resp, batch[0].err = cl.Get(batch[0].ctx, batch[0].req)
		return
	}
	var wg sync.WaitGroup
	for _, p := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.resp, p.err = cl.Get(p.ctx, p.req)
		}()
	}
	wg.Wait()
}

// getManyAnswer turns one GetMany result back into Get's answer.
func getManyAnswer(r *pb.GetManyResult) (*pb.GetResponse, error) {
	if r.GetResponse() != nil {
		return r.GetResponse(), nil
	}
	var st spb.Status
	if err := proto.Unmarshal(r.GetStatus(), &st); err != nil {
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, fmt.Sprintf("router: undecodable GetMany status: %v", err), nil)
	}
	if codes.Code(st.GetCode()) == codes.OK {
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "router: GetMany result with neither a response nor an error", nil)
	}
	return nil, status.ErrorProto(&st)
}
