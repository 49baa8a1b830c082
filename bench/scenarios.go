package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// env is what a scenario works on: one target, its clients, and the keys
// written so far (for reads).
type env struct {
	o       options
	t       *target
	sc      *aztables.ServiceClient
	tc      *aztables.Client // the scenarios' shared table
	table   string
	payload string
	tail    []byte // entityTail(payload)

	mu      sync.Mutex
	written []string // "pk\x00rk"
	// stored counts the entities written into the shared table so far:
	// each target's table holds what its own rates wrote, so a faster
	// target's later scenarios work on a larger table (result.TableEntities).
	stored atomic.Int64

	// layout, set by a scenario's setup and cleared after its window,
	// says how its table's ranges were led before and after the window
	// (insert-presplit), printed with the results.
	layout func() string
}

// body is an entity's JSON. It is appended from parts marshalled once (the
// keys are the scenarios' own ASCII, needing no escaping): marshalling a map
// per call cost the load generator ~7 % of its CPU, taken from the servers
// it shares the machine with.
func (e *env) body(pk, rk string) []byte {
	b := make([]byte, 0, len(e.tail)+len(pk)+len(rk)+40)
	b = append(b, `{"PartitionKey":"`...)
	b = append(b, pk...)
	b = append(b, `","RowKey":"`...)
	b = append(b, rk...)
	b = append(b, '"')
	return append(b, e.tail...)
}

// entityTail is the part of every entity after its keys.
func entityTail(payload string) []byte {
	p, _ := json.Marshal(payload)
	b := append([]byte(`,"Payload":`), p...)
	return append(b, `,"N":42,"When":"2024-01-02T03:04:05Z","When@odata.type":"Edm.DateTime"}`...)
}

func (e *env) record(pk, rk string) {
	e.stored.Add(1)
	e.mu.Lock()
	if len(e.written) < 200000 {
		e.written = append(e.written, pk+"\x00"+rk)
	}
	e.mu.Unlock()
}

// scenario is one workload. op does one request and says how many entities
// it carried; setup (optional) prepares the table it uses.
type scenario struct {
	name    string
	about   string
	workers func(o options) int
	// tablestoreOnly scenarios need the master (ctl) and are skipped
	// elsewhere.
	tablestoreOnly bool
	setup          func(ctx context.Context, e *env) (op func(w, i int) (int, error), err error)
}

var defaultScenarios = []string{"insert-one-partition", "insert-many-partitions", "batch", "point-read", "insert-one-writer", "insert-presplit"}

