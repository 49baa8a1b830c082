package master

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

var replicaFixesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "tablestore", Subsystem: "master", Name: "replica_set_fixes_total",
	Help: "Replica-set fixes by the leading master: sync (descriptor set to the Raft configuration), remove (a voter beyond the replication factor), remove_nonvoter (a non-voter an interrupted move left) or add (a voter missing below it).",
}, []string{"fix"})

func init() { prometheus.MustRegister(replicaFixesTotal) }

// The replica-set check finishes replica changes a failover interrupted. A
// move adds the new replica as a non-voter, promotes it to a voter once it
// caught up, then removes the old one, each step a ChangeReplicas on the
// range's leader; the last two also record the voters in the range's
// descriptor (a new generation the master adopts from heartbeats). A
// master that dies between the steps leaves the range with a non-voter or
// a voter too many; one that dies inside a step can leave the range's
// descriptor behind its Raft configuration. Nothing else would ever fix
// any of these: the next master does not know the operation existed. So
// the leading master compares, per range, the descriptor with the members
// its leader reports and the replication factor, and once a difference
// has lasted
// reconcileGrace (an operation of the previous master may still be
// finishing) it:
//
//   - records the Raft configuration in the descriptor when they differ
//     (ChangeReplicas with nothing to add or remove);
//   - else removes a non-voter (a move that never promoted it);
//   - else removes voters beyond the replication factor, never the leader:
//     one on a down server or reported broken first (a re-replication was
//     interrupted), then
//     one on a draining server (a drain), then one in a zone another
//     voter shares (an interrupted zone-diversity move keeps its new
//     replica), then one on the server with the most replicas (a
//     balancing move; ties: the greater id);
//   - else adds a voter to a range with fewer than the replication factor
//     (an operator's removal, or a remove whose add never happened): on a
//     live, not draining server without one, in a zone the range lacks if
//     there is one (scheduler.ZoneShared), the one holding the fewest
//     replicas (ties: the smaller id). Down servers' replicas still count
//     as voters here; replacing them is re-replication's (the scheduler),
//     after --replicate-after.
//
// An add or a removal planned without a fresh report of the leader's Raft
// configuration (from the descriptor alone) records the configuration
// first and is planned again from it (replicaFix.verify).

// reconcileGrace is how long a difference must last before it is fixed
// (Config.ReconcileGrace replaces it).
const reconcileGrace = 5 * time.Second

// replicaCheckGrace is the configured grace, reconcileGrace by default.
func (s *Server) replicaCheckGrace() time.Duration {
	if s.cfg.ReconcileGrace > 0 {
		return s.cfg.ReconcileGrace
	}
	return reconcileGrace
}

// voterReport is a range leader's report of its Raft configuration.
type voterReport struct {
	server     string
	generation uint64
	voters     []string
	nonvoters  []string
	at         time.Time
}

// replicaCheck is the input of planReplicaFix for one range.
type replicaCheck struct {
	factor   int
	replicas []string // the descriptor's
	voters   []string // the leader's Raft configuration; nil: not known
	// nonvoters are the leader's Raft configuration's non-voters (known
	// when voters are).
	nonvoters []string
	leader    string
	down      map[string]bool
	// broken are the servers whose replica of the range reports itself
	// broken (its open found its files damaged): removed first, like a down
	// one, never kept as a healthy voter.
	broken   map[string]bool
	draining map[string]bool
	counts   map[string]int // replicas per server, over every range
	servers  []string       // every registered server
	// zones are the servers' zones (Server.Zone; nil or "": none).
	zones map[string]string
	// disks are the servers' disk states (scheduler.Disk.State; absent:
	// OK): a full server takes no missing voter, a low one only when no
	// server with room can.
	disks map[string]scheduler.DiskState
}

// sharesZone reports whether s's zone is that of one of the range's
// replicas other than s.
func (c replicaCheck) sharesZone(s string) bool {
	var others []string
	for _, r := range c.replicas {
		if r != s {
			others = append(others, c.zones[r])
		}
	}
	return scheduler.ZoneShared(c.zones[s], others)
}

// replicaFix is what to do about a range: nothing, record its Raft
// configuration, remove one member (a voter, or a non-voter when
// nonvoter) or add one.
type replicaFix struct {
	sync     bool
	remove   string
	nonvoter bool
	add      string
	reason   string
	// verify: an add or a voter's removal planned from the descriptor
	// alone (no fresh report of the leader's Raft configuration: a master
	// that just took the lead, a leader just changed). The descriptor may
	// be behind the configuration (a change whose record a failover cut
	// off), so fixReplicas records the configuration first and plans
	// again from it (replanSynced). Unverified, an add could pick a
	// server that is a voter already (addVoter refuses it as busy since,
	// addTargetRefusal, which without this would refuse every pass); a
	// removal could cut a configuration that already has the replication
	// factor (a removal whose record was cut off) down by one more.
	verify bool
}

