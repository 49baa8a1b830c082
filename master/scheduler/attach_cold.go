package scheduler

import (
	"fmt"
	"slices"
	"time"
)

// attachCold takes a table that is one range in a Raft group of its own
// into an anchor group as a span, its rows where they are (the master's
// attach: co-location of its replicas onto the group's servers, a
// freeze, one ATTACH_SPAN entry in the group's log; docs/range-groups.md,
// stage 8). Such tables stay in a group each for good otherwise: those
// created before the upgrade or while no anchor group could take them,
// and a span that left its group hot or large and cooled down since. A
// group per table is what made inserts spread over 1,000 tables ~20x
// slower than in shared groups (docs/performance.md).
//
// A range R attaches to an anchor group G when (attachable, homeAdmits):
//   - R is its table's only range and its group's only range, not an
//     anchor, frozen, busy or pending;
//   - R is on the cold list merge-cold uses (under MergeLoad for
//     MergeCooldown, at most MergeBytes), and fits G as merge-cold's
//     anchorAdmits would have it (spanFits: under half of SplitLoad,
//     FitsAnchorGroup, G's bytes with R's under SplitBytes), so that
//     detach-hot and detach-large do not take it out again;
//   - R was not split, merged or detached (an isolate, whichever rule)
//     within MergeCooldown (attachHistory);
//   - G has room and is whole and healthy (attachHomes): fewer spans
//     than AnchorGroupSpans (0: no cap, and then no attach, as homeGroup
//     admits nothing then), every span fitting (FitsAnchorGroup) and
//     free, its leader known, every replica present and not broken on a
//     server that is live, not silent, draining, slow, clock-skewed or
//     full: the co-location puts R on every one of them, and the freeze
//     and the entry wait on every one;
//   - every server of R's group and of G announces attach_spans, every
//     replica of R is on a staying server (allStaying), present, R has
//     as many replicas as G (the co-location pairs them), and the
//     servers R's replicas move to have room for its bytes and a move to
//     spare (colocationRoom, colocationFree).
//
// The group chosen is the one the master's homeGroup would pick for a new
// table (BetterHome, the order both use): the most spans, then the leader
// leading the fewest groups, then the lowest id. An attach occupies R,
// the anchor and every span of G (Plan.add), so a pass plans at most one
// per group. Off unless Config.AttachCold (the master's --table-groups).
type attachCold struct{}

func (attachCold) Name() string { return RuleAttachCold }

func (attachCold) Schedule(p *Plan) {
	if !p.cfg.AttachCold || p.cfg.AnchorGroupSpans <= 0 {
		return
	}
	homes := p.attachHomes()
	if len(homes) == 0 {
		return
	}
	for _, i := range p.cold {
		if p.Full() {
			return
		}
		r := p.snap.Ranges[i]
		if !p.attachable(i, r) {
			continue
		}
		for _, h := range homes {
			if p.homeAdmits(h, r) {
				if p.add(r, p.attachOp(h, r)) {
					p.occupyColocation(h.anchor, r)
				}
				break
			}
		}
	}
}

// attachHome is an anchor group that may take a range: its anchor, its
// spans (the anchor alone when none other) and their bytes together.
type attachHome struct {
	anchor *Range
	spans  []*Range
	bytes  uint64
}

// attachHomes returns the anchor groups with room, whole and healthy
// (attachGroupOK), in homeOrder.
func (p *Plan) attachHomes() []attachHome {
	var out []attachHome
	for _, r := range p.snap.Ranges {
		if !r.Anchor || r.GroupID() != r.ID {
			continue
		}
		h := attachHome{anchor: r, spans: []*Range{r}}
		if g := p.group(r); g != nil {
			h.spans = g.spans
		}
		if len(h.spans) >= p.cfg.AnchorGroupSpans || !p.attachGroupOK(h) {
			continue
		}
		for _, sp := range h.spans {
			h.bytes += sp.bytes()
		}
		out = append(out, h)
	}
	p.homeOrder(out)
	return out
}

// attachGroupOK reports whether h can take a span now, whatever the span:
// its leader known, every span fitting an anchor group (as homeGroup's
// statsOf: a span without a report counts as fitting) and not frozen, and
// every replica of every span fit for the co-location and the entry
// (attachServerOK, present, not broken).
func (p *Plan) attachGroupOK(h attachHome) bool {
	if h.anchor.Leader == "" || !h.anchor.HasReplica(h.anchor.Leader) {
		return false
	}
	for _, sp := range h.spans {
		if sp.Frozen || (sp.Load != nil && !FitsAnchorGroup(sp.Load.EntitiesPerSec, sp.Load.Bytes, p.cfg.MergeLoad, p.cfg.MergeBytes)) {
			return false
		}
		if !p.attachReplicasOK(sp) {
			return false
		}
	}
	return true
}

