package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

// The failover mode (-mode failover) measures what a partition server's
// crash costs the tables whose Raft groups it leads: -tables tables are
// created (with the master's defaults they fill one shared group), -workers
// writers insert into them, and after the warm-up the leader of the group
// holding the most tables is killed with SIGKILL. For -duration the writers
// go on; then the server is started again on its data and the writers run
// another -duration. It prints how long inserts stopped (for the whole
// load and per table), how fast the rate came back, the errors the writers
// saw, and where the leaderships went: what a failover pauses, by how many
// tables share a group (compare -master-flags=--table-groups=false, a
// group per table).

// failoverCallTimeout bounds one insert: long enough that a call the
// front-end is still retrying towards the new leader is not cut short (the
// gap measured is the cluster's, not the client's), short enough that a
// hung call does not hold a writer for the whole window.
const failoverCallTimeout = 15 * time.Second

// successLog records when each table's inserts succeeded, and every
// insert's outcome, from the start of the load.
type successLog struct {
	start time.Time
	mu    sync.Mutex
	// at[k] is table k's success times, in order of completion (calls to
	// one table from several writers may complete out of start order,
	// which the gap computation does not need).
	at     [][]time.Duration
	errors map[string]int
}

func newSuccessLog(tables int, start time.Time) *successLog {
	return &successLog{start: start, at: make([][]time.Duration, tables), errors: map[string]int{}}
}

func (l *successLog) ok(k int, now time.Time) {
	l.mu.Lock()
	l.at[k] = append(l.at[k], now.Sub(l.start))
	l.mu.Unlock()
}

func (l *successLog) failed(err error) {
	kind := errorKind(err)
	l.mu.Lock()
	l.errors[kind]++
	l.mu.Unlock()
}

