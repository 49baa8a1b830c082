package scheduler

import (
	"cmp"
	"fmt"
	"slices"
)

// detachOverCap takes spans out of an anchor group that serves more than
// AnchorGroupSpans (the master's --table-group-spans), one span per
// group per pass, until it serves no more than the cap. The group's apply
// refuses a new span at the cap (ADD_SPAN's max_spans), so such a group
// comes from elsewhere: a group filled by a build before that check, or
// a create whose add the cap refused, added again without the cap and
// then to be detached (the master's addSpanCapped and leaveFullGroup),
// whose master died between the two. Nothing else would ever take those
// spans out: homeGroup stops adding, but a cold span stays for good.
//
// The span that leaves is the newest (the highest range id): range ids
// grow with creates, so the spans beyond the cap in id order are the ones
// the cap would have refused, and the span a dying master meant to
// detach is the newest of its group. The choice stays the same from pass
// to pass (bytes and load move with every report), and it does not do
// detach-large's work on other figures: the cap bounds a group's count
// (its per-span costs: a batch's and a snapshot's overhead per span, the
// spans a joiner or a restarted replica opens), and a span's size has its
// own rule and bound. The newest is also the youngest table, the least
// likely to hold much.
//
// It is detach-hot's isolate (the master's isolateSpan, one DETACH_SPAN
// entry) under detach-hot's conditions: the group idle (every range free,
// none added by a split of the pass: the master's isolate claims every
// range of the group), the span's leader reporting, no replica on a full
// disk or broken, no isolate of it failed within SplitWindow (the next
// newest goes instead). A pending add (Range.Pending) is neither counted
// (the group does not serve it; the apply's cap will refuse it if the
// group is full) nor taken out. It runs after detach-hot, whose isolate
// of a hot span already brings the group's count down (one per group per
// pass: the group is busy then).
type detachOverCap struct{}

func (detachOverCap) Name() string { return RuleDetachOverCap }

func (detachOverCap) Schedule(p *Plan) {
	if p.cfg.AnchorGroupSpans <= 0 {
		return
	}
	for _, g := range p.anchorGroups() {
		if p.Full() {
			return
		}
		n := servedSpans(g)
		if n <= p.cfg.AnchorGroupSpans || !p.groupIdle(g) {
			continue
		}
		for _, r := range newestFirst(g.spans) {
			if p.mayLeave(r) && p.add(r, p.overCapOp(r, n)) {
				break // the group is busy now
			}
		}
	}
}

// servedSpans counts the ranges g serves: its spans but the pending adds
// (as the group's apply counts them for its cap: the anchor and frozen
// spans included).
func servedSpans(g *groupStat) int {
	n := 0
	for _, sp := range g.spans {
		if !sp.Pending {
			n++
		}
	}
	return n
}

// newestFirst returns spans by range id, highest first.
func newestFirst(spans []*Range) []*Range {
	out := slices.Clone(spans)
	slices.SortFunc(out, func(a, b *Range) int { return cmp.Compare(b.ID, a.ID) })
	return out
}

// overCapOp is the Isolate of r from its anchor group of n served spans.
func (p *Plan) overCapOp(r *Range, n int) Op {
	return Op{Kind: Isolate, Range: r.ID, Group: r.GroupID(), From: r.Leader, Rule: RuleDetachOverCap,
		Reason:  fmt.Sprintf("group of %d spans over the cap of %d (--table-group-spans): its newest span leaves", n, p.cfg.AnchorGroupSpans),
		Figures: map[string]float64{"group_ranges": float64(n), "cap": float64(p.cfg.AnchorGroupSpans)}}
}
