package master

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var staleReplicasCollectedTotal = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: "tablestore", Subsystem: "master", Name: "stale_replicas_collected_total",
	Help: "Deletes the master asked of replicas that a later generation of their range removed from their server.",
})

func init() { prometheus.MustRegister(staleReplicasCollectedTotal) }

// Replica garbage collection. A move or a replica-set fix removes a voter
// and asks its server to delete the replica, best effort: a server that is
// down then (or cut off) keeps a replica outside the range's
// configuration, which campaigns for ever ("rejecting pre-vote request
// since node is not in configuration" on the others) and holds its data
// and log. So a heartbeat that reports a replica of a range whose
// descriptor is of a later generation and does not list the server is
// remembered, and once the same is reported again at least staleGrace
// later (a removal may still be on its way to the server), the master
// deletes it (collectStale), naming the descriptor's generation: the server
// deletes only a replica older than it (DeleteReplica's before_generation
// guard), never one a later move re-created. CockroachDB's replica GC
// queue is the model.

// staleGrace is how long a stale replica must be reported before it is
// collected; staleRetry is how long before a collected one still reported
// is asked for again.
const (
	staleGrace = 5 * time.Second
	staleRetry = 30 * time.Second
)

type staleKey struct {
	server  string
	rangeID uint64
}

type staleEntry struct {
	first, asked, last time.Time
}

// replicaGC decides when to collect a stale replica; it does no I/O.
type replicaGC struct {
	mu sync.Mutex
	m  map[staleKey]*staleEntry
}

func newReplicaGC() *replicaGC { return &replicaGC{m: map[staleKey]*staleEntry{}} }

// observe records that server reported a stale replica of range id at now
// and reports whether to ask for its delete now.
func (g *replicaGC) observe(server string, id uint64, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := staleKey{server, id}
	e := g.m[k]
	if e == nil {
		g.m[k] = &staleEntry{first: now, last: now}
		return false
	}
	e.last = now
	if now.Sub(e.first) < staleGrace || (!e.asked.IsZero() && now.Sub(e.asked) < staleRetry) {
		return false
	}
	e.asked = now
	return true
}

// forget drops what was not reported for a while (the replica is gone, or
// a later generation lists its server again).
func (g *replicaGC) forget(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, e := range g.m {
		if now.Sub(e.last) > 2*staleRetry {
			delete(g.m, k)
		}
	}
}

// collectStale deletes server's replica of range id if the range's
// descriptor still does not list the server. It claims the range, as an
// operation does, and waits for the delete: a move started meanwhile could
// add the server back and reuse that very replica as its new voter, which
// a delete arriving later must not wipe.
func (s *Server) collectStale(server string, id uint64) {
	if err := s.ops.claim(id); err != nil {
		return // an operation runs on the range: a later report decides
	}
	defer s.ops.release(id)
	d, ok := s.rangeDesc(id)
	if !ok || hasReplica(d, server) {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if err := s.deleteReplica(ctx, server, id, d.GetGeneration()); err != nil {
		s.logger.Warn("deleting a stale replica failed", "server", server, "range", id, "err", err)
		return
	}
	staleReplicasCollectedTotal.Inc()
	s.logger.Info("deleted a replica its range had removed from the server", "server", server, "range", id, "generation", d.GetGeneration())
}
