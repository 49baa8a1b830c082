package scheduler

import "fmt"

// mergeCold merges neighbours of one table that have both stayed below
// MergeLoad for MergeCooldown when their combined size is at most
// MergeBytes and the merged range stays at most half of SplitLoad and
// SplitBytes (farBelowSplit). A range split within MergeCooldown is never merged, so a
// split for load is not undone by a lull (no thrash).
type mergeCold struct{}

func (mergeCold) Name() string { return RuleMergeCold }

func (mergeCold) Schedule(p *Plan) {
	rs, cold := p.snap.Ranges, p.cold
	// cold lists, in order, the ranges cold and small enough to be half of
	// a merge; a pair is two neighbours of that list that are neighbours in
	// the snapshot, both still free.
	for k := 0; k+1 < len(cold); k++ {
		if p.Full() {
			return
		}
		i := cold[k]
		if cold[k+1] != i+1 {
			continue
		}
		a, b := rs[i], rs[i+1]
		if !p.free(a) || !p.free(b) || !p.mergeable(a, b) || !p.colocationFree(a, b) {
			continue
		}
		size := a.bytes() + b.bytes()
		o := Op{Kind: Merge, Range: a.ID, Right: b.ID, Rule: RuleMergeCold,
			Reason: fmt.Sprintf("neighbours below %.0f entities/s for %v", p.cfg.MergeLoad, p.cfg.MergeCooldown),
			Figures: map[string]float64{"left_entities_per_sec": a.entitiesPerSec(), "right_entities_per_sec": b.entitiesPerSec(),
				"bytes": float64(size)}}
		if p.add(a, o) {
			p.occupyColocation(a, b)
			k++ // b is taken: it cannot be the left of the next pair
		}
	}
}

// mergeable reports whether candidates a and b are adjacent, with as many
// replicas each (the master's co-location fails on differing counts,
// after moving replicas for nothing), small enough
// together, not split lately nor just merged (Plan.justMerged: a merged
// range's report leaves out the part it took over until its leader
// reports again, so merging it at once could exceed MergeBytes), have every replica on a server that
// stays (allStaying), and leave no more Raft groups than before
// (addsNoGroup).
func (p *Plan) mergeable(a, b *Range) bool {
	if a.bytes()+b.bytes() > p.cfg.MergeBytes || !p.farBelowSplit(a, b) {
		return false
	}
	if a.TableID != b.TableID || a.End != b.Start || a.End == "" || len(a.Replicas) != len(b.Replicas) {
		return false
	}
	return !p.splitLately(a.ID) && !p.splitLately(b.ID) && !p.justMerged(a) && !p.justMerged(b) &&
		p.allStaying(a) && p.allStaying(b) && p.colocationRoom(a, b) && p.addsNoGroup(a, b) && p.anchorAdmits(a, b)
}

// anchorAdmits reports whether a merge of b into a may bring b's rows
// into an anchor group: always when a is no span of one, or b is a span
// of the same group (the two spans merge in the group, one entry in its
// log, a span fewer); else only when the merged span is one homeGroup
// would admit into the group as a new table: under MergeLoad (and under
// half of SplitLoad, where detach-hot would take it out again) and
// MergeBytes, and the group's spans with b's bytes under SplitBytes
// (homeGroup's GroupBytes). A table split before spans stopped splitting
// in their group (its first range a span of an anchor group, the rest
// groups of their own) that cooled down is what the group is for: the
// merge ends b's group and leaves one range in the shared one, where
// refusing it would keep the table two ranges in two groups for good. But
// a merge may not make the span or the group what the detach rules or
// homeGroup would refuse: a span merged in at warm load or past
// homeGroup's bounds would leave again (detach-hot, detach-large) or
// close the group to new tables, so such a pair stays as it is. (Merging
// changes no group's span count: the cap is not at stake.)
func (p *Plan) anchorAdmits(a, b *Range) bool {
	if a.GroupID() == b.GroupID() || !p.anchorSpan(a) {
		return true
	}
	return p.spanFits(a.entitiesPerSec()+b.entitiesPerSec(), a.bytes()+b.bytes(), groupBytes(p.group(a))+b.bytes())
}

// spanFits reports whether a span carrying eps entities/s and holding
// bytes may come into an anchor group whose spans would then hold
// groupBytes together: under half of SplitLoad (where detach-hot would
// take it out again), FitsAnchorGroup, and AnchorGroupBytesFit under
// SplitBytes (homeGroup's two bounds for a new table). The one rule for a
// merge into a span (anchorAdmits) and an attach (attach-cold).
func (p *Plan) spanFits(eps float64, bytes, groupBytes uint64) bool {
	return eps < p.cfg.SplitLoad/2 && FitsAnchorGroup(eps, bytes, p.cfg.MergeLoad, p.cfg.MergeBytes) &&
		AnchorGroupBytesFit(groupBytes, p.cfg.SplitBytes)
}

// FitsAnchorGroup reports whether a span carrying eps entities/s and
// holding bytes is cold and small enough to sit in an anchor group: under
// mergeLoad and mergeBytes. The one rule for the master's homeGroup (a
// group takes a new table only while every span fits) and for merge-cold
// (anchorAdmits: a merge may bring a range into a group only as a span
// that fits).
func FitsAnchorGroup(eps float64, bytes uint64, mergeLoad float64, mergeBytes uint64) bool {
	return eps < mergeLoad && bytes < mergeBytes
}

