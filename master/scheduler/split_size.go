package scheduler

import "fmt"

// splitSize splits a range larger than SplitBytes at its size median (the
// range's leader picks the key), unless it was split within SplitWindow:
// until its leader reports again, the left half of a split carries the
// whole old range's report, bytes included (scenario
// split_size_stale_report), or its size split failed lately (while the
// failure is in Snapshot.Recent: the longest cooldown). A size split can
// fail for good: one PartitionKey larger than SplitBytes has no size
// median (a PartitionKey never spans two ranges), and each attempt walks
// the whole range on its leader (scenario split_size_failed_backoff).
type splitSize struct{}

func (splitSize) Name() string { return RuleSplitSize }

func (splitSize) Schedule(p *Plan) {
	for _, r := range p.big {
		if p.Full() {
			return
		}
		if !p.free(r) || p.staleLeader(r) || p.justSplit(r) || p.sizeFailed.has(r.ID) || p.unsplittable(r) {
			continue
		}
		p.add(r, Op{Kind: Split, Range: r.ID, From: r.Leader, To: p.RightLeader(r), Rule: RuleSplitSize,
			Reason:  fmt.Sprintf("size %d bytes over %d", r.bytes(), p.cfg.SplitBytes),
			Figures: map[string]float64{"bytes": float64(r.bytes())}})
	}
}
