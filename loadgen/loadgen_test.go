package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

func TestKeyGenerators(t *testing.T) {
	const draws = 100000
	count := func(t *testing.T, g KeyGen, seed uint64) map[string]int {
		t.Helper()
		pick := g.Worker(rand.New(rand.NewPCG(seed, 1)))
		m := map[string]int{}
		for range draws {
			m[pick()]++
		}
		return m
	}
	t.Run("uniform spreads evenly over N keys", func(t *testing.T) {
		g, err := NewKeyGen(ScenarioUniform, 100, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := count(t, g, 1)
		if len(m) != 100 {
			t.Fatalf("%d distinct keys, want 100", len(m))
		}
		for k, n := range m {
			// Mean 1000, standard deviation ~31.
			if n < 800 || n > 1200 {
				t.Errorf("key %s drawn %d times of %d", k, n, draws)
			}
		}
	})
	t.Run("hot-partition uses one key", func(t *testing.T) {
		g, err := NewKeyGen(ScenarioHotPartition, 100, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m := count(t, g, 1); len(m) != 1 || m[HotPartitionKey] != draws {
			t.Errorf("keys %v", m)
		}
	})
	t.Run("zipf is skewed towards the first keys", func(t *testing.T) {
		const n, s = 100, 1.1
		g, err := NewKeyGen(ScenarioZipf, n, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := count(t, g, 2)
		// P(k) = (1+k)^-s / H with H = sum over k of (1+k)^-s.
		var h float64
		for k := range n {
			h += math.Pow(float64(1+k), -s)
		}
		for _, k := range []int{0, 1, 9, 99} {
			want := math.Pow(float64(1+k), -s) / h * draws
			got := float64(m[partitionKey(k, 4)])
			if math.Abs(got-want) > 0.1*want+30 {
				t.Errorf("key rank %d drawn %v times, want about %.0f", k, got, want)
			}
		}
		if !(m["p0000"] > m["p0001"] && m["p0001"] > m["p0009"] && m["p0009"] > m["p0099"]) {
			t.Errorf("counts not decreasing with rank: %d %d %d %d", m["p0000"], m["p0001"], m["p0009"], m["p0099"])
		}
		if m["p0000"] < 10*m["p0099"] {
			t.Errorf("not skewed: hottest %d, coldest %d", m["p0000"], m["p0099"])
		}
	})
	t.Run("append is monotonic even when the clock steps back", func(t *testing.T) {
		var mu sync.Mutex
		clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		steps := []time.Duration{time.Millisecond, 0, 3 * time.Millisecond, -5 * time.Millisecond, 2 * time.Millisecond}
		i := 0
		now := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(steps[i%len(steps)])
			i++
			return clock
		}
		g, err := NewKeyGen(ScenarioAppend, 1, 0, now)
		if err != nil {
			t.Fatal(err)
		}
		// Several workers share the generator; keys each one sees never go
		// backwards and all have one width, so ordinal = numeric order.
		var wg sync.WaitGroup
		results := make([][]string, 4)
		for w := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pick := g.Worker(rand.New(rand.NewPCG(1, uint64(w))))
				for range 2000 {
					results[w] = append(results[w], pick())
				}
			}()
		}
		wg.Wait()
		distinct := map[string]bool{}
		for w, keys := range results {
			for j, k := range keys {
				distinct[k] = true
				if len(k) != appendKeyDigits {
					t.Fatalf("key %q is not %d digits", k, appendKeyDigits)
				}
				if j > 0 && k < keys[j-1] {
					t.Fatalf("worker %d: key %s after %s", w, k, keys[j-1])
				}
			}
		}
		if len(distinct) < 100 {
			t.Errorf("only %d distinct keys: the key should follow the clock", len(distinct))
		}
		first := results[0][0]
		if want := fmt.Sprintf("%015d", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()); first < want {
			t.Errorf("first key %s, want ≥ %s (time-based)", first, want)
		}
	})
	t.Run("numbered keys sort numerically", func(t *testing.T) {
		for _, n := range []int{1, 10, 10000, 123456} {
			w := keyWidth(n)
			if partitionKey(n-1, w) < partitionKey(max(0, n-2), w) || len(partitionKey(0, w)) != len(partitionKey(n-1, w)) {
				t.Errorf("n=%d: %s vs %s", n, partitionKey(0, w), partitionKey(n-1, w))
			}
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			scenario string
			n        int
			s        float64
		}{{"bogus", 10, 1.1}, {ScenarioUniform, 0, 1.1}, {ScenarioZipf, 10, 1}} {
			if _, err := NewKeyGen(tc.scenario, tc.n, tc.s, nil); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("%v: err %v", tc, err)
			}
		}
	})
}