func (f replicaFix) none() bool { return !f.sync && f.remove == "" && f.add == "" }

// planReplicaFix is the replica-set rule (see above).
func planReplicaFix(c replicaCheck) replicaFix {
	if c.voters != nil && !sameSet(c.voters, c.replicas) {
		return replicaFix{sync: true, reason: fmt.Sprintf("Raft configuration %v, descriptor %v", c.voters, c.replicas)}
	}
	if c.leader == "" {
		return replicaFix{}
	}
	if len(c.nonvoters) > 0 {
		// A move adds its replica as a non-voter and promotes it once
		// caught up; one still there after the grace (no operation runs
		// on the range, or the fix could not claim it) was left by a
		// master that failed between the two. The move that would have
		// used it is gone; its replica only costs the leader.
		return replicaFix{remove: c.nonvoters[0], nonvoter: true, reason: fmt.Sprintf("non-voter %s left by an interrupted move", c.nonvoters[0])}
	}
	if len(c.replicas) < c.factor {
		return planReplicaAdd(c)
	}
	if len(c.replicas) == c.factor {
		return replicaFix{}
	}
	var cands []string
	for _, r := range c.replicas {
		if r != c.leader {
			cands = append(cands, r)
		}
	}
	rank := func(s string) int {
		switch {
		case c.down[s], c.broken[s]:
			return 0
		case c.draining[s]:
			return 1
		case c.sharesZone(s):
			return 2
		}
		return 3
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if rank(a) != rank(b) {
			return rank(a) < rank(b)
		}
		if c.counts[a] != c.counts[b] {
			return c.counts[a] > c.counts[b]
		}
		return a > b
	})
	if len(cands) == 0 {
		return replicaFix{}
	}
	return replicaFix{remove: cands[0], verify: c.voters == nil, reason: fmt.Sprintf("%d voters %v, replication factor %d", len(c.replicas), c.replicas, c.factor)}
}

// planReplicaAdd picks the server that gets the missing voter of an
// under-replicated range (see the rule above); none if no server fits.
func planReplicaAdd(c replicaCheck) replicaFix {
	best, bestNew, bestRoom := "", false, false
	for _, s := range c.servers {
		if c.down[s] || c.draining[s] || c.disks[s] == scheduler.DiskFull || slices.Contains(c.replicas, s) {
			continue
		}
		isNew, room := !c.sharesZone(s), c.disks[s] == scheduler.DiskOK
		switch {
		case best == "",
			room && !bestRoom,
			room == bestRoom && isNew && !bestNew,
			room == bestRoom && isNew == bestNew && (c.counts[s] < c.counts[best] || (c.counts[s] == c.counts[best] && s < best)):
			best, bestNew, bestRoom = s, isNew, room
		}
	}
	if best == "" {
		return replicaFix{}
	}
	return replicaFix{add: best, verify: c.voters == nil, reason: fmt.Sprintf("%d voters %v, replication factor %d", len(c.replicas), c.replicas, c.factor)}
}

