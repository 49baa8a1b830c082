package scheduler

import "fmt"

// splitBalance splits a range of a server leading clearly more than the
// mean (as balanceLeaderLoad judges it) when no leadership can move off it
// without moving the hot spot: every range it leads is too hot for its
// followers to take whole. Leader balancing moves load in units of ranges,
// so a few ranges of similar load over a few servers can stay uneven for
// good: with a capacity per server, the server leading two of four ranges
// caps the whole cluster's throughput, while each range stays below
// SplitLoad. The split divides the server's busiest splittable range at its
// load-weighted median and the right half is led by its coolest follower,
// when that lowers the pair's maximum (the same rule as a leader move, so
// splits cannot cycle with moves). Halves must each stay above MergeLoad,
// so that the split is not merged back. A range above SplitLoad is left to
// splitLoad, which waits for SplitWindow.
type splitBalance struct{}

func (splitBalance) Name() string { return RuleSplitBalance }

func (splitBalance) Schedule(p *Plan) {
	if p.cfg.SharedHost {
		// The servers share the processors: moving load between them
		// adds none (Config.SharedHost).
		return
	}
	p.eachImbalanced(true, func(s *serverStat, mean float64) {
		if r, _ := p.sheddableLeader(s); r != nil {
			return // balanceLeaderLoad's move was only refused for a slot or a busy range
		}
		if r, key, to := p.balanceSplit(s); r != nil {
			l := r.entitiesPerSec()
			p.add(r, Op{Kind: Split, Range: r.ID, Key: key, From: s.id, To: to.id, Rule: RuleSplitBalance,
				Reason: fmt.Sprintf("server leads %.0f entities/s, mean %.0f; no range can move whole", s.leaderLoad, mean),
				Figures: map[string]float64{"from_entities_per_sec": s.leaderLoad, "to_entities_per_sec": to.leaderLoad,
					"mean_entities_per_sec": mean, "range_entities_per_sec": l}})
		}
	})
}

// balanceSplit picks the busiest range led by s that can be split (two or
// more keys, none carrying SingleKeyShare, both halves above MergeLoad, not
// above SplitLoad, not split within SplitWindow: its report may predate
// the split) and whose right half, led by its coolest follower, lowers the pair's maximum.
func (p *Plan) balanceSplit(s *serverStat) (*Range, string, *serverStat) {
	var best *Range
	var bestKey string
	var bestTo *serverStat
	for _, r := range p.ledBy(s.id) {
		l := r.entitiesPerSec()
		if l <= 2*p.cfg.MergeLoad || !r.HotSince.IsZero() || !p.free(r) || p.staleLeader(r) || p.justSplit(r) || p.unsplittable(r) || (best != nil && l <= best.entitiesPerSec()) {
			continue
		}
		to := p.coolestFollower(r, s.id)
		if to == nil || p.cooling(to) || !p.narrows(s.leaderLoad, to.leaderLoad, l/2) {
			continue
		}
		key, share, ok := LoadSplitKey(r)
		if !ok || share >= p.cfg.SingleKeyShare {
			continue
		}
		best, bestKey, bestTo = r, key, to
	}
	return best, bestKey, bestTo
}
