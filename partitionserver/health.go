package partitionserver

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"tablestore/internal/health"
)

// healthState is what the server remembers for readiness between probes.
type healthState struct {
	lastHeartbeat atomic.Int64    // unix nanos of the last heartbeat the master accepted
	caughtUp      atomic.Bool     // every replica opened at start has caught up once
	startup       map[uint64]bool // ranges reopened by Start; read-only after it
	failing       atomic.Bool     // heartbeats fail; warned once per outage
}

// heartbeatFailed warns once per outage (a server waits for its masters
// rather than exiting: masters may start later), naming the flag to check.
func (s *Server) heartbeatFailed(err error) {
	if s.health.failing.CompareAndSwap(false, true) {
		s.logger.Warn("no master reachable, retrying; check --masters", "masters", strings.Join(s.cfg.Masters, ","), "err", err)
		return
	}
	s.logger.Debug("heartbeat failed", "err", err)
}

func (s *Server) heartbeatAccepted() {
	s.health.lastHeartbeat.Store(time.Now().UnixNano())
	if s.health.failing.Swap(false) {
		s.logger.Info("master reachable again")
	}
}

// replicaFacts is one replica's progress as Raft reports it.
type replicaFacts struct {
	Range       uint64
	LeaderKnown bool
	Applied     uint64
	Commit      uint64
}

// healthFacts is what a partition server's readiness depends on.
type healthFacts struct {
	Started bool
	// SinceHeartbeat is the time since the master last accepted a
	// heartbeat (negative: never).
	SinceHeartbeat time.Duration
	// RegisteredWithin is how recent that heartbeat must be.
	RegisteredWithin time.Duration
	// CaughtUpOnce: the replicas opened at start have caught up before, so
	// later lag (a group that lost its quorum) does not make this server
	// unready: requests to it still work for every other range.
	CaughtUpOnce bool
	Replicas     []replicaFacts
}

// readiness is the partition server's rule: ready once the master has
// accepted its heartbeat recently (it is registered and placeable) and the
// replicas it reopened have applied their logs (each knows its group's
// leader and has applied everything committed).
func readiness(f healthFacts) (v health.Verdict, caughtUp bool) {
	if !f.Started {
		v.Notf("not started")
		return v, false
	}
	switch {
	case f.SinceHeartbeat < 0:
		v.Notf("not registered with a master yet")
	case f.SinceHeartbeat > f.RegisteredWithin:
		v.Notf("no heartbeat accepted by a master for %v", f.SinceHeartbeat.Round(time.Second))
	}
	if f.CaughtUpOnce {
		return v, true
	}
	lagging := 0
	var first string
	for _, r := range f.Replicas {
		if !r.LeaderKnown || r.Applied < r.Commit {
			if lagging == 0 {
				first = rangeLag(r)
			}
			lagging++
		}
	}
	if lagging > 0 {
		v.Notf("%d of %d replicas catching up (e.g. %s)", lagging, len(f.Replicas), first)
		return v, false
	}
	return v, true
}

func rangeLag(r replicaFacts) string {
	if !r.LeaderKnown {
		return fmt.Sprintf("range %d has no known leader", r.Range)
	}
	return fmt.Sprintf("range %d applied %d of %d", r.Range, r.Applied, r.Commit)
}

// Ready reports whether this server is ready to serve (for /readyz).
func (s *Server) Ready() health.Verdict {
	f := healthFacts{Started: s.started.Load(), SinceHeartbeat: -1, CaughtUpOnce: s.health.caughtUp.Load(),
		RegisteredWithin: 3*s.cfg.HeartbeatInterval + 5*time.Second}
	if !f.Started {
		v, _ := readiness(f)
		return v
	}
	if hb := s.health.lastHeartbeat.Load(); hb != 0 {
		f.SinceHeartbeat = time.Since(time.Unix(0, hb))
	}
	if !f.CaughtUpOnce {
		for _, sl := range s.slotList() {
			id := sl.id
			// A quiet replica is as caught up as it will be until used.
			r := sl.open()
			if r == nil || !s.health.startup[id] {
				continue
			}
			addr, _ := r.raft.LeaderWithID()
			f.Replicas = append(f.Replicas, replicaFacts{Range: id, LeaderKnown: addr != "",
				Applied: r.raft.AppliedIndex(), Commit: r.raft.CommitIndex()})
		}
	}
	v, caughtUp := readiness(f)
	if caughtUp {
		s.health.caughtUp.Store(true)
	}
	return v
}
