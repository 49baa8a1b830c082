package scheduler

import "fmt"

// balanceLeaderFill gives leaderships to servers leading clearly less than
// the mean (by LeaderLoadTolerance and LeaderMinGap): a server that joined
// or came back holds replicas but leads nothing, and no other server may be
// overloaded enough to shed to it. Of the ranges it holds a caught-up
// replica of, it takes the one whose leader leads the most, when the move
// lowers the pair's maximum (the same rule as balanceLeaderLoad, so the
// two cannot undo each other).
type balanceLeaderFill struct{}

func (balanceLeaderFill) Name() string { return RuleBalanceLeaderFill }

func (balanceLeaderFill) Schedule(p *Plan) {
	p.eachImbalanced(false, func(s *serverStat, mean float64) {
		if r, from := p.leaderToTake(s); r != nil {
			p.add(r, Op{Kind: TransferLeader, Range: r.ID, From: from.id, To: s.id, Rule: RuleBalanceLeaderFill,
				Reason: fmt.Sprintf("server leads %.0f entities/s, mean %.0f", s.leaderLoad, mean),
				Figures: p.groupFigures(r, map[string]float64{"from_entities_per_sec": from.leaderLoad, "to_entities_per_sec": s.leaderLoad,
					"mean_entities_per_sec": mean, "range_entities_per_sec": p.leadLoad(r)})})
		}
	})
}

func (p *Plan) underloaded(s *serverStat, mean float64) bool {
	return s.leaderLoad < mean*(1-p.cfg.LeaderLoadTolerance) && mean-s.leaderLoad >= p.cfg.LeaderMinGap
}

// leaderToTake picks, among the ranges s may lead, the one whose leader
// leads the most (not a silent one: see eachImbalanced) and whose move to
// s lowers the pair's maximum.
func (p *Plan) leaderToTake(s *serverStat) (*Range, *serverStat) {
	var best *Range
	var bestFrom *serverStat
	for _, r := range p.heldBy(s.id) {
		from := p.stat(r.Leader)
		if from == nil || from == s || from.silent || !p.movable(r) || p.cooling(from) || !p.canLead(r, s.id) {
			continue
		}
		l := p.leadLoad(r)
		if l <= 0 {
			continue
		}
		if !p.narrows(from.leaderLoad, s.leaderLoad, l) || (bestFrom != nil && from.leaderLoad <= bestFrom.leaderLoad) {
			continue
		}
		best, bestFrom = r, from
	}
	return best, bestFrom
}
