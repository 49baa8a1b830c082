package scheduler

import (
	"fmt"
	"time"
)

// reReplicate moves the replicas of a server that has been down for
// ReplicateAfter to the live servers holding the fewest replicas: data
// safety comes before load, so it runs first. A replica its server
// reports broken (Replica.Broken: its open failed persistently) is
// replaced the same way, at once (its server already found the failure
// persistent); when no other server can take it, it is replaced in place
// (a Move from its server to the same server: the master removes it,
// deletes it and adds a new, empty replica there).
type reReplicate struct{}

func (reReplicate) Name() string { return RuleReReplicate }

func (reReplicate) Schedule(p *Plan) {
	if p.cfg.ReplicateAfter <= 0 || (!p.anyBroken && !p.anyDown(p.cfg.ReplicateAfter)) {
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
			switch {
			case st == nil:
			case st.downFor >= p.cfg.ReplicateAfter:
				if to := p.replicaTarget(r, st.id); to != nil {
					p.add(r, Op{Kind: Move, Range: r.ID, From: st.id, To: to.id, Rule: RuleReReplicate,
						Reason:  fmt.Sprintf("re-replicate: server %s is down", st.id),
						Figures: map[string]float64{"down_seconds": st.downFor.Seconds()}})
				}
			case rep.Broken:
				p.replaceBroken(r, st)
			default:
				continue
			}
			break
		}
	}
}

// replaceBroken plans the replacement of r's broken replica on st: on the
// server replicaTarget picks, else in place on st if it can host it.
func (p *Plan) replaceBroken(r *Range, st *serverStat) {
	to := p.replicaTarget(r, st.id)
	if to == nil && p.canHost(st) && st.roomFor(r) {
		to = st
	}
	if to == nil {
		return
	}
	p.add(r, Op{Kind: Move, Range: r.ID, From: st.id, To: to.id, Rule: RuleReReplicate,
		Reason: fmt.Sprintf("re-replicate: the replica on %s is broken", st.id)})
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
