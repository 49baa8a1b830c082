package master

import (
	"maps"
	"math"
	"slices"
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
	// greeted is the last term of this master's lead greetTerm greeted,
	// greetedIDs the servers it greeted in it.
	greeted    uint64
	greetedIDs map[string]bool
	// back is, per server, when it last came back: its first heartbeat of
	// a new incarnation (a restart) or after a silence of awayAfter or
	// more (paused, cut off); the scheduler gives it no leadership for a
	// while (scheduler.Config.LeaderSettle).
	back    map[string]time.Time
	leaders map[uint64]string
	loads   map[uint64]*pb.RangeLoad
	trends  map[uint64]*rangeTrend
	// frozen is, per range, the log index of the freeze the reports and
	// the leaders' answers last showed (observeFreeze); thawed the highest
	// applied index at which a replica was seen unfrozen. A freeze is
	// forgotten only on proof that it was undone, never on a report from
	// a replica that has not applied it yet.
	frozen map[uint64]uint64
	thawed map[uint64]uint64
	// freezeGen is, per range, the highest descriptor generation the
	// accounts of its freeze showed: the indexes above are of the log
	// that generation's descriptor names, and a range changes logs with
	// its descriptor (a detach starts a group of its own, an attach makes
	// it a span of a shared group's log).
	freezeGen map[uint64]uint64
	// mergeAbort is, per server, whether its last heartbeat said it
	// applies unfreezes (HeartbeatRequest.merge_abort).
	mergeAbort map[string]bool
	// tableGroups is, per server, whether its last heartbeat said it
	// applies ADD_SPAN (HeartbeatRequest.table_groups).
	tableGroups map[string]bool
	// attachSpans is, per server, whether its last heartbeat said it
	// applies ATTACH_SPAN and serves AttachSpan
	// (HeartbeatRequest.attach_spans; docs/range-groups.md, stage 8).
	attachSpans map[string]bool
	// hosted is, per server, the ranges its last heartbeat reported with
	// their applied index: a follower's progress, and whether it has the
	// replica at all.
	hosted map[string]map[uint64]uint64
	// broken is, per server, the ranges its reports show a broken replica
	// of (lifecycle "broken": its open found its files damaged). The scheduler
	// replaces such a replica as it does one on a down server.
	broken map[string]map[uint64]bool
	// replaced is, per server, the ranges whose broken replica there an
	// in-place replacement removed, with the generation of that removal
	// (replacedInPlace). A heartbeat the server built before the delete
	// can be folded in after it: its "broken" of the old replica, below
	// that generation, is not taken (a second in-place replacement would
	// remove the new, healthy voter). The new replica reports the
	// removal's generation or later.
	replaced map[string]map[uint64]uint64
	// voters is, per range, its leader's last report of the voters of its
	// Raft configuration (the replica-set check, reconcile.go).
	voters map[uint64]voterReport
	// changedLeaders are the ranges whose leader changed since the last
	// takeChangedLeaders (for the partition map's deltas).
	changedLeaders map[uint64]struct{}
	// sessions is, per server, its report session (accept).
	sessions map[string]*reportSession
	// folding serialises, per server, a heartbeat's accept with its fold
	// (serverTurn).
	folding map[string]*sync.Mutex
	// disk is, per server, the slow-disk state its heartbeats' disk
	// reports decided (slowdisk.go).
	disk map[string]diskState
	// space is, per server, the disk space its last heartbeat reported
	// (absent: none; diskspace.go).
	space map[string]*pb.DiskSpace
	// clocks is, per server, its clock measurement (observeClock), and
	// skewed the clock verdict its last answer carried (clockskew.go).
	clocks map[string]clockSample
	skewed map[string]bool
	// tables is, per range reported, its table: pruneDropped forgets the
	// ranges of dropped tables, which nothing else would (a dropped
	// table's replicas report, leaders among them, until their servers
	// delete them, and their load reports carry hot keys and samples).
	tables map[uint64]uint64
	// gen counts changes to what the reports say of ranges (a report
	// taken with ranges in it, a leader set or forgotten): the replica
	// check skips a tick when it and the catalog did not change.
	gen uint64
}

