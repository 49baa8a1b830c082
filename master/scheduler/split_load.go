package scheduler

import (
	"fmt"
	"sort"
	"time"
)

// splitLoad splits a range that has carried more than SplitLoad for
// SplitWindow (counted from its last split: see Plan.hotFor) at the
// load-weighted median PartitionKey, unless one key
// carries SingleKeyShare of its load (a PartitionKey never spans ranges, so
// such a range cannot be divided; the partition server throttles it). The
// new right-hand range is led by the coolest caught-up replica.
type splitLoad struct{}

func (splitLoad) Name() string { return RuleSplitLoad }

func (splitLoad) Schedule(p *Plan) {
	for _, r := range p.hot {
		if p.Full() {
			return
		}
		if !p.free(r) || p.staleLeader(r) || p.unsplittable(r) {
			continue
		}
		hot := p.hotFor(r)
		if hot < p.cfg.SplitWindow {
			continue
		}
		key, share, ok := LoadSplitKey(r)
		if !ok || share >= p.cfg.SingleKeyShare {
			continue
		}
		l := r.Load.EntitiesPerSec
		p.add(r, Op{Kind: Split, Range: r.ID, Key: key, From: r.Leader, To: p.RightLeader(r), Rule: RuleSplitLoad,
			Reason:  fmt.Sprintf("load %.0f entities/s over %.0f for %v", l, p.cfg.SplitLoad, hot.Round(time.Millisecond)),
			Figures: map[string]float64{"entities_per_sec": l, "top_key_share": share, "window_seconds": hot.Seconds()}})
	}
}

// RightLeader is the replica that should lead the right half of a split of
// r: the coolest follower, so the load halves across servers at once.
func (p *Plan) RightLeader(r *Range) string {
	if st := p.coolestFollower(r, r.Leader); st != nil {
		return st.id
	}
	return ""
}

// LoadSplitKey picks the load-weighted median PartitionKey of r's load
// sample (its hot keys when it has no sample), and the busiest key's share
// of the load. ok is false when fewer than two keys inside r carry load:
// such a range cannot be split usefully.
func LoadSplitKey(r *Range) (key string, topShare float64, ok bool) {
	if r.Load == nil {
		return "", 1, false
	}
	sample := r.Load.Sample
	if len(sample) == 0 {
		sample = r.Load.HotKeys
	}
	keys, total := r.inside(sample)
	// The busiest key's load is in the hot keys (each one key's). A sample
	// entry carries the load of every key since the previous entry
	// (partitionserver's loadSample), so it stands for a key's load only
	// when there are no hot keys: taking the largest entry for a key's
	// load made a range with a key at 87.5 % look like one hot partition
	// (scenario hot_key_share_from_hot_keys).
	hot, _ := r.inside(r.Load.HotKeys)
	if len(hot) == 0 {
		hot = keys
	}
	top := 0.0
	for _, k := range hot {
		top = max(top, k.EntitiesPerSec)
	}
	if len(keys) < 2 || total <= 0 {
		return "", 1, false
	}
	i := medianIndex(keys, total)
	if keys[i].Key <= r.Start {
		return "", top / total, false
	}
	return keys[i].Key, top / total, true
}

// inside returns the sampled keys within r in key order, and their load.
func (r *Range) inside(sample []KeyLoad) ([]KeyLoad, float64) {
	var keys []KeyLoad
	total := 0.0
	for _, k := range sample {
		if k.Key < r.Start || (r.End != "" && k.Key >= r.End) {
			continue
		}
		keys = append(keys, k)
		total += k.EntitiesPerSec
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Key < keys[j].Key })
	return keys, total
}

// medianIndex is the first key at which the cumulative load reaches half
// the total. Splitting at a key puts it on the right and the left side must
// not be empty, so the first key is never chosen.
func medianIndex(keys []KeyLoad, total float64) int {
	acc := 0.0
	for i, k := range keys {
		acc += k.EntitiesPerSec
		if acc >= total/2 {
			return max(i, 1)
		}
	}
	return len(keys) - 1
}
