package loadgen

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// DevConnectionString is the connection string of `tablestore dev` (and of
// Azurite): the well-known devstoreaccount1 account on loopback.
const DevConnectionString = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;"

// Scenario names, the values of --scenario.
const (
	ScenarioUniform      = "uniform"
	ScenarioHotPartition = "hot-partition"
	ScenarioAppend       = "append"
	ScenarioZipf         = "zipf"
	// ScenarioAppendHashed is the fix of append: a bucket prefix.
	ScenarioAppendHashed = "append-hashed"
	// ScenarioMovingHot is a hot spot that moves through the key space.
	ScenarioMovingHot = "moving-hot"
)

// Scenarios lists the scenarios in the order the help shows them.
var Scenarios = []string{ScenarioUniform, ScenarioHotPartition, ScenarioAppend, ScenarioAppendHashed, ScenarioZipf, ScenarioMovingHot}

// MaxEntitySize bounds --entity-size. Azure counts a string property's
// characters twice (UTF-16) against its 1 MiB entity limit; 256 KiB of
// payload stays well inside it.
const MaxEntitySize = 256 << 10

// Config configures a run. Defaults are in DefaultConfig and documented in
// docs/operations.md.
type Config struct {
	// Conn is the Azure storage connection string of the endpoint.
	Conn string
	// Table is the table written to; it is created if missing.
	Table string
	// Scenario picks the PartitionKey pattern (Scenario* constants).
	Scenario string
	// Partitions is the number of PartitionKeys of uniform and zipf.
	Partitions int
	// ZipfS is the Zipf exponent (> 1; larger is more skewed).
	ZipfS float64
	// Rate is the target of requests (= entities) per second over all
	// workers; 0 means as fast as the workers go.
	Rate float64
	// Workers is the number of concurrent requests.
	Workers int
	// Duration is how long the run lasts.
	Duration time.Duration
	// EntitySize is the approximate size of each entity's JSON body.
	EntitySize int
	// ReadRatio is the fraction of requests that are point reads of
	// entities written earlier in the run.
	ReadRatio float64
	// IdleConns is the number of idle HTTP connections kept to the
	// endpoint; 0 keeps one per worker (the Go default of 2 per host makes
	// workers keep dialing).
	IdleConns int
	// RequestTimeout bounds each request.
	RequestTimeout time.Duration
	// Backoff makes a worker pause after an error (the Retry-After of a
	// 503, else a short pause) as a well-behaved client would, instead of
	// hammering.
	Backoff bool
	// ReportInterval is the period of the progress lines.
	ReportInterval time.Duration
	// Seed seeds the key choices; 0 picks one from the clock.
	Seed uint64
	// JSON prints JSON lines instead of text.
	JSON bool
	// Report lists (comma-separated) the files the run's report is written
	// to at the end: JSON if one ends in .json, one self-contained page if
	// .html; empty: none.
	Report string
	// Master lists the master gRPC addresses the report reads the range
	// count, the servers' load and the event log from; empty: the report
	// has the client's figures only.
	Master string
}

// DefaultConfig returns the documented defaults: the dev endpoint, uniform
// load over 100 partitions, 16 workers, 30 s.
func DefaultConfig() Config {
	return Config{
		Conn:           DevConnectionString,
		Table:          "loadgen",
		Scenario:       ScenarioUniform,
		Partitions:     100,
		ZipfS:          1.1,
		Workers:        16,
		Duration:       30 * time.Second,
		EntitySize:     1024,
		RequestTimeout: 10 * time.Second,
		Backoff:        true,
		ReportInterval: time.Second,
		Master:         "127.0.0.1:7000",
	}
}

