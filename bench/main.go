// Command bench measures tablestore through the official Azure SDK
// (aztables) and, in the same run, Azurite when `azurite-table` is on the
// PATH, and prints the ratios.
//
// Targets (-target, comma-separated, each measured in turn with the same
// scenarios):
//   - dev: `tablestore dev` (every role in one process);
//   - processes: the deployment shape, each role its own process (1 master,
//     3 partition servers, 1 front-end) the way the README shows;
//   - azurite: `azurite-table` on a scratch directory;
//   - conn: any endpoint given by -conn.
//
// Besides throughput and latency it reports server CPU per operation for
// every process it started, read from /proc/PID/stat, so a figure says what
// an operation costs, not only how many fit in the machine, and (-kernel)
// the context switches and read/write system calls behind it (kernel.go).
//
// `-mode tables` runs the many-tables benchmark instead (see tables.go), and
// `-mode failover` kills a partition server under load (see failover.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

type options struct {
	bin        string
	conn       string
	workers    int
	duration   time.Duration
	size       int
	partitions int
	batchSize  int
	idle       int
	scenarios  []string
	throttle   bool
	kernel     bool
	serverEnv  []string
	psFlags    []string
	// masterFlags are added to the master's command line (and to dev's).
	masterFlags []string
	preload     int
	jsonOut     string
	tables      int
	quietAfter  time.Duration
	readAll     bool
	profileDir  string
	rate        float64
	rounds      int
	// azuriteMemory and azuriteTelemetry: how Azurite runs (startAzurite).
	azuriteMemory    bool
	azuriteTelemetry bool
	warmup           time.Duration
	// presplitRanges and presplitLeaders: the insert-presplit table's
	// layout (presplit).
	presplitRanges  int
	presplitLeaders string
}

