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
// is asked for again. The grace only debounces: the claim and the
// before_generation guard make an early delete safe. A stale replica that
// covers the start of a split-born range assigned to its server no longer
// waits for this: the server deletes it itself from its heartbeat's answer
// (lifecycle.DropStale; chaos seeds 10 and 299, a server removed from a
// range by a move just after the range split, whose new range ran a voter
// short until the stale parent went, 12 s and 7 s later).
const (
	staleGrace = 2 * time.Second
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

// observe records that server reported a stale replica of range id at now.
func (g *replicaGC) observe(server string, id uint64, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := staleKey{server, id}
	if e := g.m[k]; e != nil {
		e.last = now
		return
	}
	g.m[k] = &staleEntry{first: now, last: now}
}

// due returns server's stale replicas whose grace is over and that were
// not asked for within staleRetry, marking them asked. Heartbeats carry
// only what changed, so a stale replica is reported once and then only in
// the full report every --full-report-interval: due lets every heartbeat
// of the server collect it, from the master's view of what it hosts.
func (g *replicaGC) due(server string, now time.Time) []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []uint64
	for k, e := range g.m {
		if k.server != server || now.Sub(e.first) < staleGrace || (!e.asked.IsZero() && now.Sub(e.asked) < staleRetry) {
			continue
		}
		e.asked = now
		out = append(out, k.rangeID)
	}
	return out
}

// unask lets the next heartbeat ask again for a replica whose collection
// did not start (an operation held the range).
func (g *replicaGC) unask(server string, id uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.m[staleKey{server, id}]; e != nil {
		e.asked = time.Time{}
	}
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
		s.replicaGC.unask(server, id) // an operation runs on the range: a later heartbeat asks again
		return
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
