package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// runTables is the many-tables benchmark (issue 9's targets): create
// -tables tables through the SDK, write one entity into each (CreateTable
// and first-write latencies, what each process spent), then measure what
// the idle tables cost (CPU, RSS, file descriptors per process) once
// -quiet-after has passed since the last request, how fast a first request
// to an idle table is served, listing every table with continuation
// (checked complete and in order), and with -read-all reading the entity
// of every table.
func runTables(o options, targets []string) error {
	for _, name := range targets {
		t, err := startTarget(name, o)
		if errors.Is(err, errSkip) {
			fmt.Printf("\n[%s] skipped: azurite-table is not on the PATH\n", name)
			continue
		}
		if err != nil {
			return fmt.Errorf("target %s: %w", name, err)
		}
		if t.setup != "" {
			fmt.Printf("\n[%s] %s\n", t.name, t.setup)
		}
		err = measureTables(o, t)
		fmt.Printf("%-34s %v\n", "shutdown (SIGTERM to exit)", t.stop().Round(10*time.Millisecond))
		if err != nil {
			return fmt.Errorf("target %s: %w", name, err)
		}
	}
	return nil
}

func measureTables(o options, t *target) error {
	sc, err := newService(o, t.conn)
	if err != nil {
		return err
	}
	ctx := context.Background()
	fmt.Printf("\n[%s] %d tables, one entity each\n", t.name, o.tables)
	prefix := fmt.Sprintf("t%d", time.Now().Unix()%1e5)
	name := func(i int) string { return fmt.Sprintf("%sn%05d", prefix, i) }

	var failed atomic.Int64
	var firstErr atomic.Value
	var next atomic.Int64
	createLat := make([]time.Duration, o.tables)
	written := make([]bool, o.tables) // created and written: readable
	writeLat := make([]time.Duration, o.tables)
	cpu0 := t.cpu()
	start := time.Now()
	createProfile := t.profileDev(o, "create.pprof", 10*time.Second)
	var wg sync.WaitGroup
	workers := min(o.workers, 16)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= o.tables {
					return
				}
				c, cancel := context.WithTimeout(ctx, 30*time.Second)
				t0 := time.Now()
				_, err := sc.CreateTable(c, name(i), nil)
				createLat[i] = time.Since(t0)
				if err == nil {
					t0 = time.Now()
					_, err = sc.NewClient(name(i)).AddEntity(c, []byte(`{"PartitionKey":"p","RowKey":"r","N":1}`), nil)
					writeLat[i] = time.Since(t0)
				}
				cancel()
				written[i] = err == nil
				if err != nil && failed.Add(1) == 1 {
					firstErr.Store(err.Error())
				}
			}
		}()
	}
	wg.Wait()
	created := time.Since(start)
	fmt.Printf("%-34s %v (%.1f tables/s), %d failed\n", "create + write once", created.Round(10*time.Millisecond),
		float64(o.tables)/created.Seconds(), failed.Load())
	if s, ok := firstErr.Load().(string); ok {
		fmt.Printf("    first error: %.300s\n", s)
	}
	fmt.Printf("%-34s %s\n", "CreateTable latency", percentiles(createLat))
	fmt.Printf("%-34s %s\n", "first write latency", percentiles(writeLat))
	cpu1 := t.cpu()
	for _, p := range t.procs {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
		fmt.Printf("%-34s %5.1f%% of a core, RSS %4d MiB, %d fds\n", "creating: "+p.role,
			(cpu1[p.role]-cpu0[p.role])/created.Seconds()*100, rssBytes(p.cmd.Process.Pid)>>20, len(fds))
	}
	createProfile() // after cpu1: a creation shorter than the profile waits here

	// Idle cost, measured over 10 s once quiet-after has passed.
	time.Sleep(o.quietAfter)
	before := t.cpu()
	idleProfile := t.profileDev(o, "idle.pprof", 10*time.Second)
	time.Sleep(10 * time.Second)
	after := t.cpu()
	idleProfile()
	var roles []string
	for _, p := range t.procs {
		roles = append(roles, p.role)
	}
	sort.Strings(roles)
	for _, p := range t.procs {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
		fmt.Printf("%-34s %5.1f%% of a core, RSS %4d MiB, %d fds\n", "idle "+p.role,
			(after[p.role]-before[p.role])/10*100, rssBytes(p.cmd.Process.Pid)>>20, len(fds))
	}

	// First request to an idle table: one read each of a random sample, one
	// at a time so each finds its range quiet.
	var readable []int
	for i, ok := range written {
		if ok {
			readable = append(readable, i)
		}
	}
	rand.Shuffle(len(readable), func(i, j int) { readable[i], readable[j] = readable[j], readable[i] })
	sample := readable[:min(len(readable), 200)]
	var lat []time.Duration
	var readFailed int
	readsProfile := t.profileDev(o, "reads.pprof", 5*time.Second)
	for _, i := range sample {
		t0 := time.Now()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := sc.NewClient(name(i)).GetEntity(c, "p", "r", nil)
		cancel()
		if err != nil {
			readFailed++
			continue
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(5 * time.Millisecond)
	}
	readsProfile()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		fmt.Printf("%-34s p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d reads, %d failed)\n", "first read of an idle table",
			ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(lat[len(lat)-1]), len(lat), readFailed)
	}

	// First write to an idle table: a write always wakes a quiet range
	// (it needs a leader that can commit), so this is the wake's cost: the
	// open, the election, the commit. Tables not read above, one at a time.
	wsample := readable[len(sample):min(len(readable), 2*len(sample))]
	entity := []byte(`{"PartitionKey":"p","RowKey":"r","N":2}`)
	lat = lat[:0]
	var writeFailed int
	for _, i := range wsample {
		t0 := time.Now()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := sc.NewClient(name(i)).UpsertEntity(c, entity, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		cancel()
		if err != nil {
			writeFailed++
			continue
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(5 * time.Millisecond)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		fmt.Printf("%-34s p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d writes, %d failed)\n", "first write to an idle table",
			ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(lat[len(lat)-1]), len(lat), writeFailed)
	}

	t.printWakeMetrics()

	// Listing every table with continuation: complete, in order, once.
	t0 := time.Now()
	pager := sc.NewListTablesPager(&aztables.ListTablesOptions{})
	var pages, listed, mine, maxPage int
	last := ""
	var slowest time.Duration
	for pager.More() {
		p0 := time.Now()
		page, err := pager.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list tables: %w", err)
		}
		slowest = max(slowest, time.Since(p0))
		pages++
		maxPage = max(maxPage, len(page.Tables))
		for _, tp := range page.Tables {
			n := *tp.Name
			if n <= last {
				return fmt.Errorf("list tables: %q after %q: not in order or listed twice", n, last)
			}
			last = n
			if strings.HasPrefix(n, prefix+"n") {
				mine++
			}
		}
		listed += len(page.Tables)
	}
	fmt.Printf("%-34s %d tables (%d of this run) in %d pages of at most %d, %v (slowest page %v)\n", "list tables", listed, mine, pages, maxPage,
		time.Since(t0).Round(time.Millisecond), slowest.Round(100*time.Microsecond))
	if want := o.tables - int(failed.Load()); mine < want {
		return fmt.Errorf("list tables: %d of this run's tables listed, %d were created", mine, want)
	}
	if o.readAll {
		readAll(o, sc, name, written)
	}
	return nil
}

