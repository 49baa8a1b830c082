package scheduler

// balanceReplicas moves replicas from the servers holding the most to the
// one holding the fewest while they differ by two or more (a server joined,
// or came back after its replicas were re-created elsewhere). It prefers a
// range the source does not lead, so that no leadership has to move.
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
		if r := p.movableReplica(s, to); r != nil {
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

// movableReplica is a free range with a replica on from and none on to,
// that fits on to's disk (roomFor):
// preferably one from does not lead (no leadership has to move), and of
// those the one carrying the most load. A new server given only replicas
// of cold ranges (the first in snapshot order are often an idle table's)
// could never be given a leadership that takes load off the others; one
// holding followers of busy ranges can (balance-leader-fill).
func (p *Plan) movableReplica(from, to *serverStat) *Range {
	var follower, led *Range
	for _, r := range p.heldBy(from.id) {
		if !p.free(r) || r.HasReplica(to.id) || !to.roomFor(r) {
			continue
		}
		if r.Leader == from.id {
			if led == nil {
				led = r
			}
			continue
		}
		if follower == nil || r.entitiesPerSec() > follower.entitiesPerSec() {
			follower = r
		}
	}
	if follower != nil {
		return follower
	}
	return led
}
