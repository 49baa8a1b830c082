package scheduler

import "fmt"

// splitSize splits a range larger than SplitBytes at its size median (the
// range's leader picks the key).
type splitSize struct{}

func (splitSize) Name() string { return RuleSplitSize }

func (splitSize) Schedule(p *Plan) {
	if p.cfg.SplitBytes == 0 {
		return
	}
	for _, r := range p.snap.Ranges {
		if p.Full() {
			return
		}
		if !p.free(r) || r.bytes() <= p.cfg.SplitBytes {
			continue
		}
		p.add(r, Op{Kind: Split, Range: r.ID, To: p.RightLeader(r), Rule: RuleSplitSize,
			Reason:  fmt.Sprintf("size %d bytes over %d", r.bytes(), p.cfg.SplitBytes),
			Figures: map[string]float64{"bytes": float64(r.bytes())}})
	}
}