// errorKind names an insert's failure for the error counts: the HTTP
// status and Azure code when the service answered, else what the client
// saw.
func errorKind(err error) string {
	var re *azcore.ResponseError
	switch {
	case errors.As(err, &re):
		return fmt.Sprintf("%d %s", re.StatusCode, re.ErrorCode)
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return "no answer: " + s
}

// gapStats is what an outage looked like to the writers, from the success
// log.
type gapStats struct {
	// any is the time from the event to the first insert that succeeded
	// after it, in any table.
	any time.Duration
	// gaps are, for each table that had an insert succeed before the
	// event, the time from its last success before the event to its first
	// after it; unwritten counts those with none after it within the window.
	gaps      []time.Duration
	unwritten int
}

// outage computes gapStats for the event at `at`, looking at successes up
// to `until` (both since the log's start), over the tables for which
// include is true.
func outage(at, until time.Duration, times [][]time.Duration, include func(k int) bool) gapStats {
	var g gapStats
	g.any = -1
	for k, ts := range times {
		last, first := time.Duration(-1), time.Duration(-1)
		for _, t := range ts {
			switch {
			case t < at:
				last = max(last, t)
			case t <= until && (first < 0 || t < first):
				first = t
			}
		}
		if first >= 0 && (g.any < 0 || first-at < g.any) {
			g.any = first - at
		}
		if !include(k) || last < 0 {
			continue
		}
		if first < 0 {
			g.unwritten++
			continue
		}
		g.gaps = append(g.gaps, first-last)
	}
	sort.Slice(g.gaps, func(i, j int) bool { return g.gaps[i] < g.gaps[j] })
	return g
}

func (g gapStats) String() string {
	s := "no insert succeeded after it"
	if g.any >= 0 {
		s = fmt.Sprintf("first insert %v after it", g.any.Round(time.Millisecond))
	}
	if n := len(g.gaps); n > 0 {
		s += fmt.Sprintf("; per table, last insert before to first after: p50 %v, p99 %v, max %v over %d tables",
			percentile(g.gaps, 50).Round(time.Millisecond), percentile(g.gaps, 99).Round(time.Millisecond),
			g.gaps[n-1].Round(time.Millisecond), n)
	}
	if g.unwritten > 0 {
		s += fmt.Sprintf("; %d tables not written again", g.unwritten)
	}
	return s
}

// rateSeries is the successes per bucket of width step since the log's
// start.
func rateSeries(times [][]time.Duration, step time.Duration, buckets int) []int {
	out := make([]int, buckets)
	for _, ts := range times {
		for _, t := range ts {
			if i := int(t / step); i < buckets {
				out[i]++
			}
		}
	}
	return out
}

// recovery is how long after bucket `from` the rate first reached frac of
// base and held it over the next `hold` buckets' mean, or -1.
func recovery(series []int, from, hold int, base, frac float64) int {
	for i := from; i+hold <= len(series); i++ {
		sum := 0
		for _, n := range series[i : i+hold] {
			sum += n
		}
		if float64(sum)/float64(hold) >= frac*base {
			return i - from
		}
	}
	return -1
}

func runFailover(o options, targets []string) error {
	for _, name := range targets {
		if name != "processes" {
			return fmt.Errorf("-mode failover: target %q: only processes (a server of its own to kill) is measured", name)
		}
		t, err := startTarget(name, o)
		if err != nil {
			return fmt.Errorf("target %s: %w", name, err)
		}
		err = measureFailover(o, t)
		t.stop()
		if err != nil {
			return fmt.Errorf("target %s: %w", name, err)
		}
	}
	return nil
}

func measureFailover(o options, t *target) error {
	ctx := context.Background()
	e, err := newEnv(ctx, o, t)
	if err != nil {
		return err
	}
	fmt.Printf("\n[%s] failover: %d tables, %d writers, kill -9 after %v, restart after %v more, then %v\n",
		t.name, o.tables, o.workers, max(o.warmup, 3*time.Second), o.duration, o.duration)
	created := time.Now()
	clients, err := spreadTables(ctx, e, o.tables)
	if err != nil {
		return err
	}
	fmt.Printf("%-22s %v\n", "tables created in", time.Since(created).Round(10*time.Millisecond))
	prefix := e.table + "m"
	rs, err := prefixRanges(ctx, e, prefix)
	if err != nil {
		return err
	}
	victim := largestGroupLeader(rs)
	if victim == "" {
		return fmt.Errorf("no leader reported for %s*: %s", prefix, groupsLine(rs))
	}
	led := ledBy(rs, prefix, victim)
	fmt.Printf("%-22s %s\n", "ranges", groupsLine(rs))

	start := time.Now()
	log := newSuccessLog(len(clients), start)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := 0; w < o.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (w*7919 + i*31) % len(clients)
				c, cancel := context.WithTimeout(ctx, failoverCallTimeout)
				_, err := clients[k].AddEntity(c, e.body("p", fmt.Sprintf("f%02d-%09d", w, seq.Add(1))), nil)
				cancel()
				if err != nil {
					log.failed(err)
					continue
				}
				log.ok(k, time.Now())
			}
		}()
	}
	warm := max(o.warmup, 3*time.Second)
	time.Sleep(warm)
	p := t.proc(victim)
	if p == nil {
		close(stop)
		wg.Wait()
		return fmt.Errorf("leader %q is no process of this target", victim)
	}
	killAt := time.Since(start)
	if err := p.cmd.Process.Kill(); err != nil {
		close(stop)
		wg.Wait()
		return fmt.Errorf("kill %s: %w", victim, err)
	}
	p.cmd.Wait()
	time.Sleep(o.duration)
	restartAt := time.Since(start)
	restartErr := t.restart(p)
	time.Sleep(o.duration)
	close(stop)
	wg.Wait()
	end := time.Since(start)
	after, _ := prefixRanges(ctx, e, prefix)

	log.mu.Lock()
	defer log.mu.Unlock()
	inLed := func(k int) bool { return led[spreadTableName(e, k)] }
	others := func(k int) bool { return !inLed(k) }
	const step = 100 * time.Millisecond
	series := rateSeries(log.at, step, int(end/step)+1)
	killB, restartB := int(killAt/step), int(restartAt/step)
	base := 0.0
	for _, n := range series[max(0, killB-20):killB] {
		base += float64(n)
	}
	base /= float64(min(20, killB))
	fmt.Printf("%-22s %.0f inserts/s (the 2 s before the kill)\n", "before the kill", base/step.Seconds())
	// What the same figures are with nothing happening: a table is written
	// only every tables/rate seconds, so even then its gap is not 0.
	quiet := killAt / 2
	fmt.Printf("%-22s %s\n", fmt.Sprintf("no fault (t+%.1fs)", quiet.Seconds()), outage(quiet, killAt, log.at, inLed))
	fmt.Printf("%-22s %s at t+%.1fs, leader of %d of the %d tables\n", "kill -9", victim, killAt.Seconds(), len(led), len(clients))
	fmt.Printf("%-22s %s\n", "  its tables", outage(killAt, restartAt, log.at, inLed))
	if len(led) < len(clients) {
		fmt.Printf("%-22s %s\n", "  the other tables", outage(killAt, restartAt, log.at, others))
	}
	fmt.Printf("%-22s %s\n", "  rate back", recoveryLine(series, killB, base, step))
	fmt.Printf("%-22s %s\n", "  ranges after", groupsLine(after))
	if restartErr != nil {
		fmt.Printf("%-22s %v\n", "restart", restartErr)
	} else {
		all := func(int) bool { return true }
		fmt.Printf("%-22s %s at t+%.1fs: %s\n", "restart", victim, restartAt.Seconds(), outage(restartAt, end, log.at, all))
		fmt.Printf("%-22s %s\n", "  rate", rateLine(series[restartB:], base, step))
	}
	fmt.Printf("%-22s %s\n", "errors", errorsLine(log.errors))
	fmt.Printf("%-22s %s\n", "inserts per 0.5 s", timeline(series, 5, max(0, killB-10), map[int]string{killB: "kill", restartB: "restart"}))
	return nil
}

