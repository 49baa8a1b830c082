package scheduler

import "fmt"

// balanceLeaderLoad moves leaders off servers that lead clearly more than
// the mean load (by LeaderLoadTolerance and LeaderMinGap) to a live,
// caught-up follower leading less. A move must narrow the gap between the
// two servers, never flip it, and each server it touches then waits
// BalanceCooldown so that load reports reflect the move first.
//
// A move of load l from s to t is made only when t+l < s: the pair's
// maximum falls and the sum of squared server loads strictly decreases, so
// moves can never cycle (no thrash), and a single range hotter than the
// gap stays where it is rather than moving the hot spot. t+l must in fact
// stay half of LeaderMinGap below s (Plan.narrows), so that reports
// wobbling by a few entities/s cannot send a leadership back.
type balanceLeaderLoad struct{}

func (balanceLeaderLoad) Name() string { return RuleBalanceLeaderLoad }

func (balanceLeaderLoad) Schedule(p *Plan) {
	p.eachImbalanced(true, func(s *serverStat, mean float64) {
		if r, to := p.sheddableLeader(s); r != nil {
			p.add(r, Op{Kind: TransferLeader, Range: r.ID, From: s.id, To: to.id, Rule: RuleBalanceLeaderLoad,
				Reason: fmt.Sprintf("server leads %.0f entities/s, mean %.0f", s.leaderLoad, mean),
				Figures: p.groupFigures(r, map[string]float64{"from_entities_per_sec": s.leaderLoad, "to_entities_per_sec": to.leaderLoad,
					"mean_entities_per_sec": mean, "range_entities_per_sec": p.leadLoad(r)})})
		}
	})
}

func (p *Plan) overloaded(s *serverStat, mean float64) bool {
	return s.leaderLoad > mean*(1+p.cfg.LeaderLoadTolerance) && s.leaderLoad-mean >= p.cfg.LeaderMinGap
}

// sheddableLeader picks the range led by s whose move to its coolest
// eligible follower lowers the larger of the two servers' loads the most
// (a range that shares its Raft group: the group's, leadUnit).
func (p *Plan) sheddableLeader(s *serverStat) (*Range, *serverStat) {
	var best *Range
	var bestTo *serverStat
	bestMax := s.leaderLoad
	for _, r := range p.ledBy(s.id) {
		if !p.movable(r) {
			continue
		}
		l := p.leadLoad(r)
		if l <= 0 {
			continue
		}
		to := p.coolestFollower(r, s.id)
		if to == nil || p.cooling(to) {
			continue
		}
		if m := max(s.leaderLoad-l, to.leaderLoad+l); m < bestMax && p.narrows(s.leaderLoad, to.leaderLoad, l) {
			best, bestTo, bestMax = r, to, m
		}
	}
	return best, bestTo
}