// HomeCandidate is an anchor group as the order of homes sees it: its
// spans, how many Raft groups its leader leads, its anchor's range id.
type HomeCandidate struct {
	Spans, LeaderGroups int
	ID                  uint64
}

// BetterHome orders anchor groups for a new span: the most spans first
// (the fullest group with room, so that small tables fill one group while
// the spare waits empty: each group is a write lane at the front-end and
// a Raft entry at a time, docs/performance.md "Session 37"), then the
// leader leading the fewest groups, then the lowest id. The one order for
// the master's homeGroup (a new table) and attach-cold (a table's own
// group joining one).
func BetterHome(a, b HomeCandidate) bool {
	if a.Spans != b.Spans {
		return a.Spans > b.Spans
	}
	if a.LeaderGroups != b.LeaderGroups {
		return a.LeaderGroups < b.LeaderGroups
	}
	return a.ID < b.ID
}

// AnchorGroupBytesFit reports whether an anchor group whose spans hold
// groupBytes together may take more (limit 0: no bound; the master passes
// SplitBytes): a group's snapshot carries every span. homeGroup's and
// anchorAdmits' one bound.
func AnchorGroupBytesFit(groupBytes, limit uint64) bool {
	return limit == 0 || groupBytes < limit
}

// groupBytes is the bytes g's spans last reported, together.
func groupBytes(g *groupStat) uint64 {
	var n uint64
	for _, sp := range g.spans {
		n += sp.bytes()
	}
	return n
}

// addsNoGroup reports whether merging b into a leaves no more Raft groups
// than before. A group is what a range costs (its log stream, heartbeats,
// snapshots; docs/range-groups.md), and before a merge across groups the
// master takes b out of its group (isolateAdds), and the merge then ends
// b's group: a span born in a group leaves it as a group of its own (as
// many groups as before, one range fewer); for the group's namesake every
// other span leaves instead, each a group of its own, so a merge into the
// namesake of a group of n ranges left n-2 more groups than before. Such a
// pair waits: the group's spans merge among themselves (one entry in its
// log, no freeze) until the namesake shares its group with at most one
// (scenario merge_keeps_groups_whole).
func (p *Plan) addsNoGroup(a, b *Range) bool {
	return a.GroupID() == b.GroupID() || p.isolateAdds(b) <= 1
}

// colocationRoom reports whether every server a merge of a and b adds a
// replica to (colocation's into) has room for b's (roomFor: a merge's
// co-location is a move like any other, and must not fill a low disk).
func (p *Plan) colocationRoom(a, b *Range) bool {
	into, _ := colocation(a, b)
	for _, s := range into {
		if st := p.stat(s); st != nil && !st.roomFor(b) {
			return false
		}
	}
	return true
}

// farBelowSplit reports whether a and b merged would stay at most half of
// SplitLoad and of SplitBytes (when set): the hysteresis between merging
// and splitting. Each being below MergeLoad is not enough: with a
// MergeLoad above half of SplitLoad (or a MergeBytes above half of
// SplitBytes) two halves of a split were merged back into a range over the
// threshold, split again, and so on every MergeCooldown
// (scenario merge_combined_below_split).
func (p *Plan) farBelowSplit(a, b *Range) bool {
	if a.entitiesPerSec()+b.entitiesPerSec() > p.cfg.SplitLoad/2 {
		return false
	}
	return p.cfg.SplitBytes == 0 || a.bytes()+b.bytes() <= p.cfg.SplitBytes/2
}

// allStaying reports whether every replica of r is on a live server that
// is neither silent nor draining. A merge first moves the right range's replicas onto
// the left range's servers (the master's co-location: a new replica on
// each), then freezes the right range on every replica and waits for each
// to apply the freeze. With a replica on a down server one of those steps
// cannot finish: the merge failed after holding both ranges busy for up
// to the operation timeout (re-replication of the same ranges waited
// behind it), and was proposed again every pass while the ranges stayed
// cold. It waits until the server is back or re-replication replaced its
// replicas. A silent server (live, not heard from lately) is treated as
// down: it may be, and the reports of the ranges it leads are stale. With
// one on a draining server, the co-location could add a
// replica there that the drain must move again (and the drain's moves of
// both ranges wait behind the merge): it waits for the drain. Likewise
// with one on a server whose disk is full, whose replicas are leaving, and
// with a broken replica (it applies no freeze; re-replication replaces
// it).
func (p *Plan) allStaying(r *Range) bool {
	for _, rep := range r.Replicas {
		if st := p.stat(rep.Server); st == nil || rep.Broken || !st.live || st.silent || st.draining || st.diskState == DiskFull {
			return false
		}
	}
	return true
}

func (p *Plan) coldFor(r *Range) bool {
	return r.Load != nil && !r.ColdSince.IsZero() && p.snap.Now.Sub(r.ColdSince) >= p.cfg.MergeCooldown
}

// splitLately reports whether a recent split made or cut range id (the
// right half of a split is not known by id before it runs, so a split of
// either neighbour's left part counts through its Range).
func (p *Plan) splitLately(id uint64) bool {
	for _, o := range p.snap.Recent {
		if o.Kind == Split && (o.Range == id || o.Right == id) && p.snap.Now.Sub(o.At) < p.cfg.MergeCooldown {
			return true
		}
	}
	return false
}