// reportSession is what the master knows of one server's reports. A
// server reports every replica in a full report and, between full ones,
// only the replicas whose report changed: the view built from a full
// report and the deltas after it is complete, and every report in it
// stands as of the server's last heartbeat.
type reportSession struct {
	incarnation, seq uint64
	// since is when the full report the view is built on came; zero when
	// this master holds no complete view (deltas are refused and a full
	// report asked for).
	since time.Time
	// refresh asks the server for a full report with its next answer: a
	// range it hosts lost its recorded leader, and its leader's report,
	// unchanged since acknowledged, would not come before the next
	// periodic full report.
	refresh bool
}

// reportIsFull: a request that carries no incarnation is from a server
// that reports every replica every time.
func reportIsFull(req *pb.HeartbeatRequest) bool {
	return req.GetFull() || req.GetIncarnation() == 0
}

// accept decides what to do with a heartbeat and records the server's
// liveness. take: fold its ranges in. wantFull: the master has no
// complete view to fold a delta into (it just took the lead, or the
// server restarted); the delta is dropped and a full report asked for.
// A delta is also answered wantFull, though taken, when a range the
// server hosts lost its recorded leader (leaderLost).
// A report older than one taken (a retried heartbeat's late original) is
// not taken. span is the time since the server's previous heartbeat: what
// one report's rates cover.
func (r *reports) accept(server string, req *pb.HeartbeatRequest, now time.Time) (take, wantFull bool, span time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ss := r.sessions[server]
	restarted := ss != nil && ss.incarnation != req.GetIncarnation()
	if ss == nil || ss.incarnation != req.GetIncarnation() {
		ss = &reportSession{incarnation: req.GetIncarnation()}
		r.sessions[server] = ss
	}
	if req.GetIncarnation() != 0 {
		if req.GetSeq() <= ss.seq {
			return false, false, 0
		}
		ss.seq = req.GetSeq()
	}
	if prev, ok := r.lastSeen[server]; ok {
		span = now.Sub(prev)
	}
	if restarted || span >= awayAfter {
		r.back[server] = now
	}
	r.lastSeen[server] = now
	if reportIsFull(req) {
		ss.since, ss.refresh = now, false
		return true, false, span
	}
	if ss.since.IsZero() {
		return false, true, span
	}
	if ss.refresh {
		// The delta is taken; the full report follows at once.
		ss.refresh = false
		return true, true, span
	}
	return true, false, span
}

// leaderLost asks every other server that reported hosting range id for a
// full report (reportSession.refresh). Called with r.mu held.
func (r *reports) leaderLost(id uint64, reporter string) {
	for server, hosted := range r.hosted {
		if _, ok := hosted[id]; ok && server != reporter {
			if ss := r.sessions[server]; ss != nil {
				ss.refresh = true
			}
		}
	}
}

// reportedAt is when a report from server recorded at `at` last held: a
// report of the server's current session stands until its last
// heartbeat. Called with r.mu held.
func (r *reports) reportedAt(server string, at time.Time) time.Time {
	if ss := r.sessions[server]; ss != nil && !ss.since.IsZero() && !at.Before(ss.since) {
		return r.lastSeen[server]
	}
	return at
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
	// last is the last report's entities/s: a delta leaves out an idle
	// range whose last report was idle, so until the next report the
	// range's load stays last.
	last float64
}

// loadSmoothing is the time constant of a range's smoothed load.
const loadSmoothing = 2 * time.Second

// smooth folds one report's entities/s taken at now, covering span
// before it, into t.eps. The time before the span, since the last report
// folded in, had the last report's load (the reports between were left
// out as unchanged).
func (t *rangeTrend) smooth(v float64, span time.Duration, now time.Time) {
	if t.epsAt.IsZero() {
		t.eps = v
	} else {
		if from := now.Add(-span); span > 0 && from.After(t.epsAt) {
			t.eps, t.epsAt = t.at(from), from
		}
		t.eps = t.toward(v, now)
	}
	t.epsAt, t.last = now, v
}

// at is the smoothed load as of now: the reports left out since the last
// one repeated it.
func (t *rangeTrend) at(now time.Time) float64 {
	if t.epsAt.IsZero() {
		return t.eps
	}
	return t.toward(t.last, now)
}

// toward is t.eps moved toward v for the time from t.epsAt to now.
func (t *rangeTrend) toward(v float64, now time.Time) float64 {
	dt := now.Sub(t.epsAt)
	if dt <= 0 {
		return t.eps
	}
	return t.eps + (1-math.Exp(-dt.Seconds()/loadSmoothing.Seconds()))*(v-t.eps)
}

