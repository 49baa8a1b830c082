package scheduler

import (
	"errors"
	"flag"
	"time"
)

// Config holds the thresholds of the policies. Defaults are documented in
// docs/operations.md.
type Config struct {
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
	// MergeBytes. A range split within MergeCooldown is never merged.
	MergeLoad     float64
	MergeCooldown time.Duration
	MergeBytes    uint64
	// SharedHost: every partition server runs on one machine (dev, a
	// benchmark on one host). Splits then stay in the range's Raft group
	// (Op.InGroup), and no split is made to move load to another server
	// (split-balance): spreading leaders over servers that share the
	// processors adds none, and every new group costs its own Raft entries
	// (docs/range-groups.md; performance.md, session 28).
	SharedHost bool
	// MaxGroupSpans caps the ranges a split on a shared host keeps in one
	// Raft group: at the cap, the right half becomes a group of its own,
	// still led by the range's leader. A group's snapshot carries all its
	// ranges, and a follower that falls behind catches up on all of them.
	MaxGroupSpans int
	// BalanceLeaders moves leaders to even out leader load and counts.
	BalanceLeaders bool
	// BalanceReplicas moves replicas to even out replica counts.
	BalanceReplicas bool
	// BalanceCooldown: a server a leader was moved to or from is left
	// alone this long, so that load reports reflect the move first.
	BalanceCooldown time.Duration
	// LeaderMoveCooldown: a range whose leadership a balancing rule moved
	// is not moved again for balance this long, so that noisy load reports
	// cannot bounce it between servers.
	LeaderMoveCooldown time.Duration
	// LeaderLoadTolerance: a server leading more than (1+tolerance) times
	// the mean load, and at least LeaderMinGap entities/s above it, sheds
	// leaders.
	LeaderLoadTolerance float64
	LeaderMinGap        float64
	// MaxLeaderLag is the most Raft entries a follower may be behind its
	// leader and still receive leadership.
	MaxLeaderLag uint64
	// LeaderSettle: a server back less than this long (restarted, or heard
	// from again after a silence: paused or cut off) receives no
	// leadership. Its replicas may report caught up while it is still
	// opening and catching up the rest, and a server that just failed is
	// the likeliest to fail again (CockroachDB's "suspect" stores get no
	// leases for 30 s). Chaos seed 69: leadership of range 4 went to ps4
	// 0.15 s after its restart, ps4 was killed 1 s later, and writes to
	// the range stopped for 2.5 s.
	LeaderSettle time.Duration
	// ReplicateAfter re-creates the replicas of a server down this long
	// (0 disables).
	ReplicateAfter time.Duration
	// AnchorGroupSpans is the most spans an anchor group should serve, the
	// anchor included: the master's --table-group-spans (0: no cap). The
	// group's apply refuses a new span at it, but a group may still be
	// over it (a group from a build without the check, or a master that
	// died between its uncapped add and the detach that follows it), and
	// detach-over-cap takes the spans beyond it out (detach_overcap.go).
	// No flag of its own: the master sets it from --table-group-spans.
	AnchorGroupSpans int
	// AttachCold takes a table that is one cold range in a Raft group of
	// its own into an anchor group with room (attach-cold,
	// attach_cold.go; docs/range-groups.md, stage 8). Off by default: no
	// flag of its own, the master sets it from --table-groups.
	AttachCold bool
	// MaxPerServer bounds the operations in flight that add or remove a
	// replica on one server (snapshots are the expensive part of a move):
	// moves, and the co-location moves of a merge whose ranges are not on
	// the same servers.
	MaxPerServer int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		SplitLoad:           1000,
		SplitWindow:         2 * time.Second,
		SingleKeyShare:      0.9,
		SplitBytes:          512 << 20,
		MaxGroupSpans:       8,
		MergeLoad:           100,
		MergeCooldown:       60 * time.Second,
		MergeBytes:          32 << 20,
		BalanceLeaders:      true,
		BalanceReplicas:     true,
		BalanceCooldown:     3 * time.Second,
		LeaderMoveCooldown:  30 * time.Second,
		LeaderLoadTolerance: 0.15,
		LeaderMinGap:        100,
		MaxLeaderLag:        1024,
		LeaderSettle:        5 * time.Second,
		ReplicateAfter:      30 * time.Second,
		MaxPerServer:        1,
	}
}

// ErrInvalidConfig wraps every validation error.
var ErrInvalidConfig = errors.New("scheduler: invalid config")

