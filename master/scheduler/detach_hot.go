package scheduler

import (
	"fmt"
	"slices"
	"time"
)

// detachHot takes a span out of its anchor group (docs/range-groups.md,
// stage 7, step 7) when it gets hot or large, so that a busy table stops
// sharing Raft entries with cold ones and a large one stops riding in
// every snapshot of the group:
//
//   - detach-hot: the span carried at least half of SplitLoad for
//     SplitWindow (Trend.WarmSince, counted from its last split as
//     split-load counts). Half, so that it leaves before split-load would
//     split it; the split of a span would keep its left half in the
//     shared group (the right half a group of its own), and sharing costs
//     per entry, so a table at half the split load already pays for the
//     others' batching with its own.
//   - detach-large: its bytes pass detachBytes (MergeBytes, or SplitBytes
//     when lower): homeGroup admits a table only to a group whose spans are
//     all under MergeBytes, so a span past it would keep the group closed
//     to new tables for good, and a group's snapshot carries every span.
//
// The op is an Isolate of the span (the master's isolate: one DETACH_SPAN
// entry in the group's log, the span then a group of its own on the same
// replicas, led where the group is). The anchor never leaves (isolating
// it would detach every table). The group must be idle: every range of it
// free (none busy or frozen) and no in-group split of this pass adding to
// it, since the master's isolate claims every range of the group; one
// isolate per group per pass (Plan.add occupies the group). A span whose
// leader stopped reporting, with a replica on a full disk or broken, or
// whose isolate failed within SplitWindow waits. It runs before
// split-load and split-size, which never split a span of an anchor group
// (Plan.unsplittable): a hot or large span leaves first and splits, if it
// still must, as a group of its own.
type detachHot struct{}

func (detachHot) Name() string { return RuleDetachHot }

func (detachHot) Schedule(p *Plan) {
	for _, g := range p.anchorGroups() {
		if !p.groupIdle(g) {
			continue
		}
		for _, r := range g.spans {
			if p.Full() {
				return
			}
			if o, ok := p.detachOp(r); ok && p.add(r, o) {
				break // the group is busy now
			}
		}
	}
}

// anchorGroups are the Raft groups of several ranges whose namesake is an
// anchor (Range.Anchor), in group id order.
func (p *Plan) anchorGroups() []*groupStat {
	var ids []uint64
	for id, g := range p.groups {
		for _, sp := range g.spans {
			if sp.ID == id && sp.Anchor {
				ids = append(ids, id)
				break
			}
		}
	}
	slices.Sort(ids)
	out := make([]*groupStat, len(ids))
	for i, id := range ids {
		out[i] = p.groups[id]
	}
	return out
}

// anchorSpan reports whether r is a span of an anchor group other than
// the anchor: such a range leaves its group rather than split in it.
func (p *Plan) anchorSpan(r *Range) bool {
	if r.GroupID() == r.ID {
		return false
	}
	g := p.group(r)
	if g == nil {
		return false
	}
	for _, sp := range g.spans {
		if sp.ID == r.GroupID() {
			return sp.Anchor
		}
	}
	return false
}

// groupIdle reports whether an isolate may start in g: every range free
// and none added by a split of this pass.
func (p *Plan) groupIdle(g *groupStat) bool {
	if g.n != len(g.spans) {
		return false
	}
	for _, sp := range g.spans {
		if !p.free(sp) {
			return false
		}
	}
	return true
}

// mayLeave reports whether r may leave its anchor group now, whichever
// rule asks (detach-hot, detach-large, detach-over-cap): a span the group
// serves (not the anchor, not a pending add, reported), its leader
// reporting, no replica on a full disk or broken, no isolate of it failed
// lately.
func (p *Plan) mayLeave(r *Range) bool {
	return p.anchorSpan(r) && !r.Pending && r.Load != nil && !p.staleLeader(r) && !p.onFullDisk(r) &&
		!r.anyBroken() && !p.isolateFailedLately(r)
}

// detachOp is the Isolate of r planned by detach-hot or detach-large, ok
// false when r is the anchor, neither hot nor large enough, or must wait.
func (p *Plan) detachOp(r *Range) (Op, bool) {
	if !p.mayLeave(r) {
		return Op{}, false
	}
	o := Op{Kind: Isolate, Range: r.ID, Group: r.GroupID(), From: r.Leader,
		Figures: map[string]float64{"group_ranges": float64(p.groupSize(r))}}
	if warm := p.warmFor(r); warm >= p.cfg.SplitWindow {
		l := r.entitiesPerSec()
		o.Rule = RuleDetachHot
		o.Reason = fmt.Sprintf("load %.0f entities/s over %.0f (half of split-load) for %v in a shared group", l, p.cfg.SplitLoad/2, warm.Round(time.Millisecond))
		o.Figures["entities_per_sec"], o.Figures["window_seconds"] = l, warm.Seconds()
		return o, true
	}
	if limit := p.cfg.detachBytes(); r.bytes() > limit && !p.justSplit(r) && !p.justMerged(r) {
		o.Rule = RuleDetachLarge
		o.Reason = fmt.Sprintf("size %d bytes over %d in a shared group", r.bytes(), limit)
		o.Figures["bytes"] = float64(r.bytes())
		return o, true
	}
	return Op{}, false
}

// warmFor is how long r has carried at least half of SplitLoad as it is
// now (hotFor's rule: since its trend turned warm, or hot when that is
// earlier or the only one set, or since its last split, whichever is
// later); 0 when it does not.
func (p *Plan) warmFor(r *Range) time.Duration {
	since := r.WarmSince
	if !r.HotSince.IsZero() && (since.IsZero() || r.HotSince.Before(since)) {
		since = r.HotSince
	}
	if since.IsZero() {
		return 0
	}
	if t := p.splitAt[r.ID]; t.After(since) {
		since = t
	}
	return p.snap.Now.Sub(since)
}

// isolateFailedLately reports whether an isolate of r failed within
// SplitWindow: the master retries it after that, not at every pass.
func (p *Plan) isolateFailedLately(r *Range) bool {
	for _, o := range p.snap.Recent {
		if o.Kind == Isolate && o.Range == r.ID && o.Failed && p.snap.Now.Sub(o.Last()) < p.cfg.SplitWindow {
			return true
		}
	}
	return false
}

// detachBytes is the size past which a span leaves its anchor group:
// MergeBytes, or SplitBytes when that is set and lower (a span never
// grows to a size split in the group).
func (c *Config) detachBytes() uint64 {
	if c.SplitBytes > 0 && c.SplitBytes < c.MergeBytes {
		return c.SplitBytes
	}
	return c.MergeBytes
}