func TestLimiterSchedule(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	tests := []struct {
		name  string
		rate  float64
		at    []time.Duration // when each reservation is made, from t0
		waits []time.Duration
	}{
		{"burst then spaced", 100, []time.Duration{0, 0, 0, 0}, []time.Duration{0, 10 * ms, 20 * ms, 30 * ms}},
		{"refills over time, up to the burst", 100, []time.Duration{0, 1000 * ms, 1000 * ms, 1000 * ms}, []time.Duration{0, 0, 10 * ms, 20 * ms}},
		{"on schedule never waits", 100, []time.Duration{0, 10 * ms, 20 * ms, 30 * ms}, []time.Duration{0, 0, 0, 0}},
		{"burst of 10 ms worth", 1000, []time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, []time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ms, 2 * ms}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLimiter(tc.rate, t0)
			for i, at := range tc.at {
				got := l.reserve(t0.Add(at))
				if d := got - tc.waits[i]; d > time.Microsecond || d < -time.Microsecond {
					t.Errorf("reservation %d at %v waits %v, want %v", i, at, got, tc.waits[i])
				}
			}
		})
	}
	t.Run("long-run rate is exact", func(t *testing.T) {
		// Callers that oversleep by 30% still get exactly the rate: the
		// deficit is carried, not lost.
		l := NewLimiter(500, t0)
		now := t0
		for range 5000 {
			d := l.reserve(now)
			now = now.Add(d + d*3/10)
		}
		if got := now.Sub(t0).Seconds(); got < 9.5 || got > 10.5 {
			t.Errorf("5000 tokens at 500/s took %.2fs, want ~10s", got)
		}
	})
	t.Run("zero rate does not limit", func(t *testing.T) {
		var l *Limiter = NewLimiter(0, t0)
		if l != nil || l.Wait(context.Background()) != nil {
			t.Fatal("rate 0 must not limit")
		}
	})
}

