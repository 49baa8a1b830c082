package master

import (
	"errors"
	"flag"
	"time"

	"tablestore/master/scheduler"
)

// PolicyConfig holds how the master runs the scheduler: whether, how often,
// how many operations at once, and the scheduler's thresholds (embedded, so
// cfg.Policy.SplitLoad reads as before). Defaults are documented in
// docs/operations.md.
type PolicyConfig struct {
	// Enabled turns the automatic policies on.
	Enabled bool
	// Interval is how often the scheduler is run.
	Interval time.Duration
	// MaxInFlight bounds concurrent split/merge/move/transfer operations
	// started by the scheduler.
	MaxInFlight int
	// SlowDiskCommit: a partition server the median of whose disk commits
	// (state file or Raft log, over the 10 s its heartbeat reports) reaches
	// this, and slowDiskPeerFactor (3) times the median of the other
	// servers' figures, is slow: it gets no leadership and its leaderships
	// move to followers; it is slow until the median falls below half of
	// either, or 60 s pass without evidence (0 turns the rule off, else at
	// least 1 ms). 100 ms: healthy commits take 1-10 ms, a loaded
	// 2-core machine sees tens of ms now and then (a median is not moved
	// by that), the chaos fault is 150 ms, and a server above 100 ms adds
	// that to every write of the ranges it leads.
	SlowDiskCommit time.Duration
	scheduler.Config
}

// DefaultPolicyConfig returns the documented defaults.
func DefaultPolicyConfig() PolicyConfig {
	return PolicyConfig{Enabled: true, Interval: 250 * time.Millisecond, MaxInFlight: 2, SlowDiskCommit: 100 * time.Millisecond,
		Config: scheduler.DefaultConfig()}
}

// Validate reports invalid settings.
func (c *PolicyConfig) Validate() error {
	if c.Interval <= 0 {
		return errors.New("policy-interval must be positive")
	}
	if c.MaxInFlight < 1 {
		return errors.New("max-in-flight must be at least 1")
	}
	if c.SlowDiskCommit != 0 && c.SlowDiskCommit < time.Millisecond {
		// A negative figure, or a unit forgotten (--slow-disk-commit=100
		// is 100 ns: every server slow but for relativity).
		return errors.New("slow-disk-commit must be 0 (off) or at least 1ms")
	}
	return c.Config.Validate()
}

// RegisterFlags binds the settings to flags.
func (c *PolicyConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Enabled, "policies", c.Enabled, "run the automatic split, merge, balance and re-replication policies")
	fs.DurationVar(&c.Interval, "policy-interval", c.Interval, "how often the policies are evaluated")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "most split/merge/move operations at once")
	fs.DurationVar(&c.SlowDiskCommit, "slow-disk-commit", c.SlowDiskCommit,
		"median disk commit time (over a partition server's last 10 s) at which, if also 3x the other servers' median, the server loses its range leaderships; cleared below half of either (0: never, else at least 1ms)")
	c.Config.RegisterFlags(fs)
}
