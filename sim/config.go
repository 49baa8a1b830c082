package sim

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"tablestore/master/scheduler"
)

// Workloads are the workload models.
var Workloads = []string{"uniform", "hot-partition", "append", "zipf", "diurnal", "server-failure", "server-added"}

// Config describes one simulation.
type Config struct {
	Servers  int
	Ranges   int
	Duration time.Duration
	// Step is the simulated time between load reports; the scheduler
	// runs every ScheduleEvery.
	Step          time.Duration
	ScheduleEvery time.Duration
	Workload      string
	Seed          int64
	// RangeLoad is the mean offered entities/s per range at the start.
	RangeLoad float64
	// Capacity is the entities/s one server serves as leader (0: 1.5 x
	// the mean offered per server at the start).
	Capacity float64
	// ReportServed: load reports carry what each range's leader served
	// (its server's capacity shared over its ranges), as partition servers
	// under --server-capacity do, instead of the demand.
	ReportServed bool
	// RangeBytes is the initial size of every range.
	RangeBytes uint64
	// EventAt is when the workload's event happens: the hot spot starts,
	// the server fails or is added.
	EventAt time.Duration
	// HotFactor and HotShare shape the hot spot: HotShare of the key
	// space gets HotFactor times the load.
	HotFactor, HotShare float64
	// MaxInFlight bounds the operations running at once (the master's
	// max-in-flight).
	MaxInFlight int
	// Target is the max/mean load spread the hot spot must be brought
	// under.
	Target    float64
	Scheduler scheduler.Config
}

// DefaultConfig returns the defaults of `tablestore sim`.
func DefaultConfig() Config {
	return Config{
		Servers: 1000, Ranges: 100000, Duration: time.Hour, Step: time.Second, ScheduleEvery: 2 * time.Second,
		Workload: "hot-partition", Seed: 1, RangeLoad: 50, RangeBytes: 64 << 20,
		EventAt: 10 * time.Minute, HotFactor: 10, HotShare: 0.01, MaxInFlight: 512, Target: 1.25,
		Scheduler: scheduler.DefaultConfig(),
	}
}

// ErrInvalidConfig wraps every validation error.
var ErrInvalidConfig = errors.New("sim: invalid config")

// Validate reports invalid settings.
func (c *Config) Validate() error {
	var msg string
	switch {
	case !knownWorkload(c.Workload):
		msg = fmt.Sprintf("unknown workload %q (one of %v)", c.Workload, Workloads)
	case c.Servers < 3 || c.Ranges < 1:
		msg = "servers must be at least 3 and ranges at least 1"
	case c.Duration <= 0 || c.Step <= 0 || c.ScheduleEvery < c.Step:
		msg = "duration and step must be positive, schedule-every at least one step"
	case c.RangeLoad <= 0 || c.Capacity < 0 || c.HotFactor < 1 || c.HotShare <= 0 || c.HotShare > 1:
		msg = "range-load must be positive, hot-factor >= 1, hot-share in (0, 1]"
	case c.MaxInFlight < 1 || c.Target <= 1:
		msg = "max-in-flight must be at least 1 and target above 1"
	default:
		return c.Scheduler.Validate()
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, msg)
}

func knownWorkload(name string) bool {
	for _, w := range Workloads {
		if w == name {
			return true
		}
	}
	return false
}

// RegisterFlags binds the config to flags (the scheduler's thresholds
// keep the master's flag names).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Servers, "servers", c.Servers, "partition servers")
	fs.IntVar(&c.Ranges, "ranges", c.Ranges, "ranges at the start (one table)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "simulated time")
	fs.DurationVar(&c.Step, "step", c.Step, "simulated time between load reports")
	fs.DurationVar(&c.ScheduleEvery, "schedule-every", c.ScheduleEvery, "simulated time between scheduler runs")
	fs.StringVar(&c.Workload, "workload", c.Workload, fmt.Sprintf("workload model: %v", Workloads))
	fs.Int64Var(&c.Seed, "seed", c.Seed, "random seed (placement, zipf keys)")
	fs.Float64Var(&c.RangeLoad, "range-load", c.RangeLoad, "mean offered entities/s per range at the start")
	fs.Float64Var(&c.Capacity, "server-capacity", c.Capacity, "entities/s a server serves as leader (0: 1.5 x the mean offered per server)")
	fs.BoolVar(&c.ReportServed, "report-served", c.ReportServed, "load reports carry the entities/s served (capped by -server-capacity), as a partition server's do, not the demand")
	fs.Uint64Var(&c.RangeBytes, "range-bytes", c.RangeBytes, "initial size of every range")
	fs.DurationVar(&c.EventAt, "event-at", c.EventAt, "when the hot spot starts, the server fails or is added")
	fs.Float64Var(&c.HotFactor, "hot-factor", c.HotFactor, "load multiplier of the hot spot")
	fs.Float64Var(&c.HotShare, "hot-share", c.HotShare, "share of the key space (and of the ranges) that gets hot")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "most operations at once (the master's max-in-flight)")
	fs.Float64Var(&c.Target, "target", c.Target, "max/mean leader-load spread a hot spot must be brought under")
	c.Scheduler.RegisterFlags(fs)
}
