package master

import (
	"context"
	"fmt"
	"sync"
	"time"

	"tablestore/master/scheduler"
)

// runner executes operations: it is the one place that knows which ranges
// are busy, how many scheduled operations run at once, how long one may
// take, and what ran lately (the scheduler's cooldowns read that).
type runner struct {
	mu       sync.Mutex
	busy     map[uint64]bool
	running  map[*scheduler.Op]bool
	recent   []*scheduler.Op // shared with running: the finish sets Done
	max      int
	timeout  time.Duration
	keep     time.Duration // how long finished operations stay in recent
	parent   context.Context
	wg       sync.WaitGroup
	executor func(ctx context.Context, o scheduler.Op) error
}

func newRunner(parent context.Context, max int, timeout, keep time.Duration, exec func(ctx context.Context, o scheduler.Op) error) *runner {
	return &runner{busy: map[uint64]bool{}, running: map[*scheduler.Op]bool{}, max: max, timeout: timeout, keep: keep,
		parent: parent, executor: exec}
}

// claim marks ranges busy; it fails if one already is. Operator requests
// claim their ranges directly, outside the in-flight limit.
func (r *runner) claim(ids ...uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if r.busy[id] {
			return fmt.Errorf("%w: %d", ErrBusy, id)
		}
	}
	for _, id := range ids {
		r.busy[id] = true
	}
	return nil
}

func (r *runner) release(ids ...uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		delete(r.busy, id)
	}
}

// slots is how many scheduled operations may start now.
func (r *runner) slots() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.max - len(r.running)
}

// state returns the operations running and those started within keep of
// now, for the scheduler's snapshot.
func (r *runner) state(now time.Time) (running, recent []scheduler.Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for o := range r.running {
		running = append(running, *o)
	}
	for id := range r.busy {
		running = append(running, scheduler.Op{Kind: scheduler.TransferLeader, Range: id})
	}
	kept := r.recent[:0]
	for _, o := range r.recent {
		if now.Sub(o.Last()) < r.keep {
			kept = append(kept, o)
			recent = append(recent, *o)
		}
	}
	clear(r.recent[len(kept):])
	r.recent = kept
	return running, recent
}

// record adds o, an operation run outside the runner (an operator's
// split or merge), to the recent list as done at done, failed when err is
// set: the scheduler's windows after a split or merge (a reshaped range
// reports its old shape until its leader reports again) apply to it as
// to its own.
func (r *runner) record(o scheduler.Op, done time.Time, err error) {
	o.Done, o.Failed = done, err != nil
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recent = append(r.recent, &o)
}

// start runs o in the background under the timeout, unless its ranges are
// busy or no slot is free. It reports whether o started.
func (r *runner) start(o scheduler.Op) bool {
	r.mu.Lock()
	if len(r.running) >= r.max {
		r.mu.Unlock()
		return false
	}
	r.mu.Unlock()
	if r.claim(o.Ranges()...) != nil {
		return false
	}
	r.mu.Lock()
	op := &o
	r.running[op] = true
	r.recent = append(r.recent, op)
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.parent, r.timeout)
		defer cancel()
		err := r.executor(ctx, o)
		r.mu.Lock()
		delete(r.running, op)
		// The scheduler measures from here when a reshaped range's
		// reports may describe it again (a merge that co-located
		// replicas first can take longer than the window it waits).
		op.Done, op.Failed = time.Now(), err != nil
		r.mu.Unlock()
		r.release(o.Ranges()...)
		if err != nil {
			opFailuresTotal.WithLabelValues(o.Kind.String()).Inc()
		}
	}()
	return true
}

// recover runs fn, a recovery of something a previous master left half
// done, in the background under timeout with ids claimed, outside the
// in-flight limit (recovery is not policy). It reports whether fn started
// (false: a range is busy).
func (r *runner) recover(ids []uint64, timeout time.Duration, fn func(ctx context.Context) error) bool {
	if r.claim(ids...) != nil {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.release(ids...)
		ctx, cancel := context.WithTimeout(r.parent, timeout)
		defer cancel()
		if err := fn(ctx); err != nil {
			opFailuresTotal.WithLabelValues("recovery").Inc()
		}
	}()
	return true
}

// wait waits for the operations running to end.
func (r *runner) wait() { r.wg.Wait() }