// readAll reads the one entity of every table that was written, in
// parallel.
func readAll(o options, sc *aztables.ServiceClient, name func(int) string, written []bool) {
	var next atomic.Int64
	var failed atomic.Int64
	lat := make([]time.Duration, o.tables)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < min(o.workers, 16); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= o.tables {
					return
				}
				if !written[i] {
					continue
				}
				c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t0 := time.Now()
				_, err := sc.NewClient(name(i)).GetEntity(c, "p", "r", nil)
				lat[i] = time.Since(t0)
				cancel()
				if err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	for _, ok := range written {
		if ok {
			n++
		}
	}
	fmt.Printf("%-34s %d in %v, %d failed; %s\n", "read one entity of every table", n,
		time.Since(start).Round(10*time.Millisecond), failed.Load(), percentiles(lat))
}

// percentiles formats p50/p99/max of latencies (zeros, from failed calls
// that never started, are left out).
func percentiles(lat []time.Duration) string {
	var l []time.Duration
	for _, d := range lat {
		if d > 0 {
			l = append(l, d)
		}
	}
	if len(l) == 0 {
		return "no samples"
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return fmt.Sprintf("p50 %.1f ms, p99 %.1f ms, max %.1f ms", ms(percentile(l, 50)), ms(percentile(l, 99)), ms(l[len(l)-1]))
}

// profileDev starts fetching a CPU profile of d from the (dev) target's
// /debug/pprof into -profile-dir/name; the returned func waits for it.
// A no-op unless -profile-dir is set and the target serves pprof.
func (t *target) profileDev(o options, name string, d time.Duration) (wait func()) {
	if o.profileDir == "" || t.pprof == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", t.pprof, int(d.Seconds()))
		resp, err := http.Get(url)
		if err != nil {
			fmt.Printf("    profile %s: %v\n", name, err)
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(filepath.Join(o.profileDir, name), data, 0o644)
		}
		if err != nil {
			fmt.Printf("    profile %s: %v\n", name, err)
		}
	}()
	return func() { <-done }
}

// printWakeMetrics prints, per partition-server process, what its wakes
// cost server-side (tablestore_partitionserver_wake_seconds: from the
// request to an open member with a known leader) and how often its quiet
// replicas voted and stored entries without opening.
func (t *target) printWakeMetrics() {
	for _, p := range t.procs {
		if p.metrics == "" {
			continue
		}
		resp, err := http.Get("http://" + p.metrics + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		val := map[string]float64{}
		for _, line := range strings.Split(string(body), "\n") {
			name, v, ok := strings.Cut(line, " ")
			if !ok || strings.HasPrefix(name, "#") {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				val[name] = f
			}
		}
		n := val["tablestore_partitionserver_wake_seconds_count"]
		mean := 0.0
		if n > 0 {
			mean = val["tablestore_partitionserver_wake_seconds_sum"] / n * 1000
		}
		fmt.Printf("%-34s %d wakes, mean %.2f ms to a leader; closed votes %d, entries stored closed %d\n", "wakes on "+p.role,
			int(n), mean, int(val["tablestore_partitionserver_quiet_votes_total"]), int(val["tablestore_partitionserver_quiet_stored_entries_total"]))
	}
}
