package scheduler

import "slices"

// Moving a Raft group whole (docs/range-groups.md, stage 7 step 6). The
// rules that must move a given replica off its server (re-replication of
// a dead server, drain, zone diversity, a full disk) move a group that
// serves several ranges as one unit: one membership change for every
// span (the master's moveGroup), planned once, through the group's
// namesake, with every range of the group occupied. Moving one span alone
// would first take it out of its group (Server.isolate: for the namesake,
// every sibling leaves), so a dead server's group of n spans became n
// groups. Replica balance and a broken replica's replacement move such a
// group whole too (movableReplica, replaceBroken); nothing the scheduler
// plans isolates a span for a move any more.

// moveUnit is what a forced move of r's replica moves: r itself when r is
// alone in its Raft group (whole false); for a group of several ranges,
// when r is the range the group is planned through (groupMover) and the
// group may move whole now (wholeMovable), r standing for the group, its
// bytes the sum of its ranges' (the move's snapshot carries every span;
// the disk rules weigh that), with whole set; nil when r's group is
// planned through another of its ranges or must wait.
func (p *Plan) moveUnit(r *Range) (unit *Range, whole bool) {
	if !p.shared(r) {
		return r, false
	}
	g := p.group(r)
	if groupMover(g) != r || !p.wholeMovable(g) {
		return nil, false
	}
	u := *r
	u.Load = &Load{}
	if r.Load != nil {
		*u.Load = *r.Load
	}
	u.Load.Bytes = 0
	for _, sp := range g.spans {
		u.Load.Bytes += sp.bytes()
	}
	return &u, true
}

// groupMover is the range a whole move of g is planned through: its
// namesake, or its first range in the snapshot when the map no longer
// holds the namesake (merged away by a master that did not isolate it).
func groupMover(g *groupStat) *Range {
	for _, sp := range g.spans {
		if sp.ID == sp.GroupID() {
			return sp
		}
	}
	return g.spans[0]
}

// wholeMovable reports whether g may move whole now: every range of it is
// free (none frozen for a merge, whose leader refuses a membership
// change; none busy), no split of this pass adds to it, and every range
// lists the same servers (after a membership change, until every span's
// new descriptor is in the map, they may not).
func (p *Plan) wholeMovable(g *groupStat) bool {
	if g.n != len(g.spans) {
		return false
	}
	want := replicaServers(g.spans[0])
	for _, sp := range g.spans {
		if !p.free(sp) || !slices.Equal(replicaServers(sp), want) {
			return false
		}
	}
	return true
}

// replicaServers are r's replicas' servers, sorted.
func replicaServers(r *Range) []string {
	out := make([]string, 0, len(r.Replicas))
	for _, rep := range r.Replicas {
		out = append(out, rep.Server)
	}
	slices.Sort(out)
	return out
}

// addMove plans a forced move o of unit's replica (moveUnit), planned on
// r: with whole, it moves r's Raft group whole (Op.Whole, Op.Group, the
// figure group_ranges).
func (p *Plan) addMove(r *Range, whole bool, o Op) bool {
	if whole {
		o.Whole, o.Group = true, r.GroupID()
		if o.Figures == nil {
			o.Figures = map[string]float64{}
		}
		o.Figures["group_ranges"] = float64(len(p.group(r).spans))
	}
	return p.add(r, o)
}

// wholeMoveSpans are the ranges a whole move planned on r moves: every
// range of r's group (add occupies them all and counts each as a replica
// moved).
func (p *Plan) wholeMoveSpans(r *Range, o Op) []*Range {
	if !o.Whole || !p.shared(r) {
		return []*Range{r}
	}
	return p.group(r).spans
}