// awayAfter is the silence after which a server's next heartbeat counts as
// its return (reports.back): four of its default 500 ms intervals.
const awayAfter = 2 * time.Second

func newReports() *reports {
	return &reports{
		lastSeen: map[string]time.Time{}, back: map[string]time.Time{}, leaders: map[uint64]string{}, loads: map[uint64]*pb.RangeLoad{},
		trends: map[uint64]*rangeTrend{}, frozen: map[uint64]uint64{}, thawed: map[uint64]uint64{}, freezeGen: map[uint64]uint64{},
		mergeAbort: map[string]bool{}, tableGroups: map[string]bool{}, attachSpans: map[string]bool{}, hosted: map[string]map[uint64]uint64{}, broken: map[string]map[uint64]bool{},
		replaced:       map[string]map[uint64]uint64{},
		voters:         map[uint64]voterReport{},
		changedLeaders: map[uint64]struct{}{},
		sessions:       map[string]*reportSession{},
		folding:        map[string]*sync.Mutex{},
		disk:           map[string]diskState{},
		space:          map[string]*pb.DiskSpace{},
		tables:         map[uint64]uint64{},
	}
}

// serverTurn takes server's turn to have a heartbeat accepted and folded
// in; the returned func gives it back. accept drops a report older than
// one taken, but a retried heartbeat and its slow original can both pass
// it and fold in the other order: the older report would then stand
// until the next full one, since the server's acknowledged state is the
// newer.
func (r *reports) serverTurn(server string) (done func()) {
	r.mu.Lock()
	m := r.folding[server]
	if m == nil {
		m = &sync.Mutex{}
		r.folding[server] = m
	}
	r.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// heartbeat folds one server's report in (accept took it): a full one
// replaces what the server hosts, a delta changes it. It returns whether
// a range's leader changed, and the reports of ranges throttled since
// their last throttle event over 10 s ago.
func (r *reports) heartbeat(cfg scheduler.Config, server string, ranges []*pb.RangeStatus, removed []uint64, full bool, span time.Duration, now time.Time) (changed bool, throttled []*pb.RangeStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if full || len(ranges) > 0 || len(removed) > 0 {
		r.gen++
	}
	r.foldHosted(server, ranges, removed, full)
	for _, rs := range ranges {
		id := rs.GetRangeId()
		if rs.GetRange() != nil {
			r.tables[id] = rs.GetRange().GetTableId()
		}
		r.observeFreezeLocked(id, rs.GetGeneration(), rs.GetFrozen(), rs.GetFrozenIndex(), rs.GetAppliedIndex())
		if !rs.GetLeader() {
			if r.leaders[id] == server {
				// Its new leader (say, the target of a transfer whose
				// old leader's late report was taken after it) may have
				// reported already and stay silent while nothing changes.
				delete(r.leaders, id)
				r.changedLeaders[id] = struct{}{}
				changed = true
				r.leaderLost(id, server)
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
			r.voters[id] = voterReport{server: server, generation: rs.GetGeneration(), voters: rs.GetVoters(), nonvoters: rs.GetNonvoters(), at: now}
		}
		t := r.trend(id)
		t.Observe(cfg, rs.GetLoad().GetEntitiesPerSec(), now)
		t.smooth(rs.GetLoad().GetEntitiesPerSec(), span, now)
		if rs.GetLoad().GetThrottledPerSec() > 0 && now.Sub(t.lastThrottleEvent) > 10*time.Second {
			t.lastThrottleEvent = now
			throttled = append(throttled, rs)
		}
	}
	return changed, throttled
}

// brokenLifecycle is the lifecycle a partition server reports for a
// replica whose open found its files damaged (partitionserver/lifecycle's
// Broken).
const brokenLifecycle = "broken"

// foldHosted folds a report's replicas into hosted and broken (r.mu
// held).
func (r *reports) foldHosted(server string, ranges []*pb.RangeStatus, removed []uint64, full bool) {
	hosted, broken := r.hosted[server], r.broken[server]
	if full || hosted == nil {
		hosted = make(map[uint64]uint64, len(ranges))
		r.hosted[server] = hosted
	}
	if full || broken == nil {
		broken = map[uint64]bool{}
		r.broken[server] = broken
	}
	for _, id := range removed {
		delete(hosted, id)
		delete(broken, id)
	}
	for _, rs := range ranges {
		id := rs.GetRangeId()
		hosted[id] = rs.GetAppliedIndex()
		if rs.GetLifecycle() == brokenLifecycle && rs.GetGeneration() >= r.replaced[server][id] {
			broken[id] = true
		} else {
			delete(broken, id)
		}
	}
}

// replacedInPlace records that an in-place replacement removed server's
// broken replica of range id at generation and deleted it: the mark is
// cleared now (the next heartbeat would clear it, but the policy tick
// comes first and would replace the range in place again, removing the
// new voter), and reports of the old replica (below generation) are no
// longer taken as broken.
func (r *reports) replacedInPlace(server string, id, generation uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.broken[server], id)
	if r.replaced[server] == nil {
		r.replaced[server] = map[uint64]uint64{}
	}
	r.replaced[server][id] = max(r.replaced[server][id], generation)
	r.gen++
}

// isBroken reports whether server's reports show its replica of range id
// broken (r.mu held).
func (r *reports) isBroken(server string, id uint64) bool { return r.broken[server][id] }

// brokenOn is isBroken, taking r.mu.
func (r *reports) brokenOn(server string, id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.isBroken(server, id)
}

// brokenReplicas returns, per range, the servers whose replica of it
// their reports show broken.
func (r *reports) brokenReplicas() map[uint64]map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[uint64]map[string]bool{}
	for server, ids := range r.broken {
		for id := range ids {
			if out[id] == nil {
				out[id] = map[string]bool{}
			}
			out[id][server] = true
		}
	}
	return out
}

