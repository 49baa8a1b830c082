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
	scheduler.Config
}

// DefaultPolicyConfig returns the documented defaults.
func DefaultPolicyConfig() PolicyConfig {
	return PolicyConfig{Enabled: true, Interval: 250 * time.Millisecond, MaxInFlight: 2, Config: scheduler.DefaultConfig()}
}

// Validate reports invalid settings.
func (c *PolicyConfig) Validate() error {
	if c.Interval <= 0 {
		return errors.New("policy-interval must be positive")
	}
	if c.MaxInFlight < 1 {
		return errors.New("max-in-flight must be at least 1")
	}
	return c.Config.Validate()
}

// RegisterFlags binds the settings to flags.
func (c *PolicyConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Enabled, "policies", c.Enabled, "run the automatic split, merge, balance and re-replication policies")
	fs.DurationVar(&c.Interval, "policy-interval", c.Interval, "how often the policies are evaluated")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "most split/merge/move operations at once")
	c.Config.RegisterFlags(fs)
}
