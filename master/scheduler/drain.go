package scheduler

import "fmt"

// drain empties servers marked draining: first their leaderships go to a
// live, caught-up follower, then their replicas move to the servers holding
// the fewest (a leader's replica moves once its leadership is gone).
type drain struct{}

func (drain) Name() string { return "drain" }

func (drain) Schedule(p *Plan) {
	if !p.anyDraining() {
		return
	}
	for _, r := range p.snap.Ranges {
		if p.Full() {
			return
		}
		if !p.free(r) {
			continue
		}
		if st := p.servers[r.Leader]; st != nil && st.draining {
			if to := p.coolestFollower(r, r.Leader); to != nil {
				p.add(r, Op{Kind: TransferLeader, Range: r.ID, From: r.Leader, To: to.id, Rule: RuleDrainLeader,
					Reason:  fmt.Sprintf("drain: server %s is draining", r.Leader),
					Figures: map[string]float64{"entities_per_sec": r.entitiesPerSec()}})
			}
			continue
		}
		p.drainReplica(r)
	}
}

// drainReplica moves r's replica off a draining server, if it has one.
func (p *Plan) drainReplica(r *Range) {
	for _, rep := range r.Replicas {
		st := p.servers[rep.Server]
		if st == nil || !st.draining || st.moving >= p.cfg.MaxPerServer {
			continue
		}
		if to := p.replicaTarget(r); to != nil {
			p.add(r, Op{Kind: Move, Range: r.ID, From: st.id, To: to.id, Rule: RuleDrainReplica,
				Reason:  fmt.Sprintf("drain: server %s is draining", st.id),
				Figures: map[string]float64{"from_replicas": float64(st.replicas), "to_replicas": float64(to.replicas)}})
		}
		return
	}
}

func (p *Plan) anyDraining() bool {
	for _, st := range p.order {
		if st.draining {
			return true
		}
	}
	return false
}