// tableName is Azure's rule for table names.
var tableName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{2,62}$`)

// Validate reports invalid settings.
func (c *Config) Validate() error {
	var errs []error
	if c.Conn == "" {
		errs = append(errs, errors.New("--conn is empty"))
	}
	if !tableName.MatchString(c.Table) {
		errs = append(errs, fmt.Errorf("--table %q is not a valid table name (3-63 letters and digits, starting with a letter)", c.Table))
	}
	known := false
	for _, s := range Scenarios {
		known = known || s == c.Scenario
	}
	if !known {
		errs = append(errs, fmt.Errorf("--scenario %q is not one of %v", c.Scenario, Scenarios))
	}
	if c.Partitions < 1 {
		errs = append(errs, errors.New("--partitions must be at least 1"))
	}
	if c.ZipfS <= 1 {
		errs = append(errs, errors.New("--zipf-s must be greater than 1"))
	}
	if c.Rate < 0 {
		errs = append(errs, errors.New("--rate must not be negative"))
	}
	if c.Workers < 1 || c.Workers > 10000 {
		errs = append(errs, errors.New("--workers must be in 1..10000"))
	}
	if c.Duration <= 0 {
		errs = append(errs, errors.New("--duration must be positive"))
	}
	if c.EntitySize < 0 || c.EntitySize > MaxEntitySize {
		errs = append(errs, fmt.Errorf("--entity-size must be in 0..%d", MaxEntitySize))
	}
	if c.ReadRatio < 0 || c.ReadRatio > 1 {
		errs = append(errs, errors.New("--read-ratio must be in [0, 1]"))
	}
	if c.IdleConns < 0 {
		errs = append(errs, errors.New("--idle-conns must not be negative"))
	}
	if c.RequestTimeout <= 0 || c.ReportInterval <= 0 {
		errs = append(errs, errors.New("--request-timeout and --report-interval must be positive"))
	}
	for _, path := range c.reportPaths() {
		if _, err := reportFormat(path); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// RegisterFlags binds the settings to flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Conn, "conn", c.Conn, "Azure storage connection string of the endpoint (default: tablestore dev)")
	fs.StringVar(&c.Table, "table", c.Table, "table to write (created if missing)")
	fs.StringVar(&c.Scenario, "scenario", c.Scenario, "PartitionKey pattern: uniform | hot-partition | append | append-hashed (append with a bucket prefix, -partitions buckets) | zipf | moving-hot (90% on 1/8 of the keys, moving every 15 s)")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "number of PartitionKeys of uniform and zipf")
	fs.Float64Var(&c.ZipfS, "zipf-s", c.ZipfS, "Zipf exponent of the zipf scenario (> 1; larger is more skewed)")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "target entities (requests) per second over all workers; 0: as fast as possible")
	fs.IntVar(&c.Workers, "workers", c.Workers, "concurrent requests")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "length of the run")
	fs.IntVar(&c.EntitySize, "entity-size", c.EntitySize, "approximate size of each entity's JSON body in bytes")
	fs.Float64Var(&c.ReadRatio, "read-ratio", c.ReadRatio, "fraction of requests that are point reads of entities written earlier")
	fs.IntVar(&c.IdleConns, "idle-conns", c.IdleConns, "idle HTTP connections kept to the endpoint; 0: one per worker")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "time limit of each request")
	fs.BoolVar(&c.Backoff, "backoff", c.Backoff, "pause a worker after an error (a 503's Retry-After, else 50 ms); false keeps hammering")
	fs.DurationVar(&c.ReportInterval, "report-interval", c.ReportInterval, "period of the progress lines")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the key choices; 0 picks one from the clock")
	fs.BoolVar(&c.JSON, "json", c.JSON, "print JSON lines instead of text")
	fs.StringVar(&c.Report, "report", c.Report, "write the run's report at the end to FILE.json and/or FILE.html (one self-contained page with charts); comma-separated for both")
	fs.StringVar(&c.Master, "master", c.Master, "comma-separated master gRPC addresses the report reads ranges, server load and events from (empty: client figures only)")
}

// reportPaths splits --report.
func (c *Config) reportPaths() []string {
	var out []string
	for _, p := range strings.Split(c.Report, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
