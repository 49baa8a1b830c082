package master

import "time"

// serverUp is the master's one rule for whether a partition server is up:
// this master heard from it (heard) less than timeout ago (silent is the
// time since). A server not heard from is not up. A master that takes the
// lead counts every registered server as heard at that moment
// (reports.greet), so a new leader sees no server down before it had a
// full timeout to hear from it. Every decision that asks whether a server
// is up (placement, draining, removal, the replica-set check, the
// scheduler's snapshot, the map's alive flags, server up/down events and
// gauges) asks this. Pure.
func serverUp(heard bool, silent, timeout time.Duration) bool {
	return heard && silent < timeout
}

// upAt is serverUp for server id by seen, the heard times
// (reports.seen or reports.lastSeen), as of now.
func (s *Server) upAt(seen map[string]time.Time, id string, now time.Time) bool {
	t, ok := seen[id]
	return serverUp(ok, now.Sub(t), s.cfg.ServerTimeout)
}