func (r *reports) trend(id uint64) *rangeTrend {
	t := r.trends[id]
	if t == nil {
		t = &rangeTrend{}
		r.trends[id] = t
	}
	return t
}

// hostsReplica reports whether server's reports (its last full report and
// the deltas since) show a replica of range id.
func (r *reports) hostsReplica(server string, id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.hosted[server][id]
	return ok
}

// voterReportFresh is how long a leader's report of its Raft
// configuration stands after it last held (reportedAt).
const voterReportFresh = 3 * time.Second

// configLists reports whether range id's leader, in a report that still
// stands (voterReportFresh) and is of generation gen or later, counted
// server in its Raft configuration, as a voter or a non-voter: the
// descriptor in the map can be behind the configuration (a change whose
// record a failover cut off), and then a replica the map shows removed is
// a member. Replica GC does not delete such a replica (collectStale). A
// report of an earlier generation predates the change the map recorded.
func (r *reports) configLists(id uint64, server string, gen uint64, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.voters[id]
	if !ok || v.generation < gen || now.Sub(r.reportedAt(v.server, v.at)) >= voterReportFresh {
		return false
	}
	return slices.Contains(v.voters, server) || slices.Contains(v.nonvoters, server)
}

// lastVoters returns the voters range id's leader last reported, however
// old (nil: none held): a configuration the descriptor may not show yet.
func (r *reports) lastVoters(id uint64) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.voters[id].voters)
}

// hostedIDs returns the ranges server's reports show a replica of.
func (r *reports) hostedIDs(server string) map[uint64]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[uint64]bool, len(r.hosted[server]))
	for id := range r.hosted[server] {
		out[id] = true
	}
	return out
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
		r.gen++
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
	r.gen++
	delete(r.leaders, id)
	delete(r.loads, id)
	delete(r.frozen, id)
	delete(r.thawed, id)
	delete(r.freezeGen, id)
	delete(r.trends, id)
	delete(r.voters, id)
	delete(r.tables, id)
	for _, ids := range r.replaced {
		delete(ids, id)
	}
}

// reportPruneEvery is how often the leader forgets the reports of
// dropped tables' ranges (pruneDropped).
const reportPruneEvery = 10 * time.Second