// attachReplicasOK reports whether every replica of r is present, not
// broken, on a server attachServerOK.
func (p *Plan) attachReplicasOK(r *Range) bool {
	for _, rep := range r.Replicas {
		if rep.Missing || rep.Broken || !p.attachServerOK(p.stat(rep.Server)) {
			return false
		}
	}
	return true
}

// attachServerOK reports whether st may take part in an attach: it
// announces attach_spans and is live, not silent, draining, slow,
// clock-skewed or full.
func (p *Plan) attachServerOK(st *serverStat) bool {
	return st != nil && st.attachSpans && st.live && !st.silent && !st.draining && !st.slow && !st.skewed && st.diskState != DiskFull
}

// homeOrder sorts homes in BetterHome's order, the master's homeGroup's.
func (p *Plan) homeOrder(homes []attachHome) {
	led := map[string]int{}
	for _, h := range homes {
		if _, ok := led[h.anchor.Leader]; !ok {
			led[h.anchor.Leader] = p.groupsLed(h.anchor.Leader)
		}
	}
	cand := func(h attachHome) HomeCandidate {
		return HomeCandidate{Spans: len(h.spans), LeaderGroups: led[h.anchor.Leader], ID: h.anchor.ID}
	}
	slices.SortFunc(homes, func(a, b attachHome) int {
		switch ca, cb := cand(a), cand(b); {
		case BetterHome(ca, cb):
			return -1
		case BetterHome(cb, ca):
			return 1
		}
		return 0
	})
}

// groupsLed counts the Raft groups whose ranges server is reported
// leading.
func (p *Plan) groupsLed(server string) int {
	var seen idSet
	n := 0
	for _, r := range p.ledBy(server) {
		if g := r.GroupID(); !seen.has(g) {
			seen.add(g)
			n++
		}
	}
	return n
}

// attachable reports whether r, the range at index i of the snapshot, may
// be attached to some anchor group, whichever: see attachCold.
func (p *Plan) attachable(i int, r *Range) bool {
	if r.Anchor || r.Pending || !p.free(r) || r.GroupID() != r.ID || p.group(r) != nil || !p.onlyRangeOfTable(i, r) {
		return false
	}
	return r.Leader != "" && p.attachHistory(r) && p.allStaying(r) && p.announcesAttach(r)
}

// announcesAttach reports whether every replica of r is present on a
// server that announces attach_spans.
func (p *Plan) announcesAttach(r *Range) bool {
	for _, rep := range r.Replicas {
		if st := p.stat(rep.Server); rep.Missing || st == nil || !st.attachSpans {
			return false
		}
	}
	return true
}

// onlyRangeOfTable reports whether r, at index i of the snapshot (sorted
// by table, then start), is its table's only range: it spans every key
// and neither neighbour is of its table.
func (p *Plan) onlyRangeOfTable(i int, r *Range) bool {
	rs := p.snap.Ranges
	return r.Start == "" && r.End == "" && (i == 0 || rs[i-1].TableID != r.TableID) &&
		(i+1 == len(rs) || rs[i+1].TableID != r.TableID)
}

// attachHistory reports whether r's recent history allows an attach: no
// split made or cut it (splitLately), it took over no neighbour
// (mergedAt) and no isolate took it out of a group (detachedAt) within
// MergeCooldown, each as the plan knows from the operations in flight
// and recent (Snapshot.Recent, kept for RecentWindow, at least
// MergeCooldown). A span that left its group for being hot or large
// must not bounce straight back; its cold trend alone would not hold it
// (detach-large and detach-over-cap do not go by load).
func (p *Plan) attachHistory(r *Range) bool {
	return !p.splitLately(r.ID) && !p.within(p.mergedAt[r.ID], p.cfg.MergeCooldown) &&
		!p.within(p.detachedAt[r.ID], p.cfg.MergeCooldown)
}

// homeAdmits reports whether h may take r now: every span of h free
// (an attach planned this pass occupies them), r fitting h (spanFits),
// as many replicas as the group, and room and a move to spare where the
// co-location puts r's replicas.
func (p *Plan) homeAdmits(h attachHome, r *Range) bool {
	for _, sp := range h.spans {
		if !p.free(sp) {
			return false
		}
	}
	return p.spanFits(r.entitiesPerSec(), r.bytes(), h.bytes+r.bytes()) && len(r.Replicas) == len(h.anchor.Replicas) &&
		p.colocationRoom(h.anchor, r) && p.colocationFree(h.anchor, r)
}

// attachOp is the Attach of r to h's group.
func (p *Plan) attachOp(h attachHome, r *Range) Op {
	return Op{Kind: Attach, Range: r.ID, Group: h.anchor.ID, Rule: RuleAttachCold,
		Reason: fmt.Sprintf("one range in a group of its own, below %.0f entities/s for %v", p.cfg.MergeLoad, p.snap.Now.Sub(r.ColdSince).Round(time.Millisecond)),
		Figures: map[string]float64{"entities_per_sec": r.entitiesPerSec(), "bytes": float64(r.bytes()),
			"group_spans": float64(len(h.spans)), "group_bytes": float64(h.bytes)}}
}
