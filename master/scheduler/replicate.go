package scheduler

import (
	"fmt"
	"time"
)

// reReplicate moves the replicas of a server that has been down for
// ReplicateAfter to the live servers holding the fewest replicas: data
// safety comes before load, so it runs first.
type reReplicate struct{}

func (reReplicate) Name() string { return RuleReReplicate }

func (reReplicate) Schedule(p *Plan) {
	if p.cfg.ReplicateAfter <= 0 || !p.anyDown(p.cfg.ReplicateAfter) {
		return
	}
	for _, r := range p.snap.Ranges {
		if p.Full() {
			return
		}
		if !p.free(r) {
			continue
		}
		for _, rep := range r.Replicas {
			st := p.servers[rep.Server]
			if st == nil || st.downFor < p.cfg.ReplicateAfter {
				continue
			}
			if to := p.replicaTarget(r, st.id); to != nil {
				p.add(r, Op{Kind: Move, Range: r.ID, From: st.id, To: to.id, Rule: RuleReReplicate,
					Reason:  fmt.Sprintf("re-replicate: server %s is down", st.id),
					Figures: map[string]float64{"down_seconds": st.downFor.Seconds()}})
			}
			break
		}
	}
}

// anyDown reports whether a server has been down at least d.
func (p *Plan) anyDown(d time.Duration) bool {
	for _, st := range p.order {
		if st.downFor >= d {
			return true
		}
	}
	return false
}