func TestLimiterWaitShared(t *testing.T) {
	l := NewLimiter(1000, time.Now())
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if err := l.Wait(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// 200 tokens at 1000/s with a burst of 10: ~190 ms.
	if el := time.Since(start); el < 150*time.Millisecond || el > 1500*time.Millisecond {
		t.Errorf("200 tokens at 1000/s over 4 workers took %v", el)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := NewLimiter(0.001, time.Now()).Wait(ctx); err == nil {
		t.Error("Wait on an ended context succeeded")
	}
}

func responseError(status int, code string, hdr map[string]string) error {
	resp := &http.Response{StatusCode: status, Header: http.Header{}}
	for k, v := range hdr {
		resp.Header.Set(k, v)
	}
	return &azcore.ResponseError{StatusCode: status, ErrorCode: code, RawResponse: resp}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err    error
		key    string
		status int
	}{
		{responseError(503, "ServerBusy", nil), "503 ServerBusy", 503},
		{fmt.Errorf("wrapped: %w", responseError(409, "EntityAlreadyExists", nil)), "409 EntityAlreadyExists", 409},
		{responseError(500, "", nil), "500", 500},
		{context.DeadlineExceeded, "timeout", 0},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, "connection", 0},
		{errors.New("strange"), "other", 0},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			if key, status := classify(tc.err); key != tc.key || status != tc.status {
				t.Errorf("classify = %q %d, want %q %d", key, status, tc.key, tc.status)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want time.Duration
	}{
		{"retry-after ms", responseError(503, "ServerBusy", map[string]string{"x-ms-retry-after-ms": "200", "Retry-After": "1"}), 200 * time.Millisecond},
		{"retry-after seconds, capped", responseError(503, "ServerBusy", map[string]string{"Retry-After": "5"}), time.Second},
		{"no hint", responseError(500, "InternalError", nil), 50 * time.Millisecond},
		{"no answer", errors.New("refused"), 50 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := backoffFor(tc.err); got != tc.want {
				t.Errorf("backoff %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for us := 1; us <= 10000; us++ {
		h.add(time.Duration(us) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := q * 10000
		got := float64(h.quantile(q).Microseconds())
		if math.Abs(got-want)/want > 0.035 {
			t.Errorf("q%.2f = %vµs, want ~%vµs", q, got, want)
		}
	}
	if h.quantile(1) != 10*time.Millisecond || h.max != 10*time.Millisecond {
		t.Errorf("max %v, q1 %v", h.max, h.quantile(1))
	}
	for us := uint64(0); us < 1<<20; us = us*3/2 + 1 {
		low, w := histBounds(histBucket(us))
		if us < low || us >= low+w {
			t.Fatalf("%dµs in bucket [%d, %d)", us, low, low+w)
		}
	}
}

func TestCollectorIntervals(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewCollector(t0)
	// First second: 90 writes of 1..90 ms, 10 reads of 5 ms, 3 throttled,
	// one conflict.
	for i := 1; i <= 90; i++ {
		c.Record(false, time.Duration(i)*time.Millisecond, nil)
	}
	for range 10 {
		c.Record(true, 5*time.Millisecond, nil)
	}
	for range 3 {
		c.Record(false, time.Millisecond, responseError(503, "ServerBusy", nil))
	}
	c.Record(false, time.Millisecond, responseError(409, "EntityAlreadyExists", nil))
	if !c.Pending() {
		t.Fatal("nothing pending")
	}
	iv := c.Interval(t0.Add(time.Second))
	want := Figures{EntitiesPerSec: 100, WritesPerSec: 90, ReadsPerSec: 10, OK: 100, Writes: 90, Reads: 10, Errors: 4, Throttled: 3,
		ErrorsByCode: map[string]int64{"503 ServerBusy": 3, "409 EntityAlreadyExists": 1}}
	got := iv.Figures
	got.P50Ms, got.P99Ms = 0, 0
	if fmt.Sprint(got) != fmt.Sprint(want) || iv.ElapsedSeconds != 1 || iv.IntervalSeconds != 1 || iv.Type != "interval" {
		t.Errorf("interval %+v\nwant %+v", iv, want)
	}
	// 100 samples, 1..90 ms and ten more of 5 ms: the 50th is 40 ms, the
	// 99th 89 ms (within the histogram's 3 %).
	if math.Abs(iv.P50Ms-40) > 1.5 || math.Abs(iv.P99Ms-89) > 3 {
		t.Errorf("p50 %v p99 %v", iv.P50Ms, iv.P99Ms)
	}
	if c.Pending() {
		t.Error("pending after Interval")
	}
	// Second period, half a second long: 50 writes → 100/s.
	for range 50 {
		c.Record(false, 2*time.Millisecond, nil)
	}
	iv = c.Interval(t0.Add(1500 * time.Millisecond))
	if iv.OK != 50 || iv.EntitiesPerSec != 100 || iv.Errors != 0 || len(iv.ErrorsByCode) != 0 || iv.ElapsedSeconds != 1.5 || iv.IntervalSeconds != 0.5 {
		t.Errorf("second interval %+v", iv)
	}
	s := c.Summary(t0.Add(2 * time.Second))
	if s.OK != 150 || s.Writes != 140 || s.Errors != 4 || s.Throttled != 3 || s.EntitiesPerSec != 75 || s.DurationSeconds != 2 || s.MaxMs != 90 {
		t.Errorf("summary %+v", s)
	}
	// An empty period has no latency and no rate, and says so.
	iv = c.Interval(t0.Add(3 * time.Second))
	if iv.OK != 0 || iv.P50Ms != 0 || !strings.Contains(iv.text(), " - ") {
		t.Errorf("empty interval %+v %q", iv, iv.text())
	}
}

func TestReportFormats(t *testing.T) {
	iv := Interval{Type: "interval", ElapsedSeconds: 3, IntervalSeconds: 1, Figures: Figures{
		EntitiesPerSec: 1234.5, WritesPerSec: 1000, ReadsPerSec: 234.5, OK: 1234, Errors: 13, Throttled: 10,
		P50Ms: 1.234, P99Ms: 12.5, ErrorsByCode: map[string]int64{"503 ServerBusy": 10, "timeout": 3}}}
	wantText := "     3.0s      1234.5     1000.0      234.5      1.23     12.50  13 (503 ServerBusy=10, timeout=3)\n"
	if got := iv.text(); got != wantText {
		t.Errorf("text %q\nwant %q", got, wantText)
	}
	if h := headerText(); !strings.HasPrefix(h, "  elapsed  entities/s") {
		t.Errorf("header %q", h)
	}
	tests := []struct {
		name string
		v    any
		keys string
	}{
		{"interval", iv, "elapsed_seconds,entities_per_sec,errors,errors_by_code,interval_seconds,ok,p50_ms,p99_ms,reads,reads_per_sec,throttled,type,writes,writes_per_sec"},
		{"summary", Summary{Type: "summary"}, "duration_seconds,entities_per_sec,errors,errors_by_code,interrupted,max_ms,ok,p50_ms,p90_ms,p99_ms,rate_target,reads,reads_per_sec,scenario,table,throttled,type,workers,writes,writes_per_sec"},
		{"start", Start{Type: "start"}, "duration_seconds,endpoint,entity_size,partitions,rate_target,read_ratio,scenario,seed,table,type,workers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(slices.Sorted(maps.Keys(m)), ","); got != tc.keys {
				t.Errorf("fields %s\nwant   %s", got, tc.keys)
			}
		})
	}
}

func TestEntityBody(t *testing.T) {
	for _, size := range []int{0, 200, 1024, 40000, MaxEntitySize} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			g := &generator{cfg: Config{Scenario: ScenarioUniform}, payload: payloadProps(size)}
			b := g.body(entityKey{"p0001", "abc-0001-0000000001"}, 1, 1)
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			if m["PartitionKey"] != "p0001" || m["RowKey"] != "abc-0001-0000000001" {
				t.Errorf("keys %v %v", m["PartitionKey"], m["RowKey"])
			}
			for k, v := range m {
				if s, ok := v.(string); ok && len(s) > payloadChunk {
					t.Errorf("property %s has %d chars", k, len(s))
				}
			}
			if size >= 1024 && math.Abs(float64(len(b)-size)) > 0.05*float64(size) {
				t.Errorf("body %d bytes for --entity-size %d", len(b), size)
			}
		})
	}
}

