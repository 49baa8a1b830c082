// Command bench measures tablestore through the official Azure SDK
// (aztables): throughput and latency of inserts into one partition, inserts
// spread over many partitions, and point reads, with concurrent workers and
// ~1 KiB entities. `make bench` starts `tablestore dev` on a scratch data
// directory and runs it; -conn runs it against any endpoint (Azurite too).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

func main() {
	conn := flag.String("conn", "", "connection string of the endpoint to measure (default: start tablestore dev)")
	bin := flag.String("binary", "./bin/tablestore", "tablestore binary to start when -conn is empty")
	workers := flag.Int("workers", 32, "concurrent workers")
	duration := flag.Duration("duration", 10*time.Second, "length of each scenario")
	size := flag.Int("entity-size", 1024, "approximate entity size in bytes")
	partitions := flag.Int("partitions", 256, "partitions of the spread-insert scenario")
	idle := flag.Int("idle-conns", 0, "idle HTTP connections kept per host; 0 keeps the SDK default transport (10 per host, so 32 workers keep dialing)")
	only := flag.String("scenarios", "insert-one-partition,insert-many-partitions,point-read", "scenarios to run")
	flag.Parse()

	if *conn == "" {
		stop, c, err := startDev(*bin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer stop()
		*conn = c
	}
	opts := &aztables.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: -1}
	if *idle > 0 {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = *idle, *idle
		opts.Transport = &http.Client{Transport: tr}
	}
	sc, err := aztables.NewServiceClientFromConnectionString(*conn, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	table := fmt.Sprintf("bench%d", time.Now().Unix())
	if _, err := sc.CreateTable(ctx, table, nil); err != nil {
		fmt.Fprintln(os.Stderr, "bench: create table:", err)
		os.Exit(1)
	}
	tc := sc.NewClient(table)
	payload := strings.Repeat("x", max(0, *size-100))
	body := func(pk, rk string) []byte {
		b, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "Payload": payload, "N": 42, "When": "2024-01-02T03:04:05Z", "When@odata.type": "Edm.DateTime"})
		return b
	}
	fmt.Printf("tablestore bench: %d workers, %v per scenario, ~%d B entities\n", *workers, *duration, *size)
	fmt.Printf("%-24s %12s %10s %10s %8s\n", "scenario", "entities/s", "p50 ms", "p99 ms", "errors")

	var written []string // "pk/rk" of inserted entities, for reads
	var wmu sync.Mutex
	record := func(pk, rk string) {
		wmu.Lock()
		if len(written) < 200000 {
			written = append(written, pk+"\x00"+rk)
		}
		wmu.Unlock()
	}
	scenarios := map[string]func(w, i int) error{
		"insert-one-partition": func(w, i int) error {
			rk := fmt.Sprintf("w%02d-%09d", w, i)
			_, err := tc.AddEntity(ctx, body("hot", rk), nil)
			if err == nil {
				record("hot", rk)
			}
			return err
		},
		"insert-many-partitions": func(w, i int) error {
			pk := fmt.Sprintf("p%04d", (w*7919+i)%*partitions)
			rk := fmt.Sprintf("w%02d-%09d", w, i)
			_, err := tc.AddEntity(ctx, body(pk, rk), nil)
			if err == nil {
				record(pk, rk)
			}
			return err
		},
		"point-read": func(w, i int) error {
			wmu.Lock()
			k := written[(w*104729+i*31)%len(written)]
			wmu.Unlock()
			pk, rk, _ := strings.Cut(k, "\x00")
			_, err := tc.GetEntity(ctx, pk, rk, nil)
			return err
		},
	}
	for _, name := range strings.Split(*only, ",") {
		fn, ok := scenarios[name]
		if !ok {
			fmt.Fprintln(os.Stderr, "bench: unknown scenario", name)
			os.Exit(2)
		}
		if name == "point-read" && len(written) == 0 {
			for i := 0; i < 2000; i++ {
				pk, rk := fmt.Sprintf("p%04d", i%64), fmt.Sprintf("seed%06d", i)
				if _, err := tc.AddEntity(ctx, body(pk, rk), nil); err == nil {
					record(pk, rk)
				}
			}
		}
		r := run(*workers, *duration, fn)
		fmt.Printf("%-24s %12.0f %10.2f %10.2f %8d\n", name, r.rate, ms(r.p50), ms(r.p99), r.errors)
	}
	sc.DeleteTable(ctx, table, nil)
}

type result struct {
	rate     float64
	p50, p99 time.Duration
	errors   int64
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// run drives fn from workers goroutines for d and reports the rate of
// successful calls and their latency percentiles.
func run(workers int, d time.Duration, fn func(w, i int) error) result {
	var errs atomic.Int64
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				t := time.Now()
				if err := fn(w, i); err != nil {
					errs.Add(1)
					continue
				}
				lat[w] = append(lat[w], time.Since(t))
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := result{errors: errs.Load(), rate: float64(len(all)) / elapsed.Seconds()}
	if len(all) > 0 {
		r.p50 = all[len(all)/2]
		r.p99 = all[len(all)*99/100]
	}
	return r
}

// startDev runs `tablestore dev` on a scratch directory and free-ish ports
// and waits for its connection string.
func startDev(bin string) (func(), string, error) {
	dir, err := os.MkdirTemp("", "tablestore-bench-")
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:10102"
	// The per-partition throttle (Azure's 2,000 entities/s) is off: the
	// one-partition scenario measures what a partition can do, not the cap.
	cmd := exec.Command(bin, "dev", "--data-dir", filepath.Join(dir, "data"), "--frontend-addr", addr,
		"--base-port", "17000", "--metrics-addr", "127.0.0.1:17900", "--log-level", "warn", "--partition-throttle", "0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		os.RemoveAll(dir)
	}
	ready := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		var acc strings.Builder
		for {
			n, err := out.Read(buf)
			acc.Write(buf[:n])
			for _, line := range strings.Split(acc.String(), "\n") {
				if strings.HasPrefix(line, "DefaultEndpointsProtocol=") {
					ready <- strings.TrimSpace(line)
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case c := <-ready:
		return stop, c, nil
	case <-time.After(60 * time.Second):
		stop()
		return nil, "", fmt.Errorf("tablestore dev did not become ready")
	}
}