var scenarios = []scenario{
	{name: "insert-one-partition", about: "inserts into one PartitionKey",
		setup: func(ctx context.Context, e *env) (func(w, i int) (int, error), error) {
			return func(w, i int) (int, error) {
				rk := fmt.Sprintf("w%02d-%09d", w, i)
				_, err := e.tc.AddEntity(ctx, e.body("hot", rk), nil)
				if err == nil {
					e.record("hot", rk)
				}
				return 1, err
			}, nil
		}},
	{name: "insert-many-partitions", about: "inserts spread over -partitions PartitionKeys",
		setup: func(ctx context.Context, e *env) (func(w, i int) (int, error), error) {
			if e.t.masters != "" {
				// The pre-split ratio takes this for one range: say so.
				e.layout = layoutAround(ctx, e, e.table)
			}
			return spreadInserts(ctx, e, e.tc, "m"), nil
		}},
	{name: "batch", about: "entity group transactions of -batch-size inserts",
		setup: func(ctx context.Context, e *env) (func(w, i int) (int, error), error) {
			return func(w, i int) (int, error) {
				pk := fmt.Sprintf("b%04d", (w*7919+i)%e.o.partitions)
				actions := make([]aztables.TransactionAction, e.o.batchSize)
				for j := range actions {
					actions[j] = aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
						Entity: e.body(pk, fmt.Sprintf("w%02d-%09d-%03d", w, i, j))}
				}
				_, err := e.tc.SubmitTransaction(ctx, actions, nil)
				if err == nil {
					e.stored.Add(int64(len(actions)))
				}
				return e.o.batchSize, err
			}, nil
		}},
	{name: "point-read", about: "reads of entities written before",
		setup: func(ctx context.Context, e *env) (func(w, i int) (int, error), error) {
			if len(e.written) == 0 {
				for i := 0; i < 2000; i++ {
					pk, rk := fmt.Sprintf("p%04d", i%64), fmt.Sprintf("seed%06d", i)
					if _, err := e.tc.AddEntity(ctx, e.body(pk, rk), nil); err == nil {
						e.record(pk, rk)
					}
				}
			}
			if len(e.written) == 0 {
				return nil, errors.New("no entity to read")
			}
			return func(w, i int) (int, error) {
				e.mu.Lock()
				k := e.written[(w*104729+i*31)%len(e.written)]
				e.mu.Unlock()
				pk, rk, _ := strings.Cut(k, "\x00")
				_, err := e.tc.GetEntity(ctx, pk, rk, nil)
				return 1, err
			}, nil
		}},
	{name: "insert-one-writer", about: "one writer inserting (latency)", workers: func(options) int { return 1 },
		setup: func(ctx context.Context, e *env) (func(w, i int) (int, error), error) {
			return func(w, i int) (int, error) {
				rk := fmt.Sprintf("solo-%09d", i)
				_, err := e.tc.AddEntity(ctx, e.body("solo", rk), nil)
				if err == nil {
					e.stored.Add(1)
				}
				return 1, err
			}, nil
		}},
	{name: "insert-presplit", about: "inserts over -partitions PartitionKeys into a table pre-split into -presplit-ranges ranges (4) led by different servers (-presplit-leaders)",
		tablestoreOnly: true,
		setup: func(ctx context.Context, e *env) (func(w, i int) (int, error), error) {
			table := e.table + "split"
			if _, err := e.sc.CreateTable(ctx, table, nil); err != nil {
				return nil, fmt.Errorf("create %s: %w", table, err)
			}
			if _, err := presplit(ctx, e, table, e.o.presplitRanges); err != nil {
				return nil, err
			}
			e.layout = layoutAround(ctx, e, table)
			return spreadInserts(ctx, e, e.sc.NewClient(table), "s"), nil
		}},
	{name: "insert-many-tables", about: "inserts spread over -tables tables (one PartitionKey each; the tables are created before the warm-up): what many Raft groups cost",
		setup: func(ctx context.Context, e *env) (func(w, i int) (int, error), error) {
			clients, err := spreadTables(ctx, e, e.o.tables)
			if err != nil {
				return nil, err
			}
			if e.t.masters != "" {
				// How many Raft groups (and so write lanes) the tables
				// landed in decides the figure: say so.
				e.layout = groupsAround(ctx, e, e.table+"m")
			}
			return func(w, i int) (int, error) {
				tc := clients[(w*7919+i*31)%len(clients)]
				_, err := tc.AddEntity(ctx, e.body("p", fmt.Sprintf("t%02d-%09d", w, i)), nil)
				if err == nil {
					e.stored.Add(1)
				}
				return 1, err
			}, nil
		}},
}

// spreadTables creates n tables beside the shared one (16 at a time) and
// returns a client of each.
func spreadTables(ctx context.Context, e *env, n int) ([]*aztables.Client, error) {
	clients := make([]*aztables.Client, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				name := spreadTableName(e, k)
				if _, err := e.sc.CreateTable(ctx, name, nil); err != nil {
					errs[k] = fmt.Errorf("create %s: %w", name, err)
				}
				clients[k] = e.sc.NewClient(name)
			}
		}()
	}
	for k := range n {
		next <- k
	}
	close(next)
	wg.Wait()
	return clients, errors.Join(errs...)
}

// spreadTableName is the name of spreadTables' table k.
func spreadTableName(e *env, k int) string { return fmt.Sprintf("%sm%05d", e.table, k) }

func spreadInserts(ctx context.Context, e *env, tc *aztables.Client, prefix string) func(w, i int) (int, error) {
	return func(w, i int) (int, error) {
		pk := fmt.Sprintf("p%04d", (w*7919+i)%e.o.partitions)
		rk := fmt.Sprintf("%s%02d-%09d", prefix, w, i)
		_, err := tc.AddEntity(ctx, e.body(pk, rk), nil)
		if err == nil && tc == e.tc {
			// Only the shared table's keys: point-read reads them there
			// (the pre-split table's would be 404s).
			e.record(pk, rk)
		}
		return 1, err
	}
}