// replanSynced plans the fix of a range again once its Raft
// configuration's voters were recorded in its descriptor (synced, the
// answer of a ChangeReplicas with nothing to add or remove): the check c
// was made without them (replicaFix.verify). The answer names no
// non-voters; a server that is one is still a fine target for an add
// (addVoter promotes it).
func replanSynced(c replicaCheck, synced *pb.RangeDescriptor) replicaFix {
	var ids []string
	for _, r := range synced.GetReplicas() {
		ids = append(ids, r.GetServerId())
	}
	c.replicas, c.voters, c.nonvoters = ids, ids, nil
	return planReplicaFix(c)
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// reconcileReplicas runs the replica-set check on the leader (policyLoop,
// even with the policies off: it is recovery). pending remembers since when
// each range has differed.
func (s *Server) reconcileReplicas(pending map[uint64]time.Time, last *checkInputs) {
	now := time.Now()
	in := s.checkInputs()
	if len(pending) == 0 && in.same(*last, now) {
		return
	}
	in.at = now
	*last = in
	checks := s.replicaChecks(now)
	for id := range pending {
		// A range without a fresh report (its leader is changing) keeps
		// its place: only a check that finds nothing to fix resets it.
		if _, ok := s.rangeDesc(id); !ok {
			delete(pending, id)
		}
	}
	for id, c := range checks {
		fix := planReplicaFix(c)
		if fix.none() {
			delete(pending, id)
			continue
		}
		since, ok := pending[id]
		if !ok {
			pending[id] = now
			continue
		}
		if now.Sub(since) < s.replicaCheckGrace() {
			continue
		}
		id, fix, c := id, fix, c
		s.recoverGroup(id, func(ctx context.Context) error {
			err := s.fixReplicas(ctx, id, fix, c)
			if err != nil {
				s.logger.Warn("replica-set fix failed", "range", id, "reason", fix.reason, "err", err)
			}
			return err
		})
		delete(pending, id)
	}
}

// recoverGroup runs fn as a recovery operation on range id that claims
// every range of its Raft group, and reports whether it started. A
// membership change is the group's: two of its spans report the same
// difference, and fixed at once they would add two servers for one dead.
func (s *Server) recoverGroup(id uint64, fn func(ctx context.Context) error) bool {
	return s.ops.recover(append([]uint64{id}, s.groupPeers(id)...), opTimeout, fn)
}

// newTerm clears the replica-set check's memory (pending, since when each
// range has differed; last, the inputs of the last check) when the master
// group's term moved from prev to cur, and returns cur. A master that lost
// the lead and regained it between two policy ticks kept its pending
// ranges: their grace, counted from the earlier term, was over, and a
// difference that an interim leader's operation had just made (a move's
// added voter, its non-voter) was "fixed" at once, beside that operation
// still finishing (its last step runs on the range's leader even after
// its master lost the lead): a move's removal and the fix's removal
// together left the range two voters. The grace is what lets such an
// operation finish.
func newTerm(pending map[uint64]time.Time, last *checkInputs, prev, cur uint64) uint64 {
	if cur != prev {
		clear(pending)
		*last = checkInputs{}
	}
	return cur
}

// checkInputs names what the replica-set check reads. When none of it
// changed and no range waits out its grace, a check finds what the last
// one found: nothing to start (at 1,000 idle ranges the check every
// policy tick was a fifth of an idle master's CPU). Time alone changes
// the rest (a server's liveness, a report's age): a check runs at least
// every checkRefresh.
type checkInputs struct {
	catalog, reports uint64
	at               time.Time
}

// checkRefresh is the longest a replica-set check is skipped.
const checkRefresh = time.Second

func (s *Server) checkInputs() checkInputs {
	var in checkInputs
	s.fsm.read(func(*state) { in.catalog = s.fsm.version })
	s.reports.mu.Lock()
	in.reports = s.reports.gen
	s.reports.mu.Unlock()
	return in
}

func (in checkInputs) same(last checkInputs, now time.Time) bool {
	return !last.at.IsZero() && in.catalog == last.catalog && in.reports == last.reports && now.Sub(last.at) < checkRefresh
}

// replicaChecks gathers the check's input for every range that has a
// fresh report from its leader at the descriptor's generation (or, for the
// replication factor alone, a known leader). Frozen ranges (a merge in
// progress) are left to the merge.
func (s *Server) replicaChecks(now time.Time) map[uint64]replicaCheck {
	seen := s.reports.seen()
	frozen := map[uint64]bool{}
	for _, id := range s.reports.frozenRanges() {
		frozen[id] = true
	}
	s.reports.mu.Lock()
	leaders := make(map[uint64]string, len(s.reports.leaders))
	for id, l := range s.reports.leaders {
		leaders[id] = l
	}
	voters := make(map[uint64]voterReport, len(s.reports.voters))
	for id, v := range s.reports.voters {
		v.at = s.reports.reportedAt(v.server, v.at)
		voters[id] = v
	}
	s.reports.mu.Unlock()
	spaces, broken := s.reports.spaces(), s.reports.brokenReplicas()
	out := map[uint64]replicaCheck{}
	s.fsm.read(func(st *state) {
		down, draining, counts, zones := map[string]bool{}, map[string]bool{}, map[string]int{}, map[string]string{}
		disks := map[string]scheduler.DiskState{}
		servers := make([]string, 0, len(st.servers))
		for id, sv := range st.servers {
			servers = append(servers, id)
			zones[id] = sv.GetZone()
			disks[id] = diskOf(spaces[id]).State()
			if !s.upAt(seen, id, now) {
				down[id] = true
			}
			draining[id] = sv.GetDraining()
		}
		for _, d := range st.ranges {
			for _, r := range d.GetReplicas() {
				counts[r.GetServerId()]++
			}
		}
		for id, d := range st.ranges {
			leader := leaders[id]
			if leader == "" || frozen[id] || down[leader] {
				continue
			}
			c := replicaCheck{factor: s.cfg.ReplicationFactor, leader: leader, down: down, broken: broken[id], draining: draining, counts: counts, servers: servers, zones: zones, disks: disks}
			for _, r := range d.GetReplicas() {
				c.replicas = append(c.replicas, r.GetServerId())
			}
			if v, ok := voters[id]; ok && v.server == leader && v.generation == d.GetGeneration() && now.Sub(v.at) < voterReportFresh {
				c.voters, c.nonvoters = v.voters, v.nonvoters
			}
			out[id] = c
		}
	})
	return out
}

// syncReplicas records range id's Raft configuration in its descriptor (a
// ChangeReplicas with nothing to add or remove), and every span of its
// group in the map (recordChange), and returns the descriptor recorded.
func (s *Server) syncReplicas(ctx context.Context, id uint64, addrs map[string]string) (*pb.RangeDescriptor, error) {
	resp, err := s.changeMembers(ctx, &pb.ChangeReplicasRequest{RangeId: id, RaftAddrs: addrs})
	if err != nil {
		return nil, err
	}
	return s.recordChange(resp)
}

// verifyFix records range id's Raft configuration in its descriptor and
// plans fix, made from check c without it (replicaFix.verify), again from
// it. It returns the descriptor recorded and the fix to carry out (none:
// the configuration needed none).
func (s *Server) verifyFix(ctx context.Context, id uint64, fix replicaFix, c replicaCheck, addrs map[string]string) (*pb.RangeDescriptor, replicaFix, error) {
	synced, err := s.syncReplicas(ctx, id, addrs)
	if err != nil {
		return nil, replicaFix{}, fmt.Errorf("record the Raft configuration before the fix: %w", err)
	}
	again := replanSynced(c, synced)
	if again.sync || again.verify {
		again = replicaFix{} // not expected: the voters are known now
	}
	if again.none() {
		replicaFixesTotal.WithLabelValues("sync").Inc()
		s.logger.Info("replica-set fix planned without the Raft configuration: recorded it instead", "range", id,
			"planned", fix.reason, "voters", synced.GetReplicas())
	}
	return synced, again, nil
}

// fixReplicas carries out a replica-set fix, planned from check c, on
// range id's leader.
func (s *Server) fixReplicas(ctx context.Context, id uint64, fix replicaFix, c replicaCheck) error {
	start := time.Now()
	d, ok := s.rangeDesc(id)
	if !ok {
		return fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	addrs := s.raftAddrs()
	var err error
	if fix.verify {
		synced, again, err := s.verifyFix(ctx, id, fix, c, addrs)
		if err != nil || again.none() {
			return err
		}
		fix, d = again, synced
	}
	// Each records every span of the range's Raft group in one
	// UPDATE_RANGES (recordChange): the group's membership is one.
	switch {
	case fix.add != "":
		// The new server's replica is created first and catches up by
		// snapshot, as in a move.
		_, err = s.addVoter(ctx, d, fix.add, addrs)
	case fix.remove != "":
		// Recorded, and the replica deleted.
		_, err = s.removeMember(ctx, id, fix.remove, fix.nonvoter, addrs)
	default:
		_, err = s.syncReplicas(ctx, id, addrs)
	}
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("recorded range %d's Raft configuration in its descriptor (%s)", id, fix.reason)
	kind, servers := "sync", []string(nil)
	switch {
	case fix.remove != "" && fix.nonvoter:
		kind, servers = "remove_nonvoter", []string{fix.remove}
		msg = fmt.Sprintf("finished an interrupted move of range %d: removed the non-voter on %s (%s)", id, fix.remove, fix.reason)
	case fix.remove != "":
		kind, servers = "remove", []string{fix.remove}
		msg = fmt.Sprintf("finished an interrupted move of range %d: removed the voter on %s (%s)", id, fix.remove, fix.reason)
	case fix.add != "":
		kind, servers = "add", []string{fix.add}
		msg = fmt.Sprintf("restored range %d's replication factor: added a voter on %s (%s)", id, fix.add, fix.reason)
	}
	replicaFixesTotal.WithLabelValues(kind).Inc()
	s.event(&pb.Event{
		Kind: pb.EventKind_EVENT_KIND_MOVE, Table: d.GetTable(), RangeIds: []uint64{id}, Servers: servers,
		Cause: causeRecovery, DurationSeconds: time.Since(start).Seconds(), Message: msg,
	})
	return nil
}
