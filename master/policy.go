package master

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// PolicyConfig holds the thresholds of the master's automatic decisions.
// Defaults are documented in docs/operations.md.
type PolicyConfig struct {
	// Enabled turns the automatic policies on.
	Enabled bool
	// Interval is how often the policies are evaluated.
	Interval time.Duration
	// SplitLoad is the entities/s above which a range is split when the
	// load lasts SplitWindow and spreads over at least two PartitionKeys.
	SplitLoad   float64
	SplitWindow time.Duration
	// SingleKeyShare: a range whose busiest key carries at least this share
	// of its load is one hot partition; it cannot be split (it is
	// throttled instead).
	SingleKeyShare float64
	// SplitBytes splits a range larger than this by size (0 disables).
	SplitBytes uint64
	// MergeLoad: neighbours each below this many entities/s for
	// MergeCooldown are merged when their combined size is under
	// MergeBytes.
	MergeLoad     float64
	MergeCooldown time.Duration
	MergeBytes    uint64
	// MaxInFlight bounds concurrent split/merge/move operations.
	MaxInFlight int
	// BalanceLeaders moves leaders to even out leader counts and load.
	BalanceLeaders bool
	// BalanceReplicas moves replicas to even out replica counts.
	BalanceReplicas bool
	// ReplicateAfter re-creates the replicas of a server down this long
	// (0 disables).
	ReplicateAfter time.Duration
}

// DefaultPolicyConfig returns the documented defaults.
func DefaultPolicyConfig() PolicyConfig {
	return PolicyConfig{
		Enabled:         true,
		Interval:        250 * time.Millisecond,
		SplitLoad:       1000,
		SplitWindow:     2 * time.Second,
		SingleKeyShare:  0.9,
		SplitBytes:      512 << 20,
		MergeLoad:       100,
		MergeCooldown:   60 * time.Second,
		MergeBytes:      32 << 20,
		MaxInFlight:     2,
		BalanceLeaders:  true,
		BalanceReplicas: true,
		ReplicateAfter:  30 * time.Second,
	}
}

// Validate reports invalid thresholds.
func (c *PolicyConfig) Validate() error {
	switch {
	case c.Interval <= 0 || c.SplitWindow < 0 || c.MergeCooldown < 0 || c.ReplicateAfter < 0:
		return errors.New("policy durations must not be negative (interval positive)")
	case c.SplitLoad <= 0 || c.MergeLoad < 0:
		return errors.New("split-load must be positive and merge-load not negative")
	case c.MergeLoad >= c.SplitLoad:
		return errors.New("merge-load must be well below split-load (no thrash)")
	case c.SingleKeyShare <= 0.5 || c.SingleKeyShare > 1:
		return errors.New("single-key-share must be in (0.5, 1]")
	case c.MaxInFlight < 1:
		return errors.New("max-in-flight must be at least 1")
	}
	return nil
}

// RegisterFlags binds the policy thresholds to flags.
func (c *PolicyConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Enabled, "policies", c.Enabled, "run the automatic split, merge, balance and re-replication policies")
	fs.DurationVar(&c.Interval, "policy-interval", c.Interval, "how often the policies are evaluated")
	fs.Float64Var(&c.SplitLoad, "split-load", c.SplitLoad, "entities/s above which a range spreading over 2+ PartitionKeys is split")
	fs.DurationVar(&c.SplitWindow, "split-window", c.SplitWindow, "how long the load must stay above split-load")
	fs.Float64Var(&c.SingleKeyShare, "single-key-share", c.SingleKeyShare, "share of a range's load on one key that makes it one hot partition (not split)")
	fs.Uint64Var(&c.SplitBytes, "split-bytes", c.SplitBytes, "split ranges larger than this many bytes (0: never by size)")
	fs.Float64Var(&c.MergeLoad, "merge-load", c.MergeLoad, "entities/s below which neighbours count as cold")
	fs.DurationVar(&c.MergeCooldown, "merge-cooldown", c.MergeCooldown, "how long neighbours must stay cold before they merge")
	fs.Uint64Var(&c.MergeBytes, "merge-bytes", c.MergeBytes, "largest combined size of two ranges merged")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "most split/merge/move operations at once")
	fs.BoolVar(&c.BalanceLeaders, "balance-leaders", c.BalanceLeaders, "move range leaders to even out leader counts and load across servers")
	fs.BoolVar(&c.BalanceReplicas, "balance-replicas", c.BalanceReplicas, "move replicas to even out replica counts across servers")
	fs.DurationVar(&c.ReplicateAfter, "replicate-after", c.ReplicateAfter, "re-create the replicas of a server down this long (0: never)")
}

