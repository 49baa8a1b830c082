package router

import (
	"sync/atomic"
	"time"

	"tablestore/internal/health"
)

// watchState tracks the partition-map watch for readiness.
type watchState struct {
	installed atomic.Bool  // a map has been installed
	watching  atomic.Bool  // a watch stream to a master is delivering maps
	lostAt    atomic.Int64 // unix nanos since when no stream delivers (start or break)
}

// healthFacts is what a front-end's readiness depends on.
type healthFacts struct {
	HasMap   bool
	Watching bool
	// Disconnected is how long no master has streamed the map.
	Disconnected time.Duration
	// Grace is how long a lost watch is tolerated (a master failover
	// takes an election; the cached map keeps serving meanwhile).
	Grace time.Duration
}

// readiness is the front-end's rule: ready with a partition map that a
// master keeps current, or one that went without updates for less than the
// grace period.
func readiness(f healthFacts) health.Verdict {
	var v health.Verdict
	if !f.HasMap {
		v.Notf("no partition map yet")
	}
	if !f.Watching && f.Disconnected > f.Grace {
		v.Notf("no master reachable for %v (partition map may be stale)", f.Disconnected.Round(time.Second))
	}
	return v
}

// watchGrace bounds how long a front-end without a master stays ready.
const watchGrace = 15 * time.Second

// Ready reports whether this front-end can route requests (for /readyz).
func (r *Router) Ready() health.Verdict {
	f := healthFacts{HasMap: r.watch.installed.Load(), Watching: r.watch.watching.Load(), Grace: watchGrace}
	if !f.Watching {
		f.Disconnected = time.Since(time.Unix(0, r.watch.lostAt.Load()))
	}
	return readiness(f)
}

// MapStaleFor is how long the partition map has gone without a master's
// updates: 0 while a watch stream delivers them (a stream whose master
// sends keepalives counts as lost after watchSilence without one). The
// front-end bounds what it takes from the map alone by it (stored access
// policies).
func (r *Router) MapStaleFor() time.Duration {
	if r.watch.watching.Load() {
		return 0
	}
	return time.Since(time.Unix(0, r.watch.lostAt.Load()))
}
