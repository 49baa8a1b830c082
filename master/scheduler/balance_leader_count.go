package scheduler

// balanceLeaderCount evens out leader counts in an idle cluster (mean
// leader load under LeaderMinGap, where load gives no direction): a leader
// moves from a server leading two or more above the fewest to a caught-up
// follower with fewer, when that does not flip their load. Under load,
// balanceLeaderLoad alone decides (a server that shed a hot range should
// lead fewer ranges, and moving cold leaders back would fight it).
type balanceLeaderCount struct{}

func (balanceLeaderCount) Name() string { return RuleBalanceLeaders }

func (balanceLeaderCount) Schedule(p *Plan) {
	if !p.cfg.BalanceLeaders || p.planned(RuleBalanceLeaderLoad) || p.planned(RuleBalanceLeaderFill) ||
		p.planned(RuleSplitBalance) {
		return
	}
	servers := p.eligibleLeaders(func(s *serverStat) float64 { return float64(s.leaders) })
	if len(servers) < 2 {
		return
	}
	total := 0.0
	for _, s := range servers {
		total += s.leaderLoad
	}
	if total/float64(len(servers)) >= p.cfg.LeaderMinGap {
		return
	}
	fewest := servers[len(servers)-1].leaders
	for _, s := range servers {
		if p.Full() || s.leaders-fewest < 2 {
			return
		}
		if p.resting(s) {
			continue
		}
		for _, r := range p.ledBy(s.id) {
			to := p.fewestLeadersFollower(r, s)
			if to == nil || !p.movable(r) {
				continue
			}
			p.add(r, Op{Kind: TransferLeader, Range: r.ID, From: s.id, To: to.id, Rule: RuleBalanceLeaders,
				Reason:  "balance leader count",
				Figures: p.groupFigures(r, map[string]float64{"from_leaders": float64(s.leaders), "to_leaders": float64(to.leaders)})})
			break
		}
	}
}

// fewestLeadersFollower is the follower of r leading at least two fewer
// ranges than s (twice the ranges of r's group, whose leadership moves
// with r's: the gap must exceed what moves, or the counts would flip) and
// the fewest, to which moving r does not flip the load.
func (p *Plan) fewestLeadersFollower(r *Range, s *serverStat) *serverStat {
	var best *serverStat
	n, l := p.leadUnit(r)
	for _, rep := range r.Replicas {
		st := p.servers[rep.Server]
		if rep.Server == s.id || !p.canLead(r, rep.Server) || p.cooling(st) || s.leaders-st.leaders < 2*n {
			continue
		}
		if l > 0 && st.leaderLoad+l > s.leaderLoad-l {
			continue
		}
		if best == nil || st.leaders < best.leaders || (st.leaders == best.leaders && st.id < best.id) {
			best = st
		}
	}
	return best
}

// planned reports whether this run planned an operation by rule.
func (p *Plan) planned(rule string) bool {
	for _, o := range p.out {
		if o.Rule == rule {
			return true
		}
	}
	return false
}