// rangeView is what the policies know about one range.
type rangeView struct {
	desc   *pb.RangeDescriptor
	leader string
	load   *pb.RangeLoad
	frozen bool
	// hotSince is when the load last rose above the split threshold (zero:
	// not above); coldSince when it last fell below the merge threshold.
	hotSince, coldSince time.Time
}

// clusterView is the input of the policies.
type clusterView struct {
	now     time.Time
	ranges  []*rangeView // sorted by table id, then start
	live    map[string]bool
	down    map[string]time.Time // server -> last heartbeat, for servers down
	busy    map[uint64]bool      // ranges with an operation in flight
	servers []string             // every registered server, sorted
	// lastBalance is when the last balancing move started; balancing waits
	// balanceCooldown after it so load reports reflect the move first.
	lastBalance time.Time
}

// balanceCooldown spaces balancing moves: a leader move changes where load
// is reported only from the next report on, and acting before that thrashes.
const balanceCooldown = 3 * time.Second

// opKind names a planned operation.
type opKind int

const (
	opSplit opKind = iota + 1
	opMerge
	opMove
	opTransfer
)

func (k opKind) String() string {
	switch k {
	case opSplit:
		return "split"
	case opMerge:
		return "merge"
	case opMove:
		return "move"
	case opTransfer:
		return "transfer-leader"
	}
	return "unknown"
}

// op is one planned operation with the figures that caused it.
type op struct {
	kind     opKind
	rangeID  uint64
	key      string // split key ("" with bySize: ask the range)
	bySize   bool
	from, to string // move and transfer
	figures  map[string]float64
	reason   string
	// balance marks a balancing move (spaced by balanceCooldown).
	balance bool
}

// plan decides the next operations. It is a pure function of the view so
// tests can drive it with synthetic load and an injected clock.
func plan(cfg PolicyConfig, v clusterView, slots int) []op {
	var out []op
	add := func(o op) bool {
		if len(out) >= slots || v.busy[o.rangeID] {
			return false
		}
		v.busy[o.rangeID] = true
		out = append(out, o)
		return true
	}
	// Re-replication first: data safety before load.
	if cfg.ReplicateAfter > 0 {
		for _, r := range v.ranges {
			for _, rep := range r.desc.GetReplicas() {
				last, isDown := v.down[rep.GetServerId()]
				if !isDown || v.now.Sub(last) < cfg.ReplicateAfter || r.frozen {
					continue
				}
				if to := leastLoadedOutside(v, r.desc); to != "" {
					add(op{kind: opMove, rangeID: r.desc.GetRangeId(), from: rep.GetServerId(), to: to,
						figures: map[string]float64{"down_seconds": v.now.Sub(last).Seconds()},
						reason:  "re-replicate: server " + rep.GetServerId() + " is down"})
				}
				break
			}
		}
	}
	for _, r := range v.ranges {
		if r.frozen || r.load == nil {
			continue
		}
		l := r.load.GetEntitiesPerSec()
		if !r.hotSince.IsZero() && v.now.Sub(r.hotSince) >= cfg.SplitWindow {
			if key, share, ok := loadSplitKey(r.desc, r.load); ok && share < cfg.SingleKeyShare {
				add(op{kind: opSplit, rangeID: r.desc.GetRangeId(), key: key,
					figures: map[string]float64{"entities_per_sec": l, "top_key_share": share, "window_seconds": v.now.Sub(r.hotSince).Seconds()},
					reason:  fmt.Sprintf("load %.0f entities/s over %.0f for %v", l, cfg.SplitLoad, v.now.Sub(r.hotSince).Round(time.Millisecond))})
				continue
			}
		}
		if cfg.SplitBytes > 0 && r.load.GetBytes() > cfg.SplitBytes {
			add(op{kind: opSplit, rangeID: r.desc.GetRangeId(), bySize: true,
				figures: map[string]float64{"bytes": float64(r.load.GetBytes())},
				reason:  fmt.Sprintf("size %d bytes over %d", r.load.GetBytes(), cfg.SplitBytes)})
		}
	}
	// Merge cold neighbours.
	for i := 0; i+1 < len(v.ranges); i++ {
		a, b := v.ranges[i], v.ranges[i+1]
		if a.desc.GetTableId() != b.desc.GetTableId() || a.desc.GetEnd() != b.desc.GetStart() || a.desc.GetEnd() == "" {
			continue
		}
		if a.frozen || b.frozen || a.coldSince.IsZero() || b.coldSince.IsZero() {
			continue
		}
		if v.now.Sub(a.coldSince) < cfg.MergeCooldown || v.now.Sub(b.coldSince) < cfg.MergeCooldown {
			continue
		}
		size := a.load.GetBytes() + b.load.GetBytes()
		if size > cfg.MergeBytes || v.busy[b.desc.GetRangeId()] {
			continue
		}
		if add(op{kind: opMerge, rangeID: a.desc.GetRangeId(),
			figures: map[string]float64{"left_entities_per_sec": a.load.GetEntitiesPerSec(), "right_entities_per_sec": b.load.GetEntitiesPerSec(), "bytes": float64(size)},
			reason:  fmt.Sprintf("neighbours below %.0f entities/s for %v", cfg.MergeLoad, cfg.MergeCooldown)}) {
			v.busy[b.desc.GetRangeId()] = true
			i++
		}
	}
	if v.now.Sub(v.lastBalance) >= balanceCooldown {
		if cfg.BalanceLeaders {
			if o, ok := balanceLeaders(v); ok && add(o) {
				return out
			}
		}
		if cfg.BalanceReplicas {
			if o, ok := balanceReplicas(v); ok {
				add(o)
			}
		}
	}
	return out
}