// Validate reports invalid thresholds.
func (c *Config) Validate() error {
	var msg string
	switch {
	case c.SplitWindow < 0 || c.MergeCooldown < 0 || c.ReplicateAfter < 0 || c.BalanceCooldown < 0 || c.LeaderMoveCooldown < 0 || c.LeaderSettle < 0:
		msg = "policy durations must not be negative"
	case c.SplitLoad <= 0 || c.MergeLoad < 0:
		msg = "split-load must be positive and merge-load not negative"
	case c.MergeLoad >= c.SplitLoad:
		msg = "merge-load must be well below split-load (no thrash)"
	case c.SingleKeyShare <= 0.5 || c.SingleKeyShare > 1:
		msg = "single-key-share must be in (0.5, 1]"
	case c.LeaderLoadTolerance < 0 || c.LeaderMinGap < 0:
		msg = "leader-load-tolerance and leader-min-gap must not be negative"
	default:
		msg = c.invalidCounts()
	}
	if msg == "" {
		return nil
	}
	return errors.Join(ErrInvalidConfig, errors.New(msg))
}

// invalidCounts is Validate's message for the counts ("": valid).
func (c *Config) invalidCounts() string {
	switch {
	case c.MaxPerServer < 1:
		return "max-per-server must be at least 1"
	case c.MaxGroupSpans < 1:
		return "max-group-spans must be at least 1"
	case c.AnchorGroupSpans < 0:
		return "the anchor group span cap must not be negative"
	}
	return ""
}

// RecentWindow is how long the scheduler needs to see an operation in
// Snapshot.Recent: the longest of its cooldowns.
func (c *Config) RecentWindow() time.Duration {
	return max(c.MergeCooldown, c.BalanceCooldown, c.LeaderMoveCooldown, c.SplitWindow)
}

// RegisterFlags binds the thresholds to flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Float64Var(&c.SplitLoad, "split-load", c.SplitLoad, "entities/s above which a range spreading over 2+ PartitionKeys is split")
	fs.DurationVar(&c.SplitWindow, "split-window", c.SplitWindow, "how long the load must stay above split-load")
	fs.Float64Var(&c.SingleKeyShare, "single-key-share", c.SingleKeyShare, "share of a range's load on one key that makes it one hot partition (not split)")
	fs.Uint64Var(&c.SplitBytes, "split-bytes", c.SplitBytes, "split ranges larger than this many bytes (0: never by size)")
	fs.Float64Var(&c.MergeLoad, "merge-load", c.MergeLoad, "entities/s below which neighbours count as cold")
	fs.DurationVar(&c.MergeCooldown, "merge-cooldown", c.MergeCooldown, "how long neighbours must stay cold before they merge (and how long after a split a range is not merged)")
	fs.Uint64Var(&c.MergeBytes, "merge-bytes", c.MergeBytes, "largest combined size of two ranges merged")
	fs.BoolVar(&c.SharedHost, "shared-host", c.SharedHost, "every partition server shares one machine: the policies split ranges within their Raft group (one leader, one log) and make no split to move load to another server")
	fs.IntVar(&c.MaxGroupSpans, "max-group-spans", c.MaxGroupSpans, "with --shared-host, most ranges a split keeps in one Raft group; at the cap the right half is a group of its own, led by the same server")
	fs.BoolVar(&c.BalanceLeaders, "balance-leaders", c.BalanceLeaders, "move range leaders to even out leader counts and load across servers")
	fs.BoolVar(&c.BalanceReplicas, "balance-replicas", c.BalanceReplicas, "move replicas to even out replica counts across servers")
	fs.DurationVar(&c.BalanceCooldown, "balance-cooldown", c.BalanceCooldown, "how long a server a leader moved to or from is left alone")
	fs.DurationVar(&c.LeaderMoveCooldown, "leader-move-cooldown", c.LeaderMoveCooldown, "how long a range whose leader was moved for balance is not moved again for balance")
	fs.Float64Var(&c.LeaderLoadTolerance, "leader-load-tolerance", c.LeaderLoadTolerance, "a server leading more than (1+this) x the mean load sheds leaders")
	fs.Float64Var(&c.LeaderMinGap, "leader-min-gap", c.LeaderMinGap, "entities/s above the mean a server must lead before it sheds leaders")
	fs.Uint64Var(&c.MaxLeaderLag, "max-leader-lag", c.MaxLeaderLag, "most Raft entries a follower may lag and still be given leadership")
	fs.DurationVar(&c.LeaderSettle, "leader-settle", c.LeaderSettle, "how long a server back from a restart or a silence receives no leadership")
	fs.DurationVar(&c.ReplicateAfter, "replicate-after", c.ReplicateAfter, "re-create the replicas of a server down this long (0: never)")
	fs.IntVar(&c.MaxPerServer, "max-per-server", c.MaxPerServer, "most replica moves in flight into or out of one server")
}
