package master

import (
	"flag"
	"fmt"
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
	// MaxClockOffset: a partition server whose clock is off by more than
	// this from those of a majority of the servers (as their heartbeats
	// measure them; clockskew.go) is clock-skewed: it gets no leadership, its leaderships move
	// to followers, and past a minute off the ranges it still leads refuse
	// client writes (0 turns the rule off). 10 s: NTP keeps clocks within milliseconds, a
	// heartbeat's delay is under a second, and the harm it bounds (write
	// Timestamps, and the log clock that ages the request records out
	// after 10 minutes) needs seconds to minutes of offset.
	MaxClockOffset time.Duration
	scheduler.Config
}

// DefaultPolicyConfig returns the documented defaults.
func DefaultPolicyConfig() PolicyConfig {
	return PolicyConfig{Enabled: true, Interval: 250 * time.Millisecond, MaxInFlight: 2, SlowDiskCommit: 100 * time.Millisecond, MaxClockOffset: 10 * time.Second,
		Config: scheduler.DefaultConfig()}
}

// Validate reports invalid settings.
func (c *PolicyConfig) Validate() error {
	if c.Interval <= 0 {
		return fmt.Errorf("--policy-interval %v: must be positive", c.Interval)
	}
	if c.MaxInFlight < 1 {
		return fmt.Errorf("--max-in-flight %d: must be at least 1", c.MaxInFlight)
	}
	if c.SlowDiskCommit != 0 && c.SlowDiskCommit < time.Millisecond {
		// A negative figure, or a unit forgotten (--slow-disk-commit=100
		// is 100 ns: every server slow but for relativity).
		return fmt.Errorf("--slow-disk-commit %v: must be 0 (off) or at least 1ms", c.SlowDiskCommit)
	}
	if c.MaxClockOffset != 0 && c.MaxClockOffset < 100*time.Millisecond {
		// A negative figure, or one a heartbeat's own delay reaches
		// (--max-clock-offset=10 is 10 ns: every server skewed).
		return fmt.Errorf("--max-clock-offset %v: must be 0 (off) or at least 100ms", c.MaxClockOffset)
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
	fs.DurationVar(&c.MaxClockOffset, "max-clock-offset", c.MaxClockOffset,
		"largest offset of a partition server's clock from a majority of the servers' before it gets no leadership (past a minute, the ranges it leads also refuse writes) (0: never, else at least 100ms)")
	c.Config.RegisterFlags(fs)
}