// pruneDropped forgets what is known of the ranges of tables that live
// says are no longer live (table ids are never reused), and returns how
// many. It is O(ranges reported): policyLoop calls it every
// reportPruneEvery. Ranges of live tables stay, in the map or not: the map can lose a
// live range for a while (applyUpdateRanges), and a freeze is forgotten
// only on proof. Without it the leaders, loads, trends, voters and
// thawed indexes of every range of every dropped table stayed for the
// master's lifetime.
func (r *reports) pruneDropped(live func(table uint64) bool) int {
	r.mu.Lock()
	tables := maps.Clone(r.tables)
	r.mu.Unlock()
	// live is asked without r.mu: it reads the catalog.
	var gone []uint64
	for id, t := range tables {
		if !live(t) {
			gone = append(gone, id)
		}
	}
	for _, id := range gone {
		r.forget(id)
	}
	return len(gone)
}

// forgetServer drops what the reports hold of a server removed from the
// registry.
func (r *reports) forgetServer(server string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.lastSeen, server)
	delete(r.back, server)
	delete(r.mergeAbort, server)
	delete(r.tableGroups, server)
	delete(r.attachSpans, server)
	delete(r.hosted, server)
	delete(r.broken, server)
	delete(r.replaced, server)
	delete(r.sessions, server)
	delete(r.disk, server)
	delete(r.space, server)
	delete(r.clocks, server)
	delete(r.skewed, server)
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

// greet gives every server a full timeout from now: a new leader learns
// liveness afresh. Also a server this master heard from in an earlier term
// of its own: heartbeats went to another leader since, so its last-seen
// time here says nothing (kept, a master that regained the lead after 30 s
// saw every server down that long, planned re-replication off live ones,
// and took each first heartbeat for a return, barring leadership for
// LeaderSettle).
func (r *reports) greet(servers []string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.greetLocked(servers, now)
}

// greetTerm is greet once per server and term of this master's lead, by
// whichever comes first: its first request served (ready, after the
// term's barrier) or its liveness loop's first tick (before it: a server
// the loop's read of the map lacked is greeted by ready). A server greeted
// already in term keeps what it was heard since. An older term is
// ignored.
func (r *reports) greetTerm(term uint64, servers []string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case term < r.greeted:
		return
	case term > r.greeted:
		r.greeted, r.greetedIDs = term, map[string]bool{}
		r.greetLocked(nil, now)
	}
	for _, id := range servers {
		if !r.greetedIDs[id] {
			r.greetedIDs[id] = true
			r.lastSeen[id] = now
		}
	}
}

func (r *reports) greetLocked(servers []string, now time.Time) {
	for _, id := range servers {
		r.lastSeen[id] = now
	}
	// What the servers reported to this master before it lost the lead
	// missed what they reported to another since: each sends a full
	// report again.
	for _, ss := range r.sessions {
		ss.since = time.Time{}
	}
	// The disks' states stand (review of session 10: greet cleared them,
	// and a master that regained the lead could hand a slow server
	// leaderships until its next report with evidence): that report
	// decides again, and slowDiskExpiry bounds a state from an earlier
	// term that no report confirms.
}

// frozenRanges returns the ranges with a freeze not known undone.
func (r *reports) frozenRanges() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for id := range r.frozen {
		out = append(out, id)
	}
	return out
}

// observeFreeze folds in one replica's account of range id's freeze (a
// heartbeat's report, a leader's answer to FreezeRange or UnfreezeRange):
// frozen at index, or not frozen, at applied, with the range's descriptor
// at generation gen (0: not given). It returns whether the master still
// counts the range frozen.
func (r *reports) observeFreeze(id, gen uint64, frozen bool, index, applied uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	r.observeFreezeLocked(id, gen, frozen, index, applied)
	return r.frozen[id] != 0
}