func TestConfigAndArguments(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want error // nil: help, no error
	}{
		{"unknown scenario", []string{"--scenario", "bogus"}, ErrInvalidConfig},
		{"bad table", []string{"--table", "a-b"}, ErrInvalidConfig},
		{"no partitions", []string{"--partitions", "0"}, ErrInvalidConfig},
		{"negative rate", []string{"--rate", "-1"}, ErrInvalidConfig},
		{"no workers", []string{"--workers", "0"}, ErrInvalidConfig},
		{"no duration", []string{"--duration", "0s"}, ErrInvalidConfig},
		{"read ratio above 1", []string{"--read-ratio", "1.5"}, ErrInvalidConfig},
		{"entity too big", []string{"--entity-size", "999999999"}, ErrInvalidConfig},
		{"zipf exponent", []string{"--scenario", "zipf", "--zipf-s", "1"}, ErrInvalidConfig},
		{"empty conn", []string{"--conn", ""}, ErrInvalidConfig},
		{"bad conn", []string{"--conn", "nonsense"}, ErrInvalidConfig},
		{"unknown flag", []string{"--bogus"}, ErrInvalidConfig},
		{"stray argument", []string{"extra"}, ErrInvalidConfig},
		{"help", []string{"-h"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := Run(tc.args, &out, &errb)
			if tc.want == nil {
				if err != nil || !strings.Contains(errb.String(), "-scenario") {
					t.Fatalf("err %v, usage %q", err, errb.String())
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("output before the config was valid: %q", out.String())
			}
		})
	}
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

func TestEndpointOf(t *testing.T) {
	tests := map[string]string{
		DevConnectionString: "http://127.0.0.1:10002/devstoreaccount1",
		"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net": "https://acct.table.core.windows.net",
		"junk": "",
	}
	for conn, want := range tests {
		if got := endpointOf(conn); got != want {
			t.Errorf("endpointOf(%q) = %q, want %q", conn, got, want)
		}
	}
}

func TestGuideScenarioKeys(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	clock := func() time.Time { return now }
	t.Run("append-hashed spreads one moment over buckets", func(t *testing.T) {
		g, err := NewKeyGen(ScenarioAppendHashed, 16, 0, clock)
		if err != nil {
			t.Fatal(err)
		}
		pick := g.Worker(rand.New(rand.NewPCG(1, 2)))
		seen := map[string]bool{}
		for range 200 {
			k := pick()
			b, ts, ok := strings.Cut(k, "-")
			if !ok || len(b) != 5 || ts != "000000001000000" {
				t.Fatalf("key %q", k)
			}
			seen[b] = true
		}
		if len(seen) != 16 {
			t.Errorf("%d buckets used, want 16", len(seen))
		}
	})
	t.Run("moving-hot moves its window", func(t *testing.T) {
		g, err := NewKeyGen(ScenarioMovingHot, 800, 0, clock)
		if err != nil {
			t.Fatal(err)
		}
		pick := g.Worker(rand.New(rand.NewPCG(3, 4)))
		share := func(lo, hi string) float64 {
			in := 0
			for range 1000 {
				if k := pick(); k >= lo && k < hi {
					in++
				}
			}
			return float64(in) / 1000
		}
		if s := share("p0000", "p0100"); s < 0.85 {
			t.Errorf("first window has %.2f of the load", s)
		}
		now = now.Add(hotPeriod)
		if s := share("p0100", "p0200"); s < 0.85 {
			t.Errorf("second window has %.2f of the load", s)
		}
	})
}