func main() {
	var o options
	targets := flag.String("target", "dev,processes,azurite", "what to measure, comma-separated: dev, processes, azurite, conn (azurite is skipped when azurite-table is not on the PATH)")
	mode := flag.String("mode", "throughput", "throughput: the SDK workloads; tables: create many tables, then idle cost and first-request latency; failover: inserts over -tables tables while the leader of their largest Raft group is killed and, -duration later, restarted (processes target)")
	flag.StringVar(&o.bin, "binary", "./bin/tablestore", "tablestore binary to start")
	flag.StringVar(&o.conn, "conn", "", "connection string of the endpoint of the conn target")
	flag.IntVar(&o.workers, "workers", 32, "concurrent workers")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each scenario")
	flag.Float64Var(&o.rate, "rate", 0, "throughput mode: calls per second all workers together start at most (0: as fast as they can); compares CPU per entity of two builds at the same rate")
	flag.IntVar(&o.rounds, "rounds", 1, "throughput mode: run everything this many times (each round starts the targets afresh and runs each scenario on every target in turn before the next scenario), and print each round's ratios and their medians")
	flag.IntVar(&o.size, "entity-size", 1024, "approximate entity size in bytes")
	flag.IntVar(&o.partitions, "partitions", 1024, "PartitionKeys of the spread-insert scenarios")
	flag.IntVar(&o.presplitRanges, "presplit-ranges", 4, "ranges the insert-presplit scenario splits its table into (issue 8's target is 4)")
	flag.StringVar(&o.presplitLeaders, "presplit-leaders", "spread", "who leads the insert-presplit table's ranges: spread (round-robin over the replicas, issue 8's target), one (the first replica in name order leads them all) group (split in the range's Raft group, ctl split --in-group: the ranges are spans of one group, led by its leader) or groups (split in the group, then the last ranges' leaderships moved each to another replica, which moves them out of the group: as many Raft groups as replicas, one led by each)")
	flag.IntVar(&o.batchSize, "batch-size", 100, "entities per entity group transaction in the batch scenario")
	flag.IntVar(&o.idle, "idle-conns", 64, "idle HTTP connections kept per host (the SDK default of 10 makes 32 workers keep dialing)")
	only := flag.String("scenarios", strings.Join(defaultScenarios, ","), "scenarios to run, comma-separated: "+strings.Join(allScenarios(), ", "))
	flag.BoolVar(&o.kernel, "kernel", false, "throughput mode: also print each scenario's context switches and read/write system calls per entity, by role (always in -json)")
	psFlags := flag.String("partitionserver-flags", "", "flags, comma-separated (--name=value), added to every partition server the bench starts (processes) and to dev, e.g. --quiesce-after=1s")
	masterFlags := flag.String("master-flags", "", "flags, comma-separated (--name=value), added to the master the bench starts (processes) and to dev, e.g. --table-groups")
	serverEnv := flag.String("server-env", "", "KEY=VALUE settings, comma-separated, added to the environment of every tablestore process the bench starts (dev, processes; not Azurite, not the load generator), e.g. GOMAXPROCS=1")
	flag.IntVar(&o.preload, "preload", 0, "throughput mode: entities written into the shared table (batches over the spread scenarios' PartitionKeys) before the scenarios run, on every target")
	flag.BoolVar(&o.throttle, "throttle", false, "keep the per-PartitionKey throttle (Azure's 2,000 entities/s) on; off measures what a partition can do")
	flag.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file")
	flag.IntVar(&o.tables, "tables", 1000, "tables mode: how many tables to create; throughput mode: how many tables the insert-many-tables scenario spreads its inserts over")
	flag.BoolVar(&o.readAll, "read-all", false, "tables mode: also read the entity of every table (the 10,000-table check)")
	flag.StringVar(&o.profileDir, "profile-dir", "", "save CPU profiles into this directory: throughput mode, processes target: every process with --pprof-addr, a CPU and an allocation profile of each per scenario (<scenario>-<role>.pprof), and on the processes and azurite targets the load generator's own (<scenario>-client-<target>.pprof); tables mode, dev target: the process over the first 10 s of creation (create.pprof), the idle window (idle.pprof) and the first reads (reads.pprof)")
	flag.DurationVar(&o.quietAfter, "quiet-after", 30*time.Second, "tables mode: how long after the last request idle CPU is measured")
	flag.BoolVar(&o.azuriteMemory, "azurite-memory", false, "run Azurite with --inMemoryPersistence instead of its on-disk default (which writes its whole database as JSON every 5 s, without fsync)")
	flag.BoolVar(&o.azuriteTelemetry, "azurite-telemetry", false, "leave Azurite's telemetry on (its default; before 2026-11-27 the bench did): a record built per request and failed exports stored under $TMPDIR, counted in Azurite's CPU")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "throughput mode: load each scenario this long, unmeasured, before its -duration window on each target, the load running on into the window (0: none, as before 2026-11-27: the window then includes each target's cold start, for Azurite its JIT's, which made its first scenario's CPU per insert ~1.5x in 3 s windows)")
	flag.Parse()
	if o.preload < 0 {
		fail(fmt.Errorf("-preload %d: must not be negative", o.preload))
	}
	if o.presplitRanges < 1 || o.presplitRanges > o.partitions {
		fail(fmt.Errorf("-presplit-ranges %d: must be between 1 and -partitions (%d)", o.presplitRanges, o.partitions))
	}
	if !slices.Contains([]string{"spread", "one", "group", "groups"}, o.presplitLeaders) {
		fail(fmt.Errorf("-presplit-leaders %q: want spread, one, group or groups", o.presplitLeaders))
	}
	if o.tables < 1 {
		fail(fmt.Errorf("-tables %d: must be at least 1", o.tables))
	}
	if o.rounds < 1 {
		fail(fmt.Errorf("-rounds %d: must be at least 1", o.rounds))
	}
	o.scenarios = splitList(*only)
	o.serverEnv = splitList(*serverEnv)
	o.psFlags = splitList(*psFlags)
	o.masterFlags = splitList(*masterFlags)
	for name, list := range map[string][]string{"-partitionserver-flags": o.psFlags, "-master-flags": o.masterFlags} {
		for _, f := range list {
			if !strings.HasPrefix(f, "-") {
				fail(fmt.Errorf("%s %q: want --name=value", name, f))
			}
		}
	}
	for _, kv := range o.serverEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			fail(fmt.Errorf("-server-env %q: want KEY=VALUE", kv))
		}
	}
	for _, s := range o.scenarios {
		if _, ok := scenarioByName(s); !ok {
			fail(fmt.Errorf("unknown scenario %q (known: %s)", s, strings.Join(allScenarios(), ", ")))
		}
	}

	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			fail(err)
		}
	}
	var err error
	switch *mode {
	case "throughput":
		err = runThroughput(o, splitList(*targets))
	case "tables":
		err = runTables(o, splitList(*targets))
	case "failover":
		err = runFailover(o, splitList(*targets))
	default:
		err = fmt.Errorf("unknown -mode %q (throughput, tables, failover)", *mode)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