// observeFreezeLocked is the rule, pure over the two maps. A range's
// freezes are entries of its own log and an unfreeze undoes only the
// freeze at its index, so:
//   - "not frozen at applied a" proves every freeze at or below a undone;
//     a replica that has not applied the recorded freeze yet (a lagging
//     follower, a leader elected a moment ago) proves nothing;
//   - "frozen at f" is news only above both the recorded freeze (an older
//     one comes from a replica that has not applied its unfreeze and the
//     later freeze) and the highest index seen unfrozen.
//
// A server that does not report the index (an older build) reports a
// freeze as index 1: any "not frozen" undoes it, as before the index was
// reported.
//
// The indexes compare only within one log, and a range changes logs with
// its descriptor's generation (a detach, an attach). So an account below
// the highest generation seen (freezeGen) is from a replica that has not
// applied a change of the descriptor yet and proves nothing; the first
// account of a higher generation starts the highest index seen unfrozen
// afresh, keeping the counted freeze (no change of the descriptor runs
// while a range is frozen but an attach, which thawAttached follows).
// Without it, a detached span kept its shared group's applied index as
// thawed, and a freeze in its own new log, at a lower index, was no news:
// a merge or attach that failed after the freeze left the range frozen
// with no resume (resumeMerges) until the next master. gen 0 (an account
// without it) is taken as of the highest generation.
func (r *reports) observeFreezeLocked(id, gen uint64, frozen bool, index, applied uint64) {
	switch seen := r.freezeGen[id]; {
	case gen == 0:
	case gen < seen:
		return
	case gen > seen:
		r.freezeGen[id] = gen
		delete(r.thawed, id)
	}
	if frozen {
		index = max(index, 1)
		if index > r.frozen[id] && index > r.thawed[id] {
			r.frozen[id] = index
		}
		return
	}
	if f, ok := r.frozen[id]; ok && applied >= f {
		delete(r.frozen, id)
	}
	r.thawed[id] = max(r.thawed[id], applied)
}

// frozenAt returns the freeze recorded for range id (0: none).
func (r *reports) frozenAt(id uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.frozen[id]
}

// setMergeAbort records whether server's build applies unfreezes.
func (r *reports) setMergeAbort(server string, ok bool) {
	r.mu.Lock()
	r.mergeAbort[server] = ok
	r.mu.Unlock()
}

// setTableGroups records whether server's build applies ADD_SPAN.
func (r *reports) setTableGroups(server string, ok bool) {
	r.mu.Lock()
	r.tableGroups[server] = ok
	r.mu.Unlock()
}

// canShareGroups reports whether server said, in its last heartbeat to
// this master, that it applies ADD_SPAN (stricter than canAbort: a server
// not heard from since this master took the lead does not count), so a
// group of its may take a new table's span.
func (r *reports) canShareGroups(server string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tableGroups[server]
}

// setAttachSpans records whether server's build applies ATTACH_SPAN.
func (r *reports) setAttachSpans(server string, ok bool) {
	r.mu.Lock()
	r.attachSpans[server] = ok
	r.mu.Unlock()
}

// canAttachSpans reports whether server said, in its last heartbeat to
// this master, that it applies ATTACH_SPAN and serves AttachSpan (as
// canShareGroups: a server not heard from since this master took the
// lead does not count), so a range of its may be attached to a shared
// group, or a shared group of its take one (attach).
func (r *reports) canAttachSpans(server string) bool {
	ok, _ := r.attachSpansSaid(server)
	return ok
}

// attachSpansSaid is canAttachSpans with whether server has said either
// way to this master (said: any heartbeat since it took the lead), for
// GroupTables, which asks again about a server not heard from yet rather
// than skip its ranges for good.
func (r *reports) attachSpansSaid(server string) (ok, said bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok, said = r.attachSpans[server]
	return ok, said
}

// thawAttached forgets range id's freeze once the range is a span of
// the group it was attached to (attach): its freeze was an entry of its
// own group's log, which ended there, and its reports now come from the
// group's log, whose applied indexes say nothing of that freeze. A
// replica that has not applied the attach yet still reports the freeze
// at index: thawed covers it, so the report is no news.
func (r *reports) thawAttached(id, index uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	index = max(index, r.frozen[id])
	delete(r.frozen, id)
	r.thawed[id] = max(r.thawed[id], index)
}

// canAbort reports whether a merge of a range on servers may be aborted:
// no one of them said in its last heartbeat to this master that it does
// not apply unfreezes (an older build, merge_abort false), and a majority
// said it does. A server not heard from since this master took the lead
// does not hold the abort up (one that died right after the freeze would
// otherwise keep the range frozen after a master failover until it came
// back, or for good), as long as a majority of the range's servers are
// known to apply unfreezes: builds with and without the unfreeze cannot
// share a range's log (group transport protocol version 3), so the range
// is then led by, and its unfreeze committed on, servers that apply it.
func (r *reports) canAbort(servers []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	yes := 0
	for _, s := range servers {
		ok, heard := r.mergeAbort[s]
		switch {
		case heard && !ok:
			return false
		case ok:
			yes++
		}
	}
	return yes > len(servers)/2
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
