package master

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
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
// may hold up a range assigned to its server does not wait for it
// (staleHoldingUp: chaos seeds 10 and 299, a server removed from a range
// by a move just after the range split kept its replica of the parent,
// which covers the split-off range's start, so the server awaited a split
// no leader would send it; the new range ran a voter short until the
// stale parent went, 12 s and 7 s later). The server does not delete it
// itself: that the answer no longer assigns it the range is no proof it
// was removed (the map can lose a live range for a while,
// applyUpdateRanges), and such a replica may be a voter.
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
	// urgent: it may hold up a range assigned to its server
	// (staleHoldingUp); collected without the grace.
	urgent bool
	// gen is the replica's generation in its last report (0 before
	// one), askedGen gen when it was last asked for. A refusal stands
	// for the replica as it was: one reported since at another
	// generation is asked for again without waiting out staleRetry. A
	// span of a group the server is still a member of is refused (it
	// cannot go alone); once that group applies the span's detach
	// there, the replica is a stale group of its own, which the next
	// ask deletes (an anchor group's span cut off across its detach,
	// a split and a move: the split-off range waited up to staleRetry).
	gen, askedGen uint64
}

// replicaGC decides when to collect a stale replica; it does no I/O.
type replicaGC struct {
	mu sync.Mutex
	m  map[staleKey]*staleEntry
}

func newReplicaGC() *replicaGC { return &replicaGC{m: map[staleKey]*staleEntry{}} }

// observe records that server reported a stale replica of range id, of
// generation gen, at now.
func (g *replicaGC) observe(server string, id, gen uint64, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := staleKey{server, id}
	if e := g.m[k]; e != nil {
		e.last, e.gen = now, gen
		return
	}
	g.m[k] = &staleEntry{first: now, last: now, gen: gen}
}

// expedite records that server hosts a replica of range id that the map
// shows removed from it while it waits for an assigned range
// (staleHoldingUp): it is collected at the server's next due, without the
// grace.
func (g *replicaGC) expedite(server string, id uint64, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := staleKey{server, id}
	e := g.m[k]
	if e == nil {
		e = &staleEntry{first: now}
		g.m[k] = e
	}
	e.last, e.urgent = now, true
}

// due returns server's stale replicas whose grace is over and that were
// not asked for within staleRetry (or were, and have been reported at
// another generation since), marking them asked. Heartbeats carry
// only what changed, so a stale replica is reported once and then only in
// the full report every --full-report-interval: due lets every heartbeat
// of the server collect it, from the master's view of what it hosts.
func (g *replicaGC) due(server string, now time.Time) []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []uint64
	for k, e := range g.m {
		if k.server != server || (!e.urgent && now.Sub(e.first) < staleGrace) || (!e.asked.IsZero() && now.Sub(e.asked) < staleRetry && e.gen == e.askedGen) {
			continue
		}
		e.asked, e.askedGen = now, e.gen
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

// staleHoldingUp returns the replicas server hosts (its reports' view)
// that may hold up a range assigned to it: see holdingUp.
func (s *Server) staleHoldingUp(server string) []uint64 {
	hosted := s.reports.hostedIDs(server)
	if len(hosted) == 0 {
		return nil
	}
	var out []uint64
	s.fsm.read(func(st *state) { out = holdingUp(server, hosted, st) })
	return out
}

// holdingUp returns the ranges of hosted (what server reports hosting)
// whose descriptor in the map does not list server, the positive proof
// replica GC collects on (a later generation of the range removed the
// server; collectStale checks it again under the range's claim and deletes
// only below that generation), when server is assigned a range of the
// same table at a generation above 1 that it does not host. Such a replica
// may cover that range's start, and the server then awaits a split its
// replica, outside the range's configuration, never gets. A range absent
// from the map is never returned: absence proves nothing (applyUpdateRanges
// may have dropped a live range for a while).
func holdingUp(server string, hosted map[uint64]bool, st *state) []uint64 {
	var stale []uint64
	tables := map[uint64]bool{}
	for id := range hosted {
		d, ok := st.ranges[id]
		if ok && !hasReplica(d, server) {
			stale = append(stale, id)
			tables[d.GetTableId()] = true
		}
	}
	if len(stale) == 0 {
		return nil
	}
	waiting := map[uint64]bool{}
	for tid := range tables {
		for id := range st.tableRanges[tid] {
			if d := st.ranges[id]; d != nil && d.GetGeneration() > 1 && !hosted[id] && hasReplica(d, server) {
				waiting[tid] = true
				break
			}
		}
	}
	out := stale[:0]
	for _, id := range stale {
		if waiting[st.ranges[id].GetTableId()] {
			out = append(out, id)
		}
	}
	return out
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
	if s.reports.configLists(id, server, d.GetGeneration(), time.Now()) {
		// The leader counts the server in: the descriptor is behind the
		// configuration (the replica-set check records it), and the
		// replica, older than the descriptor's generation, would pass
		// the server's guard although it is a member, maybe a voter.
		// Asked again after staleRetry; forgotten once the map lists it.
		s.logger.Warn("not deleting a replica the map shows removed: its range's leader counts it in", "server", server, "range", id, "generation", d.GetGeneration())
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if err := s.deleteReplica(ctx, server, id, d); err != nil {
		if retrySoon(err) {
			s.replicaGC.unask(server, id)
		}
		s.logger.Warn("deleting a stale replica failed", "server", server, "range", id, "err", err)
		return
	}
	staleReplicasCollectedTotal.Inc()
	s.logger.Info("deleted a replica its range had removed from the server", "server", server, "range", id, "generation", d.GetGeneration())
}

// retrySoon reports whether a failed collection is asked for again at the
// server's next heartbeat rather than staleRetry (30 s) later: when the
// master could not reach the server. Its heartbeats reach the master, so
// the connection is coming back: a restarted server's first heartbeat
// expedites its stale replica, and the master's pooled connection to it,
// still failing from the outage, answers the delete at once (chaos seed
// 221: the replica went 30 s later, and its range ran a voter short
// through two faults, 4.4 s without writes). A refusal by the server (a
// merge pending, a late delete) keeps the 30 s.
func retrySoon(err error) bool {
	switch rpcerr.Parse(err).Code {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}