// balanceReplicas moves one replica from the live server holding the most
// to the one holding the fewest when they differ by two or more (a server
// joined, or came back after its replicas were re-created elsewhere).
func balanceReplicas(v clusterView) (op, bool) {
	count := map[string]int{}
	for _, s := range v.servers {
		if v.live[s] {
			count[s] = 0
		}
	}
	if len(count) < 2 {
		return op{}, false
	}
	for _, r := range v.ranges {
		for _, rep := range r.desc.GetReplicas() {
			if _, ok := count[rep.GetServerId()]; ok {
				count[rep.GetServerId()]++
			}
		}
	}
	most, fewest := "", ""
	for _, s := range v.servers {
		if _, ok := count[s]; !ok {
			continue
		}
		if most == "" || count[s] > count[most] {
			most = s
		}
		if fewest == "" || count[s] < count[fewest] {
			fewest = s
		}
	}
	if count[most]-count[fewest] < 2 {
		return op{}, false
	}
	// Prefer a range the busy server does not lead, so no leadership moves.
	for pass := 0; pass < 2; pass++ {
		for _, r := range v.ranges {
			if r.frozen || v.busy[r.desc.GetRangeId()] || !hasReplica(r.desc, most) || hasReplica(r.desc, fewest) {
				continue
			}
			if pass == 0 && r.leader == most {
				continue
			}
			return op{kind: opMove, rangeID: r.desc.GetRangeId(), from: most, to: fewest,
				figures: map[string]float64{"from_replicas": float64(count[most]), "to_replicas": float64(count[fewest])},
				reason:  "balance replicas", balance: true}, true
		}
	}
	return op{}, false
}

// loadSplitKey picks the load-weighted median PartitionKey of the range's
// load sample, and the busiest key's share of the load (from the hot keys;
// a range whose load is one key cannot be split usefully).
func loadSplitKey(d *pb.RangeDescriptor, l *pb.RangeLoad) (string, float64, bool) {
	sample := l.GetLoadSample()
	if len(sample) == 0 {
		sample = l.GetHotKeys()
	}
	var keys []*pb.KeyLoad
	total, top := 0.0, 0.0
	for _, k := range l.GetHotKeys() {
		top = max(top, k.GetEntitiesPerSec())
	}
	for _, k := range sample {
		if k.GetPartitionKey() < d.GetStart() || (d.GetEnd() != "" && k.GetPartitionKey() >= d.GetEnd()) {
			continue
		}
		keys = append(keys, k)
		total += k.GetEntitiesPerSec()
		top = max(top, k.GetEntitiesPerSec())
	}
	if len(keys) < 2 || total <= 0 {
		return "", 1, false
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].GetPartitionKey() < keys[j].GetPartitionKey() })
	acc := 0.0
	i := 0
	for ; i < len(keys); i++ {
		acc += keys[i].GetEntitiesPerSec()
		if acc >= total/2 {
			break
		}
	}
	// Splitting at key i puts it on the right; the left side must not be
	// empty, so the first sampled key is never the split key.
	if i == 0 {
		i = 1
	}
	key := keys[i].GetPartitionKey()
	if key <= d.GetStart() {
		return "", top / total, false
	}
	return key, top / total, true
}

