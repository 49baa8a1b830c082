package scheduler

// balanceReplicas moves replicas from the servers holding the most to the
// one holding the fewest while they differ by two or more (a server joined,
// or came back after its replicas were re-created elsewhere). It prefers a
// range the source does not lead, so that no leadership has to move. It
// makes no move that leaves a range in fewer zones (keepsZones): where the
// server holding the fewest can take none of the source's replicas for
// that, the source's own zone's server holding the fewest can (a move
// within a zone keeps every range's zones), so that a zone's servers are
// balanced among themselves.
type balanceReplicas struct{}

func (balanceReplicas) Name() string { return RuleBalanceReplicas }

func (balanceReplicas) Schedule(p *Plan) {
	if !p.cfg.BalanceReplicas {
		return
	}
	servers := p.eligible(func(s *serverStat) float64 { return float64(s.replicas) })
	if len(servers) < 2 {
		return
	}
	for _, s := range servers {
		to := p.fewestReplicas(servers)
		if p.Full() || to == nil || s.replicas-to.replicas < 2 {
			return
		}
		if s.moving >= p.cfg.MaxPerServer {
			continue
		}
		r, whole := p.movableReplica(s, to)
		if r == nil {
			if z := p.fewestInZone(servers, s); z != nil && z != to && s.replicas-z.replicas >= 2 {
				to = z
				r, whole = p.movableReplica(s, z)
			}
		}
		if r != nil {
			p.addMove(r, whole, Op{Kind: Move, Range: r.ID, From: s.id, To: to.id, Rule: RuleBalanceReplicas,
				Reason:  "balance replicas",
				Figures: map[string]float64{"from_replicas": float64(s.replicas), "to_replicas": float64(to.replicas)}})
		}
	}
}

// fewestReplicas is the server of servers that can host a replica now and
// holds the fewest.
func (p *Plan) fewestReplicas(servers []*serverStat) *serverStat {
	var best *serverStat
	for _, st := range servers {
		if p.canHost(st) && (best == nil || st.replicas < best.replicas) {
			best = st
		}
	}
	return best
}

// fewestInZone is the server of servers in s's named zone, other than s,
// that can host a replica now and holds the fewest (nil: none, or s names
// no zone).
func (p *Plan) fewestInZone(servers []*serverStat, s *serverStat) *serverStat {
	var best *serverStat
	for _, st := range servers {
		if st != s && sameZone(st, s) && p.canHost(st) && (best == nil || st.replicas < best.replicas) {
			best = st
		}
	}
	return best
}

// movableReplica is what replica balance moves from from to to: a free
// range with a replica on from and none on to, that fits on to's disk
// (roomFor) and whose move keeps its zones (keepsZones). A range alone in
// its Raft group is preferred (whole false): one from does not lead (no
// leadership has to move), of those the one carrying the most load. A
// new server given only replicas of cold ranges (the first in snapshot
// order are often an idle table's) could never be given a leadership
// that takes load off the others; one holding followers of busy ranges
// can (balance-leader-fill). Only when no lone range may move does it
// move a Raft group serving several ranges, whole (whole true; r its
// mover, moveUnit): never one of its spans, which the master would first
// take out of the group (isolate: for the namesake, e.g. a shared group's
// anchor, every other span leaves, so a group of 64 tables became 64
// groups). A group of n ranges counts as n replicas moved, so it moves
// only across a gap of at least 2n (wholeFits), as the leader-count rule
// moves a group's leadership: a smaller gap would flip the counts and
// send it back. Of such groups, the smallest, then one from does not
// lead.
func (p *Plan) movableReplica(from, to *serverStat) (*Range, bool) {
	if r := p.loneReplica(from, to); r != nil {
		return r, false
	}
	if r := p.wholeGroupReplica(from, to); r != nil {
		return r, true
	}
	return nil, false
}

// loneReplica is movableReplica's choice among the ranges alone in their
// Raft group (nil: none may move).
func (p *Plan) loneReplica(from, to *serverStat) *Range {
	var follower, led *Range
	for _, r := range p.heldBy(from.id) {
		if p.shared(r) || !p.free(r) || r.HasReplica(to.id) || !to.roomFor(r) || !p.keepsZones(r, from, to) {
			continue
		}
		switch {
		case r.Leader == from.id:
			if led == nil {
				led = r
			}
		case follower == nil || r.entitiesPerSec() > follower.entitiesPerSec():
			follower = r
		}
	}
	if follower != nil {
		return follower
	}
	return led
}

// wholeGroupReplica is movableReplica's choice among the Raft groups of
// several ranges, the range a whole move is planned on (nil: none may
// move): the smallest group that fits (wholeFits), then one from does not
// lead.
func (p *Plan) wholeGroupReplica(from, to *serverStat) *Range {
	var best *Range
	bestN := 0
	for _, r := range p.heldBy(from.id) {
		if !p.shared(r) || !p.free(r) || r.HasReplica(to.id) || !p.keepsZones(r, from, to) {
			continue
		}
		n, ok := p.wholeFits(r, from, to)
		if ok && (best == nil || n < bestN || (n == bestN && best.Leader == from.id && r.Leader != from.id)) {
			best, bestN = r, n
		}
	}
	return best
}

// wholeFits reports whether replica balance may move r's Raft group, of
// several ranges, whole from from to to, and how many ranges it moves: r
// is the range a whole move is planned through and the group may move
// now (moveUnit), its bytes fit on to, and from holds at least 2n
// replicas more than to.
func (p *Plan) wholeFits(r *Range, from, to *serverStat) (int, bool) {
	unit, whole := p.moveUnit(r)
	if unit == nil || !whole || !to.roomFor(unit) {
		return 0, false
	}
	n := p.groupSize(r)
	return n, from.replicas-to.replicas >= 2*n
}
