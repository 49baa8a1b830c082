package scheduler

import (
	"fmt"
	"time"
)

// reReplicate moves the replicas of a server that has been down for
// ReplicateAfter to the live servers holding the fewest replicas: data
// safety comes before load, so it runs first. A replica its server
// reports broken (Replica.Broken: its open found its files damaged) is
// replaced the same way, at once (opening it again cannot help); when no
// other server could ever take it, it is replaced in place (a Move from
// its server to the same server: the master removes it, deletes it and
// adds a new, empty replica there). Both need ReplicateAfter > 0: with
// re-replication off, a broken replica is not replaced either.
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
				// Not registered (removed): nothing to judge it by; the
				// range's other replicas are still looked at.
				continue
			case st.downFor >= p.cfg.ReplicateAfter:
				p.replaceDown(r, st)
			case rep.Broken:
				p.replaceBroken(r, st)
			default:
				continue
			}
			break
		}
	}
}

// replaceDown plans the move of r's replica off st, down for
// ReplicateAfter, to the server replicaTarget picks: for a range that
// shares its Raft group, the group whole (moveUnit).
func (p *Plan) replaceDown(r *Range, st *serverStat) {
	unit, whole := p.moveUnit(r)
	if unit == nil {
		return
	}
	if to := p.replicaTarget(unit, st.id); to != nil {
		p.addMove(r, whole, Op{Kind: Move, Range: r.ID, From: st.id, To: to.id, Rule: RuleReReplicate,
			Reason:  fmt.Sprintf("re-replicate: server %s is down", st.id),
			Figures: map[string]float64{"down_seconds": st.downFor.Seconds()}})
	}
}

// replaceBroken plans the replacement of r's broken replica on st: on the
// server replicaTarget picks, else in place on st if it can host it and
// no other server could ever take it (otherHost). In place removes the
// broken voter before its replacement exists, so it is the last resort: a
// server that cannot take the replica only for now (silent, a low disk,
// no move to spare) is waited for. For a range that shares its Raft
// group, the group's replica on st is replaced whole (brokenUnit).
func (p *Plan) replaceBroken(r *Range, st *serverStat) {
	r, unit, whole := p.brokenUnit(r)
	if unit == nil {
		return
	}
	to := p.replicaTarget(unit, st.id)
	if to == nil && p.canHost(st) && st.roomFor(unit) && !p.otherHost(unit, st) {
		to = st
	}
	if to == nil {
		return
	}
	p.addMove(r, whole, Op{Kind: Move, Range: r.ID, From: st.id, To: to.id, Rule: RuleReReplicate,
		Reason: fmt.Sprintf("re-replicate: the replica on %s is broken", st.id)})
}

// brokenUnit is what replacing r's broken replica moves, planned on the
// range it returns: r alone in its Raft group; else the group whole,
// planned through its mover (moveUnit; nil while it must wait). A
// partition server hosts a group as one replica (one Raft member, one
// log, the spans' states opened together): when its open finds the files
// damaged the whole replica is broken, and every span it knows reports
// "broken". Replacing one span would first take it out of the group
// (isolate), whose entry the broken replica never applies, and leave the
// other spans broken on that server; the replica to replace is the
// group's. Planned through the mover whichever span's report the pass
// meets first: a span the broken copy does not know (added after its
// last good state) is reported missing there, not broken.
func (p *Plan) brokenUnit(r *Range) (*Range, *Range, bool) {
	if p.shared(r) {
		r = groupMover(p.group(r))
	}
	unit, whole := p.moveUnit(r)
	return r, unit, whole
}

// otherHost reports whether a server other than st could ever take a
// replica of r: registered, not draining, and holding none of r, whatever
// its state now (down, silent, its disk low or full).
func (p *Plan) otherHost(r *Range, st *serverStat) bool {
	for _, o := range p.order {
		if o != st && !o.draining && !r.HasReplica(o.id) {
			return true
		}
	}
	return false
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
