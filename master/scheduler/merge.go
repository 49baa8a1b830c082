package scheduler

import "fmt"

// mergeCold merges neighbours of one table that have both stayed below
// MergeLoad for MergeCooldown when their combined size is at most
// MergeBytes. A range split within MergeCooldown is never merged, so a
// split for load is not undone by a lull (no thrash).
type mergeCold struct{}

func (mergeCold) Name() string { return RuleMergeCold }

func (mergeCold) Schedule(p *Plan) {
	rs := p.snap.Ranges
	// Whether a range is cold and small enough is asked once per range
	// (as the right of one pair, then the left of the next).
	small := len(rs) > 0 && p.candidate(rs[0])
	for i := 0; i+1 < len(rs); i++ {
		if p.Full() {
			return
		}
		a, b := rs[i], rs[i+1]
		leftOK := small
		small = p.candidate(b)
		if !leftOK || !small || !p.mergeable(a, b) {
			continue
		}
		size := a.bytes() + b.bytes()
		o := Op{Kind: Merge, Range: a.ID, Right: b.ID, Rule: RuleMergeCold,
			Reason: fmt.Sprintf("neighbours below %.0f entities/s for %v", p.cfg.MergeLoad, p.cfg.MergeCooldown),
			Figures: map[string]float64{"left_entities_per_sec": a.entitiesPerSec(), "right_entities_per_sec": b.entitiesPerSec(),
				"bytes": float64(size)}}
		if p.add(a, o) {
			i++
		}
	}
}

// candidate reports whether r could be half of a merge: cold for long
// enough, free, and under merge-bytes alone.
func (p *Plan) candidate(r *Range) bool {
	return p.coldFor(r) && r.bytes() <= p.cfg.MergeBytes && p.free(r)
}

// mergeable reports whether candidates a and b are adjacent, small enough
// together, and not split lately.
func (p *Plan) mergeable(a, b *Range) bool {
	if a.bytes()+b.bytes() > p.cfg.MergeBytes {
		return false
	}
	if a.TableID != b.TableID || a.End != b.Start || a.End == "" {
		return false
	}
	return !p.splitLately(a.ID) && !p.splitLately(b.ID)
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