// leastLoadedOutside returns the live server holding the fewest replicas
// that does not hold one of d.
func leastLoadedOutside(v clusterView, d *pb.RangeDescriptor) string {
	has := map[string]bool{}
	for _, r := range d.GetReplicas() {
		has[r.GetServerId()] = true
	}
	counts := map[string]int{}
	for _, r := range v.ranges {
		for _, rep := range r.desc.GetReplicas() {
			counts[rep.GetServerId()]++
		}
	}
	best := ""
	for _, s := range v.servers {
		if !v.live[s] || has[s] {
			continue
		}
		if best == "" || counts[s] < counts[best] {
			best = s
		}
	}
	return best
}

// balanceLeaders moves one leader from the server with the most load (or
// leaders) to a replica on the server with the least, when the difference
// is worth it.
func balanceLeaders(v clusterView) (op, bool) {
	load := map[string]float64{}
	count := map[string]int{}
	for _, s := range v.servers {
		if v.live[s] {
			load[s], count[s] = 0, 0
		}
	}
	if len(load) < 2 {
		return op{}, false
	}
	for _, r := range v.ranges {
		if _, ok := load[r.leader]; ok {
			count[r.leader]++
			if r.load != nil {
				load[r.leader] += r.load.GetEntitiesPerSec()
			}
		}
	}
	hi, lo := "", ""
	for s := range load {
		if hi == "" || load[s] > load[hi] || (load[s] == load[hi] && (count[s] > count[hi] || (count[s] == count[hi] && s < hi))) {
			hi = s
		}
		if lo == "" || load[s] < load[lo] || (load[s] == load[lo] && (count[s] < count[lo] || (count[s] == count[lo] && s < lo))) {
			lo = s
		}
	}
	gap := load[hi] - load[lo]
	// Pick the leader on hi whose move best evens the load, on a range that
	// has a replica on lo.
	var best *rangeView
	for _, r := range v.ranges {
		if r.leader != hi || v.busy[r.desc.GetRangeId()] || r.frozen || !hasReplica(r.desc, lo) {
			continue
		}
		l := 0.0
		if r.load != nil {
			l = r.load.GetEntitiesPerSec()
		}
		// Moving it must narrow the gap, not flip it.
		if gap > 0 && l > 0 && l <= gap/2 {
			if best == nil || l > best.load.GetEntitiesPerSec() {
				best = r
			}
		}
	}
	// Only a clear imbalance is worth a leader move (reports are noisy).
	if best != nil && gap > 100 && load[hi] > 1.3*load[lo] {
		return op{kind: opTransfer, rangeID: best.desc.GetRangeId(), from: hi, to: lo,
			figures: map[string]float64{"from_entities_per_sec": load[hi], "to_entities_per_sec": load[lo]},
			reason:  "balance leader load", balance: true}, true
	}
	if count[hi]-count[lo] >= 2 || countGap(count) >= 2 {
		// Even out counts: most leaders to fewest.
		most, fewest := "", ""
		for s := range count {
			if most == "" || count[s] > count[most] || (count[s] == count[most] && s < most) {
				most = s
			}
			if fewest == "" || count[s] < count[fewest] || (count[s] == count[fewest] && s < fewest) {
				fewest = s
			}
		}
		if count[most]-count[fewest] < 2 {
			return op{}, false
		}
		for _, r := range v.ranges {
			if r.leader == most && !v.busy[r.desc.GetRangeId()] && !r.frozen && hasReplica(r.desc, fewest) {
				return op{kind: opTransfer, rangeID: r.desc.GetRangeId(), from: most, to: fewest,
					figures: map[string]float64{"from_leaders": float64(count[most]), "to_leaders": float64(count[fewest])},
					reason:  "balance leader count", balance: true}, true
			}
		}
	}
	return op{}, false
}

func countGap(count map[string]int) int {
	mx, mn := -1, -1
	for _, c := range count {
		if mx < 0 || c > mx {
			mx = c
		}
		if mn < 0 || c < mn {
			mn = c
		}
	}
	return mx - mn
}

func hasReplica(d *pb.RangeDescriptor, server string) bool {
	for _, r := range d.GetReplicas() {
		if r.GetServerId() == server {
			return true
		}
	}
	return false
}