// timeline prints series summed per `per` buckets from bucket `from`, with
// marks before the sum that holds a marked bucket.
func timeline(series []int, per, from int, marks map[int]string) string {
	var b strings.Builder
	for i := from; i < len(series); i += per {
		sum := 0
		for j := i; j < min(i+per, len(series)); j++ {
			sum += series[j]
			if m, ok := marks[j]; ok {
				fmt.Fprintf(&b, "[%s] ", m)
			}
		}
		fmt.Fprintf(&b, "%d ", sum)
	}
	return strings.TrimSpace(b.String())
}

// largestGroupLeader is the leader of the Raft group serving the most of
// rs ("" when it has none).
func largestGroupLeader(rs []rangeInfo) string {
	spans := map[uint64]int{}
	leader := map[uint64]string{}
	var best uint64
	for _, r := range rs {
		g := r.Group
		if g == 0 {
			g = r.RangeID
		}
		spans[g]++
		leader[g] = r.Leader
		if spans[g] > spans[best] || (spans[g] == spans[best] && g < best) {
			best = g
		}
	}
	return leader[best]
}

// ledBy is the tables named with prefix that have a range led by server.
func ledBy(rs []rangeInfo, prefix, server string) map[string]bool {
	out := map[string]bool{}
	for _, r := range rs {
		if r.Leader == server && strings.HasPrefix(r.Table, prefix) {
			out[r.Table] = true
		}
	}
	return out
}

func recoveryLine(series []int, from int, base float64, step time.Duration) string {
	var parts []string
	for _, frac := range []float64{0.5, 0.9} {
		if n := recovery(series, from, 10, base, frac); n >= 0 {
			parts = append(parts, fmt.Sprintf("%.0f %% of it %.1f s after the kill", frac*100, (time.Duration(n)*step).Seconds()))
		} else {
			parts = append(parts, fmt.Sprintf("never %.0f %% of it (1 s mean)", frac*100))
		}
	}
	return strings.Join(parts, ", ")
}

// rateLine is a window's mean rate and its slowest second, against base
// (successes per bucket).
func rateLine(series []int, base float64, step time.Duration) string {
	if len(series) < 10 || base <= 0 {
		return "too short to say"
	}
	total, low := 0, -1
	for i := 0; i+10 <= len(series); i++ {
		sum := 0
		for _, n := range series[i : i+10] {
			sum += n
		}
		if low < 0 || sum < low {
			low = sum
		}
	}
	for _, n := range series {
		total += n
	}
	per := step.Seconds()
	mean := float64(total) / float64(len(series)) / per
	return fmt.Sprintf("mean %.0f inserts/s (%.0f %% of before the kill), slowest second %.0f/s (%.0f %%)",
		mean, mean*per/base*100, float64(low)/10/per, float64(low)/10/base*100)
}

func errorsLine(errs map[string]int) string {
	if len(errs) == 0 {
		return "none"
	}
	kinds := make([]string, 0, len(errs))
	total := 0
	for k, n := range errs {
		kinds = append(kinds, k)
		total += n
	}
	sort.Slice(kinds, func(i, j int) bool { return errs[kinds[i]] > errs[kinds[j]] })
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", errs[k], k)
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// proc is the target's process of role ("ps1"), or nil.
func (t *target) proc(role string) *process {
	for _, p := range t.procs {
		if p.role == role {
			return p
		}
	}
	return nil
}

// restart starts p's command again on its data directory (its log file
// appended to), in p's place.
func (t *target) restart(p *process) error {
	f, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(p.cmd.Path, p.cmd.Args[1:]...)
	cmd.Env = p.cmd.Env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("restart %s: %w", p.role, err)
	}
	p.cmd = cmd
	return nil
}