func scenarioByName(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.name == name {
			return s, true
		}
	}
	return scenario{}, false
}

func allScenarios() []string {
	var out []string
	for _, s := range scenarios {
		out = append(out, s.name)
	}
	return out
}

// presplit splits table into n ranges at evenly spaced PartitionKeys of the
// spread scenarios and moves their leaderships round-robin over the
// replicas (or all to the first, -presplit-leaders one; or splits in the
// range's group and moves nothing, -presplit-leaders group; or splits in
// the group and moves the last ranges' leaderships each to another
// replica, which moves them out of the group, -presplit-leaders groups),
// through `tablestore ctl` as an operator would. It returns the layout it
// reached, as rangeLayout reads it.
func presplit(ctx context.Context, e *env, table string, n int) (string, error) {
	for k := 1; k < n; k++ {
		args := []string{"split", table, fmt.Sprintf("p%04d", k*e.o.partitions/n)}
		if e.o.presplitLeaders == "group" || e.o.presplitLeaders == "groups" {
			args = append(args, "--in-group")
		}
		if _, err := ctl(ctx, e, args...); err != nil {
			return "", err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs, out, err := rangeLayout(ctx, e, table)
		if err != nil {
			return "", err
		}
		done := len(rs) == n
		for k, r := range rs {
			if len(r.Replicas) == 0 {
				done = false
				continue
			}
			if want := presplitLeader(e.o.presplitLeaders, k, n, r.Replicas, rs[0].Leader); want != "" && r.Leader != want {
				done = false
				ctl(ctx, e, "transfer-leader", fmt.Sprint(r.RangeID), "--to", want)
			}
		}
		if done {
			return layoutLine(rs), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("table %s: ranges not split and spread within 30s: %s", table, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ctl runs `tablestore ctl --json` against e's master.
func ctl(ctx context.Context, e *env, args ...string) ([]byte, error) {
	full := append([]string{"ctl", "--master", e.t.masters, "--json"}, args...)
	out, err := exec.CommandContext(ctx, e.o.bin, full...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// rangeInfo is one line of `ctl ranges --json`.
type rangeInfo struct {
	RangeID  uint64   `json:"range_id"`
	Table    string   `json:"table"`
	Group    uint64   `json:"group"`
	Start    string   `json:"start"`
	Replicas []string `json:"replicas"`
	Leader   string   `json:"leader"`
}

// rangeLayout is table's ranges in key order, as the master knows them
// (leaders from the servers' reports), and ctl's output.
func rangeLayout(ctx context.Context, e *env, table string) ([]rangeInfo, []byte, error) {
	out, err := ctl(ctx, e, "ranges", "--table", table)
	if err != nil {
		return nil, out, err
	}
	var rs []rangeInfo
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r rangeInfo
		if json.Unmarshal([]byte(line), &r) == nil && r.RangeID != 0 {
			rs = append(rs, r)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
	return rs, out, nil
}

// presplitLeader is the leader presplit wants for the k-th of n ranges
// under -presplit-leaders: spread round-robin, or all on the first replica
// in name order ("one": how the same ranges cost when a server leads them
// all, so that their appends and frames travel together), or none in
// particular ("group": the ranges are spans of one Raft group, led by its
// leader), or ("groups") the last ranges each on one of the replicas other
// than first, the group's leader, and the others none (they stay spans of
// the group): n ranges in as many Raft groups as there are replicas, one
// led by each.
func presplitLeader(policy string, k, n int, replicas []string, first string) string {
	switch policy {
	case "group":
		return "" // the group's leader leads every span; nothing to move
	case "groups":
		if first == "" {
			return ""
		}
		var others []string
		for _, r := range replicas {
			if r != first {
				others = append(others, r)
			}
		}
		sort.Strings(others)
		if j := k - (n - len(others)); j >= 0 && j < len(others) {
			return others[j]
		}
		return ""
	case "one":
		return spreadLeader(0, replicas)
	}
	return spreadLeader(k, replicas)
}

// spreadLeader is the leader the k-th range gets when leaders are spread:
// the replicas in name order, round-robin.
func spreadLeader(k int, replicas []string) string {
	reps := append([]string(nil), replicas...)
	sort.Strings(reps)
	return reps[k%len(reps)]
}

// layoutAround reads table's layout now (before a window) and returns
// what reads it again after the window and says both.
func layoutAround(ctx context.Context, e *env, table string) func() string {
	read := func() string {
		rs, _, err := rangeLayout(ctx, e, table)
		if err != nil {
			return "unknown (" + err.Error() + ")"
		}
		return layoutLine(rs)
	}
	before := read()
	return func() string { return fmt.Sprintf("before the window %s; after it %s", before, read()) }
}

// groupsAround reads, before a window and after it, how the ranges of the
// tables named with prefix sit in Raft groups, as ctl ranges reports them.
func groupsAround(ctx context.Context, e *env, prefix string) func() string {
	read := func() string {
		rs, err := prefixRanges(ctx, e, prefix)
		if err != nil {
			return "unknown (" + err.Error() + ")"
		}
		return groupsLine(rs)
	}
	before := read()
	return func() string { return fmt.Sprintf("before the window %s; after it %s", before, read()) }
}

// prefixRanges is the ranges of the tables named with prefix, as ctl
// ranges reports them.
func prefixRanges(ctx context.Context, e *env, prefix string) ([]rangeInfo, error) {
	out, err := ctl(ctx, e, "ranges")
	if err != nil {
		return nil, err
	}
	var rs []rangeInfo
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r rangeInfo
		if json.Unmarshal([]byte(line), &r) == nil && r.RangeID != 0 && strings.HasPrefix(r.Table, prefix) {
			rs = append(rs, r)
		}
	}
	return rs, nil
}

// groupsLine says how many ranges sit in how many Raft groups, and the
// groups' sizes and leaders, largest first.
func groupsLine(rs []rangeInfo) string {
	type group struct {
		spans  int
		leader string
	}
	groups := map[uint64]*group{}
	for _, r := range rs {
		id := cmp.Or(r.Group, r.RangeID)
		g := groups[id]
		if g == nil {
			g = &group{leader: cmp.Or(r.Leader, "none")}
			groups[id] = g
		}
		g.spans++
	}
	list := make([]*group, 0, len(groups))
	for _, g := range groups {
		list = append(list, g)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].spans != list[j].spans {
			return list[i].spans > list[j].spans
		}
		return list[i].leader < list[j].leader
	})
	parts := make([]string, 0, min(len(list), 8))
	for i, g := range list {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(list)-8))
			break
		}
		parts = append(parts, fmt.Sprintf("%d led by %s", g.spans, g.leader))
	}
	return fmt.Sprintf("%d ranges in %d Raft groups (%s)", len(rs), len(groups), strings.Join(parts, ", "))
}

// layoutLine says how many ranges and which leads each, in key order.
func layoutLine(rs []rangeInfo) string {
	leaders := make([]string, len(rs))
	for i, r := range rs {
		leaders[i] = r.Leader
		if leaders[i] == "" {
			leaders[i] = "none"
		}
	}
	groups := map[uint64]bool{}
	for _, r := range rs {
		groups[cmp.Or(r.Group, r.RangeID)] = true
	}
	return fmt.Sprintf("%d ranges in %d Raft groups, leaders %s", len(rs), len(groups), strings.Join(leaders, " "))
}

// result is one scenario's figures on one target.
type result struct {
	Target     string  `json:"target"`
	Scenario   string  `json:"scenario"`
	Workers    int     `json:"workers"`
	Rate       float64 `json:"entities_per_sec"`
	Requests   float64 `json:"requests_per_sec"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	// WarmupErrors are the calls that failed in the warm-up (-warmup),
	// not counted in Errors.
	WarmupErrors     int64              `json:"warmup_errors,omitempty"`
	FirstWarmupError string             `json:"first_warmup_error,omitempty"`
	CPUPerOp         map[string]float64 `json:"cpu_us_per_entity"` // by role, plus "servers" (all but client)
	// SwitchesPerOp and SyscallsPerOp are the kernel's counts (kernel.go),
	// by role like CPUPerOp.
	SwitchesPerOp map[string]float64 `json:"context_switches_per_entity,omitempty"`
	SyscallsPerOp map[string]float64 `json:"rw_syscalls_per_entity,omitempty"`
	// MachineBusy and MachineIOWait are the whole machine's CPU shares
	// over the scenario, in percent (/proc/stat): below 100 % busy, the
	// scenario was bound by something other than the processors.
	MachineBusy   float64 `json:"machine_busy_percent"`
	MachineIOWait float64 `json:"machine_iowait_percent"`
	Skipped       string  `json:"skipped,omitempty"`
	// Round is the result's round (-rounds): every round starts the
	// targets afresh (runRound).
	Round int `json:"round"`
	// Setup is how the target ran where its name does not say
	// (Azurite's persistence and telemetry: startAzurite).
	Setup string `json:"target_setup,omitempty"`
	// Layout is the scenario's table's ranges and leaders before and
	// after the window (insert-presplit).
	Layout string `json:"layout,omitempty"`
	// TableEntities is how many entities the bench had written into the
	// shared table (preload, earlier scenarios) when the scenario's
	// warm-up began: the targets' tables differ by their own rates.
	TableEntities int64 `json:"table_entities_before"`
}

// run drives op from workers goroutines for warmup and then d, and
// measures over the window of d the rate of entities carried by the
// successful calls that ended in it, their latency, and CPU. The load runs
// on from the warm-up into the window and the window closes while calls
// are still in flight, so it sees the steady state only: not the cold
// start (connections, Azurite's JIT), nor the ramp-down where the workers
// that finished wait for the slowest call. With rate > 0 the workers
// together start at most rate calls per second, the k-th call not before
// the warm-up's start + k/rate: CPU per entity of two builds is then
// compared at the same rate, which a loaded machine's swings in throughput
// otherwise confound with the per-second costs (heartbeats, group commits).
func run(t *target, name string, workers int, warmup, d time.Duration, rate float64, op func(w, i int) (int, error)) result {
	var issued atomic.Int64
	var errs, warmErrs atomic.Int64
	var firstErr, firstWarmErr atomic.Value
	var entities atomic.Int64
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	begin := time.Now()
	start := begin.Add(warmup)
	end := start.Add(d)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				if rate > 0 {
					due := begin.Add(time.Duration(float64(issued.Add(1)-1) / rate * float64(time.Second)))
					if !due.Before(end) {
						return
					}
					time.Sleep(time.Until(due))
				}
				t0 := time.Now()
				n, err := op(w, i)
				t1 := time.Now()
				switch {
				case t1.Before(start):
					if err != nil && warmErrs.Add(1) == 1 {
						firstWarmErr.Store(err.Error())
					}
				case !t1.Before(end):
					// Ended after the window: its work is partly outside the
					// CPU samples, and its worker stops here.
				case err != nil:
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
				default:
					entities.Add(int64(n))
					lat[w] = append(lat[w], t1.Sub(t0))
				}
			}
		}(w)
	}
	time.Sleep(time.Until(start))
	before, kbefore, mbefore := t.cpu(), t.kernel(), sampleMachine()
	profiles := t.profile(name, d)
	defer profiles.Wait()
	time.Sleep(time.Until(end))
	after, kafter, mafter := t.cpu(), t.kernel(), sampleMachine()
	wg.Wait()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := result{Target: t.name, Scenario: name, Workers: workers, Errors: errs.Load(), WarmupErrors: warmErrs.Load(), Setup: t.setup,
		Rate: float64(entities.Load()) / d.Seconds(), Requests: float64(len(all)) / d.Seconds(),
		CPUPerOp: map[string]float64{}}
	r.MachineBusy, r.MachineIOWait = machineShares(mbefore, mafter)
	r.FirstError = clip(firstErr.Load())
	r.FirstWarmupError = clip(firstWarmErr.Load())
	if len(all) > 0 {
		r.P50 = ms(percentile(all, 50))
		r.P99 = ms(percentile(all, 99))
	}
	if n := entities.Load(); n > 0 {
		r.CPUPerOp = perOp(before, after, n, func(seconds float64) float64 { return seconds * 1e6 })
		r.SwitchesPerOp = perOp(kbefore, kafter, n, func(k kernelSample) float64 { return k.switches })
		r.SyscallsPerOp = perOp(kbefore, kafter, n, func(k kernelSample) float64 { return k.syscalls })
	}
	return r
}

// clip is an error text stored in an atomic.Value, cut to 300 bytes; ""
// when none was stored.
func clip(v any) string {
	s, _ := v.(string)
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func newService(o options, conn string) (*aztables.ServiceClient, error) {
	opts := &aztables.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: -1}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = o.idle, o.idle
	opts.Transport = &http.Client{Transport: tr}
	return aztables.NewServiceClientFromConnectionString(conn, opts)
}

// runThroughput measures every scenario on every target and prints the
// figures, the ratios to Azurite and the CPU per entity.
func runThroughput(o options, targets []string) error {
	fmt.Printf("tablestore bench: %d workers, %v per scenario after %v of warm-up, ~%d B entities, %d PartitionKeys, batches of %d, %d round(s)\n",
		o.workers, o.duration, o.warmup, o.size, o.partitions, o.batchSize, o.rounds)
	if len(o.serverEnv) > 0 {
		fmt.Printf("tablestore processes' environment adds: %s\n", strings.Join(o.serverEnv, " "))
	}
	var results []result
	for round := 1; round <= o.rounds; round++ {
		if o.rounds > 1 {
			fmt.Printf("\n=== round %d of %d\n", round, o.rounds)
		}
		rs, err := runRound(o, targets)
		for i := range rs {
			rs[i].Round = round
		}
		if err != nil {
			return err
		}
		printRatios(rs, targets)
		results = append(results, rs...)
	}
	if o.rounds > 1 {
		printMedians(results, targets)
	}
	if o.jsonOut != "" {
		data, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(o.jsonOut, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runRound starts every target afresh and runs each scenario on each
// target in turn before the next scenario. Taking turns per scenario, not
// per target, puts a ratio's two runs seconds apart rather than minutes:
// this machine's own speed moves by ±15 % over minutes (a neighbour on the
// host), and a ratio measured across such a change says more about the
// machine than about either target. The targets waiting their turn are
// idle (each tablestore role's idle CPU is a few milliseconds per second;
// see bench -mode tables), and their order is the same in every scenario.
func runRound(o options, targets []string) ([]result, error) {
	var envs []*env
	defer func() {
		for _, e := range envs {
			e.t.stop()
		}
	}()
	ctx := context.Background()
	for _, name := range targets {
		t, err := startTarget(name, o)
		if errors.Is(err, errSkip) {
			fmt.Printf("\n[%s] skipped: azurite-table is not on the PATH (npm install -g azurite@3.37.0)\n", name)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", name, err)
		}
		if t.setup != "" {
			fmt.Printf("[%s] %s\n", t.name, t.setup)
		}
		e, err := newEnv(ctx, o, t)
		envs = append(envs, e)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", name, err)
		}
	}
	fmt.Printf("\n%-24s %-10s %12s %10s %10s %8s  %s\n", "scenario", "target", "entities/s", "p50 ms", "p99 ms", "errors", "server CPU us/entity")
	var out []result
	for _, name := range o.scenarios {
		for _, e := range envs {
			r, err := measureScenario(ctx, e, name)
			if err != nil {
				return out, fmt.Errorf("target %s: %w", e.t.name, err)
			}
			out = append(out, r)
			if r.Skipped != "" {
				continue
			}
			fmt.Printf("%-24s %-10s %12.0f %10.2f %10.2f %8d  %s\n", name, e.t.name, r.Rate, r.P50, r.P99, r.Errors, cpuLine(r.CPUPerOp))
			if o.kernel {
				fmt.Printf("%-24s %-10s machine busy %.0f %%, iowait %.0f %%; context switches per entity %s; read/write syscalls %s; shared table held %d entities before the warm-up\n", "", "",
					r.MachineBusy, r.MachineIOWait, kernelLine(r.SwitchesPerOp), kernelLine(r.SyscallsPerOp), r.TableEntities)
			}
			if r.FirstError != "" {
				fmt.Printf("    first error: %s\n", r.FirstError)
			}
			if r.WarmupErrors > 0 {
				fmt.Printf("    warm-up: %d failed calls, the first: %s\n", r.WarmupErrors, r.FirstWarmupError)
			}
			if r.Layout != "" {
				fmt.Printf("    ranges: %s\n", r.Layout)
			}
		}
	}
	return out, nil
}

// newEnv creates the scenarios' shared table on t.
func newEnv(ctx context.Context, o options, t *target) (*env, error) {
	e := &env{o: o, t: t, table: fmt.Sprintf("bench%d", time.Now().Unix()%1e6),
		payload: strings.Repeat("x", max(0, o.size-100))}
	e.tail = entityTail(e.payload)
	sc, err := newService(o, t.conn)
	if err != nil {
		return e, err
	}
	e.sc = sc
	if _, err := sc.CreateTable(ctx, e.table, nil); err != nil {
		return e, fmt.Errorf("create table: %w", err)
	}
	e.tc = sc.NewClient(e.table)
	if o.preload > 0 {
		start := time.Now()
		if err := preload(ctx, e, o.preload); err != nil {
			return e, fmt.Errorf("preload: %w", err)
		}
		fmt.Printf("[%s] preloaded %d entities into %s in %.1f s\n", t.name, o.preload, e.table, time.Since(start).Seconds())
	}
	return e, nil
}

// preload fills the shared table with n entities over the spread
// scenarios' PartitionKeys (batches of up to 100, RowKeys of their own), so
// that the scenarios run against a table of that size: a B+tree's cost per
// write grows with the tree (docs/performance.md, session 15).
func preload(ctx context.Context, e *env, n int) error {
	const per = 100
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k*per >= n {
					return
				}
				pk := fmt.Sprintf("p%04d", k%e.o.partitions)
				actions := make([]aztables.TransactionAction, min(per, n-k*per))
				for j := range actions {
					actions[j] = aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
						Entity: e.body(pk, fmt.Sprintf("pre-%09d-%03d", k, j))}
				}
				if _, err := e.tc.SubmitTransaction(ctx, actions, nil); err == nil {
					e.stored.Add(int64(len(actions)))
				} else {
					next.Store(int64(n)) // the others stop at their next batch
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// measureScenario runs scenario name on e's target.
func measureScenario(ctx context.Context, e *env, name string) (result, error) {
	o, t := e.o, e.t
	s, _ := scenarioByName(name)
	if s.tablestoreOnly && t.masters == "" {
		return result{Target: t.name, Scenario: name, Skipped: "needs a tablestore master"}, nil
	}
	workers := o.workers
	if s.workers != nil {
		workers = s.workers(o)
	}
	op, err := s.setup(ctx, e)
	if err != nil {
		return result{}, fmt.Errorf("%s: %w", name, err)
	}
	stored := e.stored.Load()
	r := run(t, name, workers, o.warmup, o.duration, o.rate, op)
	r.TableEntities = stored
	if e.layout != nil {
		r.Layout = e.layout()
		e.layout = nil
	}
	return r, nil
}

func cpuLine(m map[string]float64) string { return roleLine(m, "%.0f") }

// roleLine prints a per-entity figure of every role: the servers' sum, each
// role's in brackets when there are several, and the client's.
func roleLine(m map[string]float64, format string) string {
	var roles []string
	for role := range m {
		if role != "servers" && role != "client" {
			roles = append(roles, role)
		}
	}
	sort.Strings(roles)
	var b strings.Builder
	fmt.Fprintf(&b, format, m["servers"])
	if len(roles) > 1 {
		b.WriteString(" (")
		for i, role := range roles {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s "+format, role, m[role])
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, "; client "+format, m["client"])
	return b.String()
}

// printRatios prints one line per scenario with each target's rate and its
// ratio to Azurite's.
func printRatios(rs []result, targets []string) {
	by := map[string]map[string]result{}
	for _, r := range rs {
		if by[r.Scenario] == nil {
			by[r.Scenario] = map[string]result{}
		}
		by[r.Scenario][r.Target] = r
	}
	var present []string
	for _, t := range targets {
		for _, r := range rs {
			if r.Target == t {
				present = append(present, t)
				break
			}
		}
	}
	fmt.Printf("\nentities/s (ratio to azurite)\n%-24s", "scenario")
	for _, t := range present {
		fmt.Printf(" %22s", t)
	}
	fmt.Println()
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.Scenario] {
			continue
		}
		seen[r.Scenario] = true
		fmt.Printf("%-24s", r.Scenario)
		az, hasAz := by[r.Scenario]["azurite"]
		for _, t := range present {
			x, ok := by[r.Scenario][t]
			switch {
			case !ok || x.Skipped != "":
				fmt.Printf(" %22s", "-")
			case hasAz && az.Skipped == "" && az.Rate > 0 && t != "azurite":
				fmt.Printf(" %14.0f (%4.2fx)", x.Rate, x.Rate/az.Rate)
			default:
				fmt.Printf(" %22.0f", x.Rate)
			}
		}
		fmt.Println()
	}
	// A rate counts successful calls only: say where calls failed, so a
	// ratio is not read without them.
	var failed []string
	for _, r := range rs {
		if r.Errors > 0 {
			failed = append(failed, fmt.Sprintf("%s on %s %d", r.Scenario, r.Target, r.Errors))
		}
	}
	if len(failed) > 0 {
		fmt.Printf("failed calls (not in the rates): %s\n", strings.Join(failed, ", "))
	}
	// Issue 8's split target: the pre-split table against one range, same
	// target, same run.
	var split []string
	for _, t := range present {
		ps, one := by["insert-presplit"][t], by["insert-many-partitions"][t]
		if ps.Skipped == "" && one.Skipped == "" && ps.Rate > 0 && one.Rate > 0 {
			split = append(split, fmt.Sprintf("%s %.2fx", t, ps.Rate/one.Rate))
		}
	}
	if len(split) > 0 {
		fmt.Printf("insert-presplit / insert-many-partitions: %s\n", strings.Join(split, ", "))
	}
}

// printMedians summarises the rounds: per scenario, each round's ratio to
// Azurite (and the pre-split table's to one range) and their median. One
// run's ratio moves by ±15 % on this machine with the load of its
// neighbours and Azurite's own speed; the rounds alternate the targets, so
// a slow minute hits both sides of a ratio alike.
func printMedians(rs []result, targets []string) {
	type key struct{ scenario, target string }
	rates := map[key]map[int]float64{}
	var scenarios []string
	for _, r := range rs {
		if r.Skipped != "" || r.Rate <= 0 {
			continue
		}
		k := key{r.Scenario, r.Target}
		if rates[k] == nil {
			rates[k] = map[int]float64{}
			if !slices.Contains(scenarios, r.Scenario) {
				scenarios = append(scenarios, r.Scenario)
			}
		}
		rates[k][r.Round] = r.Rate
	}
	ratios := func(num, den key) []float64 {
		var out []float64
		for round, n := range rates[num] {
			if d, ok := rates[den][round]; ok && d > 0 {
				out = append(out, n/d)
			}
		}
		sort.Float64s(out)
		return out
	}
	line := func(label string, rs []float64) {
		if len(rs) == 0 {
			return
		}
		parts := make([]string, len(rs))
		for i, r := range rs {
			parts[i] = fmt.Sprintf("%.2f", r)
		}
		fmt.Printf("%-54s median %.2fx  (rounds, sorted: %s)\n", label, median(rs), strings.Join(parts, " "))
	}
	fmt.Printf("\n=== summary of %d rounds\n", len(rounds(rs)))
	for _, sc := range scenarios {
		for _, t := range targets {
			if t == "azurite" {
				continue
			}
			line(fmt.Sprintf("%s %s / azurite", sc, t), ratios(key{sc, t}, key{sc, "azurite"}))
		}
	}
	for _, t := range targets {
		line(fmt.Sprintf("insert-presplit / insert-many-partitions, %s", t),
			ratios(key{"insert-presplit", t}, key{"insert-many-partitions", t}))
	}
}

func rounds(rs []result) map[int]bool {
	out := map[int]bool{}
	for _, r := range rs {
		out[r.Round] = true
	}
	return out
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
