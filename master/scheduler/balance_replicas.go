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
		r := p.movableReplica(s, to)
		if r == nil {
			if z := p.fewestInZone(servers, s); z != nil && z != to && s.replicas-z.replicas >= 2 {
				to, r = z, p.movableReplica(s, z)
			}
		}
		if r != nil {
			p.add(r, Op{Kind: Move, Range: r.ID, From: s.id, To: to.id, Rule: RuleBalanceReplicas,
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

// movableReplica is a free range with a replica on from and none on to,
// that fits on to's disk (roomFor) and whose move keeps its zones
// (keepsZones):
// preferably one from does not lead (no leadership has to move); of
// those, one whose move adds the fewest Raft groups (isolateAdds: moving
// the namesake of a group of eight spans first split it into eight
// groups, each then proposing its own smaller entries; scenario
// balance_replicas_keeps_groups), and then the one carrying the most
// load. A new server given only replicas
// of cold ranges (the first in snapshot order are often an idle table's)
// could never be given a leadership that takes load off the others; one
// holding followers of busy ranges can (balance-leader-fill).
func (p *Plan) movableReplica(from, to *serverStat) *Range {
	var follower, led *Range
	for _, r := range p.heldBy(from.id) {
		if !p.free(r) || r.HasReplica(to.id) || !to.roomFor(r) || !p.keepsZones(r, from, to) {
			continue
		}
		if r.Leader == from.id {
			if led == nil || p.isolateAdds(r) < p.isolateAdds(led) {
				led = r
			}
			continue
		}
		if follower == nil || p.movesBetter(r, follower) {
			follower = r
		}
	}
	if follower != nil {
		return follower
	}
	return led
}

// movesBetter reports whether moving r is preferable to moving than for
// replica balance: fewer Raft groups added, then more load.
func (p *Plan) movesBetter(r, than *Range) bool {
	if a, b := p.isolateAdds(r), p.isolateAdds(than); a != b {
		return a < b
	}
	return r.entitiesPerSec() > than.entitiesPerSec()
}
