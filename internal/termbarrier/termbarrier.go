// Package termbarrier owns the check a new Raft leader must pass before it
// answers from its state machine: it has committed an entry of its own term
// (a barrier), so every entry earlier leaders committed is applied. Until
// then its commit index may lag behind what is already committed. Masters
// and range replicas both use it.
package termbarrier

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// ErrNotReady is returned when the barrier could not commit (leadership
// lost, shutdown, timeout).
var ErrNotReady = errors.New("termbarrier: leader could not commit in its term")

// Gate remembers the last term whose barrier committed.
type Gate struct {
	term atomic.Uint64
	mu   sync.Mutex
}

// Ensure returns once r has committed a barrier in its current term; the
// first call of each term pays one round, later ones none. fresh reports
// whether this call ran the barrier (the caller's first use of the term).
func (g *Gate) Ensure(r *raft.Raft, timeout time.Duration) (fresh bool, err error) {
	term := r.CurrentTerm()
	if g.term.Load() == term {
		return false, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.term.Load() == term {
		return false, nil
	}
	if err := r.Barrier(timeout).Error(); err != nil {
		return false, errors.Join(ErrNotReady, err)
	}
	g.term.Store(term)
	return true, nil
}
