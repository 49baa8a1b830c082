package master

import (
	"math"
	"sync"
	"time"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// reports is the soft state the leading master rebuilds from heartbeats:
// when each server was last heard from, which server leads each range, the
// leaders' load reports and their trends, and what every server says about
// each replica it hosts. It is not replicated: a new leader learns it anew.
type reports struct {
	mu       sync.Mutex
	lastSeen map[string]time.Time
	leaders  map[uint64]string
	loads    map[uint64]*pb.RangeLoad
	trends   map[uint64]*rangeTrend
	frozen   map[uint64]bool
	// hosted is, per server, the ranges its last heartbeat reported with
	// their applied index: a follower's progress, and whether it has the
	// replica at all.
	hosted map[string]map[uint64]uint64
	// voters is, per range, its leader's last report of the voters of its
	// Raft configuration (the replica-set check, reconcile.go).
	voters map[uint64]voterReport
	// changedLeaders are the ranges whose leader changed since the last
	// takeChangedLeaders (for the partition map's deltas).
	changedLeaders map[uint64]struct{}
}

// rangeTrend is the scheduler's trend of a range plus when its throttling
// was last recorded as an event.
type rangeTrend struct {
	scheduler.Trend
	lastThrottleEvent time.Time
	// eps is the leaders' entities/s smoothed over about loadSmoothing,
	// kept per range across leader changes: what the balancing policies
	// see. One report covers half a second; on a busy host a window in
	// which a server served nothing moved leaders back and forth.
	eps   float64
	epsAt time.Time
}

// loadSmoothing is the time constant of a range's smoothed load.
const loadSmoothing = 2 * time.Second

// smooth folds one report's entities/s taken at now into t.eps.
func (t *rangeTrend) smooth(v float64, now time.Time) {
	if t.epsAt.IsZero() {
		t.eps = v
	} else if dt := now.Sub(t.epsAt); dt > 0 {
		t.eps += (1 - math.Exp(-dt.Seconds()/loadSmoothing.Seconds())) * (v - t.eps)
	}
	t.epsAt = now
}

func newReports() *reports {
	return &reports{
		lastSeen: map[string]time.Time{}, leaders: map[uint64]string{}, loads: map[uint64]*pb.RangeLoad{},
		trends: map[uint64]*rangeTrend{}, frozen: map[uint64]bool{}, hosted: map[string]map[uint64]uint64{},
		voters:         map[uint64]voterReport{},
		changedLeaders: map[uint64]struct{}{},
	}
}

// heartbeat folds one server's report in. It returns whether a range's
// leader changed, and the reports of ranges throttled since their last
// throttle event over 10 s ago.
func (r *reports) heartbeat(cfg scheduler.Config, server string, ranges []*pb.RangeStatus, now time.Time) (changed bool, throttled []*pb.RangeStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastSeen[server] = now
	hosted := make(map[uint64]uint64, len(ranges))
	for _, rs := range ranges {
		id := rs.GetRangeId()
		hosted[id] = rs.GetAppliedIndex()
		r.frozen[id] = rs.GetFrozen()
		if !rs.GetLeader() {
			if r.leaders[id] == server {
				delete(r.leaders, id)
				r.changedLeaders[id] = struct{}{}
				changed = true
			}
			continue
		}
		if r.leaders[id] != server {
			changed = true
			r.changedLeaders[id] = struct{}{}
		}
		r.leaders[id] = server
		r.loads[id] = rs.GetLoad()
		if len(rs.GetVoters()) > 0 {
			r.voters[id] = voterReport{server: server, generation: rs.GetGeneration(), voters: rs.GetVoters(), at: now}
		}
		t := r.trend(id)
		t.Observe(cfg, rs.GetLoad().GetEntitiesPerSec(), now)
		t.smooth(rs.GetLoad().GetEntitiesPerSec(), now)
		if rs.GetLoad().GetThrottledPerSec() > 0 && now.Sub(t.lastThrottleEvent) > 10*time.Second {
			t.lastThrottleEvent = now
			throttled = append(throttled, rs)
		}
	}
	r.hosted[server] = hosted
	return changed, throttled
}

func (r *reports) trend(id uint64) *rangeTrend {
	t := r.trends[id]
	if t == nil {
		t = &rangeTrend{}
		r.trends[id] = t
	}
	return t
}

func (r *reports) leaderOf(id uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leaders[id]
}

// setLeader records server as id's leader and reports whether that changed.
func (r *reports) setLeader(id uint64, server string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := r.leaders[id] != server
	r.leaders[id] = server
	if changed {
		r.changedLeaders[id] = struct{}{}
	}
	return changed
}

// splitOff restarts the smoothed load of range id, which a split just cut
// in two: the left half keeps the id, and folding its reports into the old
// range's average made it look as loaded as the whole range for seconds
// after the split (to the balancing policies). Its next report is taken as
// it is. The split window is the scheduler's (Plan.hotFor).
func (r *reports) splitOff(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.trends[id]; t != nil {
		t.epsAt = time.Time{}
	}
}

// forget drops what is known of a range that no longer exists.
func (r *reports) forget(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.leaders[id]; ok {
		r.changedLeaders[id] = struct{}{}
	}
	delete(r.leaders, id)
	delete(r.loads, id)
	delete(r.frozen, id)
	delete(r.trends, id)
	delete(r.voters, id)
}

// seen returns a copy of the last heartbeat times.
func (r *reports) seen() map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]time.Time, len(r.lastSeen))
	for k, v := range r.lastSeen {
		out[k] = v
	}
	return out
}

// greet gives servers this master has not heard from a full timeout from
// now (a new leader learns liveness afresh).
func (r *reports) greet(servers []string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range servers {
		if _, ok := r.lastSeen[id]; !ok {
			r.lastSeen[id] = now
		}
	}
}

// frozenRanges returns the ranges reported frozen.
func (r *reports) frozenRanges() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for id, f := range r.frozen {
		if f {
			out = append(out, id)
		}
	}
	return out
}

// unfreeze forgets that a range was frozen (it is gone).
func (r *reports) unfreeze(id uint64) {
	r.mu.Lock()
	delete(r.frozen, id)
	r.mu.Unlock()
}

// maps returns copies of the leaders and loads.
func (r *reports) maps() (map[uint64]string, map[uint64]*pb.RangeLoad) {
	r.mu.Lock()
	defer r.mu.Unlock()
	leaders := make(map[uint64]string, len(r.leaders))
	for id, l := range r.leaders {
		leaders[id] = l
	}
	loads := make(map[uint64]*pb.RangeLoad, len(r.loads))
	for id, l := range r.loads {
		loads[id] = l
	}
	return leaders, loads
}

// takeChangedLeaders returns and clears the ranges whose leader changed.
func (r *reports) takeChangedLeaders() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.changedLeaders) == 0 {
		return nil
	}
	out := make([]uint64, 0, len(r.changedLeaders))
	for id := range r.changedLeaders {
		out = append(out, id)
	}
	clear(r.changedLeaders)
	return out
}
