package partitionserver

import (
	"context"
	"sync"
	"time"

	"tablestore/partitionserver/fsm"
	pb "tablestore/proto/tablestorepb"
)

// Leader-side write batching.
//
// A client write that reaches a range leader while no proposal of that
// range is in flight is proposed at once, alone, as a plain write entry: a
// lone writer pays no extra wait. Writes that arrive while a proposal is in
// flight queue; when it completes, everything queued (up to maxBatchWrites
// writes or maxBatchBytes) becomes one WriteBatchCommand entry: one log
// append, one replication message, one state-machine apply, instead of one
// of each per write. Each write keeps its own request id (deduplicated on
// apply as before), its own Timestamp and its own result: the state machine
// applies the writes of a batch one by one, each all or nothing
// (fsm.applyWriteBatch). Validation (fsm.ValidateOps), the throttle and the
// frozen check happen before a write is queued, per write, as before.
// Errors of the proposal itself (not leader, busy, unknown outcome) are
// every write's error, each translated as for a lone write.

const (
	// maxBatchWrites bounds the writes of one entry, as raft's
	// MaxAppendEntries bounds the entries of one append.
	maxBatchWrites = 256
	// maxBatchBytes bounds the encoded size of one entry made of several
	// writes (a lone write may be larger: it is proposed alone).
	maxBatchBytes = 1 << 20
	// maxInflight is how many proposals of one range may be in flight at
	// once; writes beyond wait and are coalesced.
	maxInflight = 1
)

// proposer is what the batcher needs of a range leader (a *replica).
type proposer interface {
	proposeWrite(ctx context.Context, cmd *pb.WriteCommand, timeout time.Duration) (*fsm.Result, error)
	propose(ctx context.Context, data []byte, timeout time.Duration) (*fsm.Result, error)
}

// queuedWrite is one client write waiting for a batch.
type queuedWrite struct {
	ctx  context.Context
	cmd  *pb.WriteCommand
	size int
	done chan struct{}
	res  *fsm.Result
	err  error
}

// writeBatcher is a range leader's queue of writes waiting to be proposed.
type writeBatcher struct {
	mu       sync.Mutex
	queue    []*queuedWrite
	inflight int
}

// write proposes one client write, alone or coalesced with concurrent
// ones, and waits for its result.
func (b *writeBatcher) write(ctx context.Context, r proposer, cmd *pb.WriteCommand, timeout time.Duration) (*fsm.Result, error) {
	b.mu.Lock()
	if b.inflight < maxInflight && len(b.queue) == 0 {
		// Nothing in flight: propose now, in this goroutine.
		b.inflight++
		b.mu.Unlock()
		res, err := r.proposeWrite(ctx, cmd, timeout)
		b.release(r, timeout)
		return res, err
	}
	w := &queuedWrite{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	select {
	case <-w.done:
		return w.res, w.err
	case <-ctx.Done():
		// It may still be proposed: an ambiguous outcome, which the
		// caller's request id makes safe to retry.
		return nil, ctx.Err()
	}
}

// writeMany proposes several client writes that came together (a
// WriteMany call) and waits for their results. Like write, it proposes at
// once when nothing of the range is in flight — but all of them, as one
// entry (or as few as the batch bounds allow), not the first alone with
// the rest queued behind it; otherwise they queue together.
func (b *writeBatcher) writeMany(ctx context.Context, r proposer, cmds []*pb.WriteCommand, timeout time.Duration) ([]*fsm.Result, []error) {
	ws := make([]*queuedWrite, len(cmds))
	for i, cmd := range cmds {
		ws[i] = &queuedWrite{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	}
	b.mu.Lock()
	if b.inflight < maxInflight && len(b.queue) == 0 {
		b.inflight++
		b.mu.Unlock()
		for rest := ws; len(rest) > 0; {
			n := fit(rest)
			b.propose(r, rest[:n], timeout)
			rest = rest[n:]
		}
		b.release(r, timeout)
	} else {
		b.queue = append(b.queue, ws...)
		b.mu.Unlock()
	}
	res := make([]*fsm.Result, len(ws))
	errs := make([]error, len(ws))
	for i, w := range ws {
		select {
		case <-w.done:
			res[i], errs[i] = w.res, w.err
		case <-ctx.Done():
			// As for write: an ambiguous outcome, safe to retry.
			errs[i] = ctx.Err()
		}
	}
	return res, errs
}

// release gives back an in-flight slot, or hands it to a goroutine that
// proposes what queued meanwhile.
func (b *writeBatcher) release(r proposer, timeout time.Duration) {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go b.drain(r, timeout)
}

// drain proposes queued writes batch after batch until the queue is empty,
// then gives back its in-flight slot.
func (b *writeBatcher) drain(r proposer, timeout time.Duration) {
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.propose(r, batch, timeout)
	}
}

// take removes the next batch from the queue (mu held). Writes whose caller
// gave up are dropped: nobody waits for their result.
func (b *writeBatcher) take() []*queuedWrite {
	n := fit(b.queue)
	batch := make([]*queuedWrite, 0, n)
	for _, w := range b.queue[:n] {
		if w.ctx.Err() == nil {
			batch = append(batch, w)
		}
	}
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// propose proposes a batch as one entry and hands every write its result.
func (b *writeBatcher) propose(r proposer, batch []*queuedWrite, timeout time.Duration) {
	defer func() {
		for _, w := range batch {
			close(w.done)
		}
	}()
	if len(batch) == 1 {
		batch[0].res, batch[0].err = r.proposeWrite(batch[0].ctx, batch[0].cmd, timeout)
		return
	}
	cmds := make([]*pb.WriteCommand, len(batch))
	for i, w := range batch {
		cmds[i] = w.cmd
	}
	data, err := fsm.EncodeWriteBatch(cmds)
	var res *fsm.Result
	if err == nil {
		res, err = r.propose(context.Background(), data, timeout)
	}
	if err == nil && res.Err == nil && len(res.Batch) != len(batch) {
		err = ErrUnknownOutcome
	}
	for i, w := range batch {
		switch {
		case err != nil:
			w.err = err
		case res.Err != nil:
			w.res = res
		default:
			w.res = res.Batch[i]
		}
	}
	batchedWrites.Observe(float64(len(batch)))
}

// fit is how many writes from the front of ws make one entry: at most
// maxBatchWrites, and at most maxBatchBytes unless the first alone is larger.
func fit(ws []*queuedWrite) int {
	n, bytes := 0, 0
	for n < len(ws) && n < maxBatchWrites {
		w := ws[n]
		if w.size == 0 {
			w.size = sizeOfWrite(w.cmd)
		}
		if n > 0 && bytes+w.size > maxBatchBytes {
			break
		}
		bytes += w.size
		n++
	}
	return n
}

func sizeOfWrite(cmd *pb.WriteCommand) int {
	n := 16
	for _, op := range cmd.GetOps() {
		n += len(op.GetEntity()) + len(op.GetPartitionKey()) + len(op.GetRowKey()) + 16
	}
	return n + len(cmd.GetRequestId())
}
