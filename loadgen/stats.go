package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

// histogram counts latencies in microseconds in log-linear buckets: exact
// below 32 µs, then 32 buckets per power of two (≤ 3.2 % relative error).
// Fixed size whatever the run length, unlike keeping every sample.
type histogram struct {
	counts [(64 - histSubBits + 1) * histSub]uint64
	n      uint64
	max    time.Duration
}

const (
	histSubBits = 5
	histSub     = 1 << histSubBits
)

func histBucket(us uint64) int {
	if us < histSub {
		return int(us)
	}
	exp := bits.Len64(us) - 1 - histSubBits
	return (exp+1)*histSub + int(us>>exp) - histSub
}

// histBounds returns bucket b's lowest value and width in microseconds.
func histBounds(b int) (low, width uint64) {
	if b < histSub {
		return uint64(b), 1
	}
	exp := b/histSub - 1
	return uint64(b%histSub+histSub) << exp, 1 << exp
}

func (h *histogram) add(d time.Duration) {
	us := uint64(max(0, d.Microseconds()))
	h.counts[histBucket(us)]++
	h.n++
	h.max = max(h.max, d)
}

// quantile returns the q-quantile (0 < q ≤ 1) as the middle of its bucket,
// or 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			low, w := histBounds(b)
			d := time.Duration(low)*time.Microsecond + time.Duration(w)*time.Microsecond/2
			return min(d, h.max)
		}
	}
	return h.max
}

func (h *histogram) reset() { *h = histogram{} }

// window is what happened during one period.
type window struct {
	start     time.Time
	writes    int64 // successful inserts
	reads     int64 // successful point reads
	errors    int64
	throttled int64 // 503 answers
	byCode    map[string]int64
	hist      histogram // latency of successful requests
}

func (w *window) reset(start time.Time) {
	w.start, w.writes, w.reads, w.errors, w.throttled = start, 0, 0, 0, 0
	w.byCode = map[string]int64{}
	w.hist.reset()
}

func (w *window) record(read bool, lat time.Duration, err error) {
	if err != nil {
		key, status := classify(err)
		w.errors++
		w.byCode[key]++
		if status == 503 {
			w.throttled++
		}
		return
	}
	if read {
		w.reads++
	} else {
		w.writes++
	}
	w.hist.add(lat)
}

// Collector aggregates request outcomes into per-interval and whole-run
// figures. Workers call Record concurrently; the reporter calls Interval
// once per period and Summary at the end.
type Collector struct {
	mu    sync.Mutex
	begin time.Time
	cur   window
	total window
}

// NewCollector starts collecting at start.
func NewCollector(start time.Time) *Collector {
	c := &Collector{begin: start}
	c.cur.reset(start)
	c.total.reset(start)
	return c
}

// Record counts one request: a point read if read, else an insert, that
// took lat and failed with err (nil: succeeded).
func (c *Collector) Record(read bool, lat time.Duration, err error) {
	c.mu.Lock()
	c.cur.record(read, lat, err)
	c.total.record(read, lat, err)
	c.mu.Unlock()
}

// Pending reports whether requests were recorded since the last Interval.
func (c *Collector) Pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur.writes+c.cur.reads+c.cur.errors > 0
}

// Interval closes the current period at now and returns its figures.
func (c *Collector) Interval(now time.Time) Interval {
	c.mu.Lock()
	defer c.mu.Unlock()
	iv := Interval{Type: "interval", ElapsedSeconds: now.Sub(c.begin).Seconds()}
	iv.Figures = figuresOf(&c.cur, now.Sub(c.cur.start))
	iv.IntervalSeconds = now.Sub(c.cur.start).Seconds()
	c.cur.reset(now)
	return iv
}

// Summary returns the whole run's figures up to end.
func (c *Collector) Summary(end time.Time) Summary {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Summary{Type: "summary", DurationSeconds: end.Sub(c.begin).Seconds()}
	s.Figures = figuresOf(&c.total, end.Sub(c.begin))
	s.P90Ms = ms(c.total.hist.quantile(0.90))
	s.MaxMs = ms(c.total.hist.max)
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func figuresOf(w *window, d time.Duration) Figures {
	f := Figures{
		OK: w.writes + w.reads, Writes: w.writes, Reads: w.reads,
		Errors: w.errors, Throttled: w.throttled, ErrorsByCode: maps.Clone(w.byCode),
		P50Ms: ms(w.hist.quantile(0.50)), P99Ms: ms(w.hist.quantile(0.99)),
	}
	if secs := d.Seconds(); secs > 0 {
		f.EntitiesPerSec = float64(f.OK) / secs
		f.WritesPerSec = float64(w.writes) / secs
		f.ReadsPerSec = float64(w.reads) / secs
	}
	return f
}

// Figures are the fields intervals and the summary share. Latencies are
// those of successful requests; 0 when there were none.
type Figures struct {
	EntitiesPerSec float64          `json:"entities_per_sec"`
	WritesPerSec   float64          `json:"writes_per_sec"`
	ReadsPerSec    float64          `json:"reads_per_sec"`
	OK             int64            `json:"ok"`
	Writes         int64            `json:"writes"`
	Reads          int64            `json:"reads"`
	Errors         int64            `json:"errors"`
	Throttled      int64            `json:"throttled"`
	P50Ms          float64          `json:"p50_ms"`
	P99Ms          float64          `json:"p99_ms"`
	ErrorsByCode   map[string]int64 `json:"errors_by_code"`
}

// Interval is one progress line.
type Interval struct {
	Type            string  `json:"type"` // "interval"
	ElapsedSeconds  float64 `json:"elapsed_seconds"`
	IntervalSeconds float64 `json:"interval_seconds"`
	Figures
}

// Summary closes a run.
type Summary struct {
	Type string `json:"type"` // "summary"
	// Scenario and the settings that shaped the run.
	Scenario        string  `json:"scenario"`
	Table           string  `json:"table"`
	Workers         int     `json:"workers"`
	RateTarget      float64 `json:"rate_target"`
	DurationSeconds float64 `json:"duration_seconds"`
	// Interrupted is set when Ctrl-C (or the caller) ended the run early.
	Interrupted bool `json:"interrupted"`
	Figures
	P90Ms float64 `json:"p90_ms"`
	MaxMs float64 `json:"max_ms"`
}

// Start is the first line of a run: what it is about to do.
type Start struct {
	Type            string  `json:"type"` // "start"
	Endpoint        string  `json:"endpoint"`
	Table           string  `json:"table"`
	Scenario        string  `json:"scenario"`
	Partitions      int     `json:"partitions"`
	Workers         int     `json:"workers"`
	RateTarget      float64 `json:"rate_target"`
	DurationSeconds float64 `json:"duration_seconds"`
	EntitySize      int     `json:"entity_size"`
	ReadRatio       float64 `json:"read_ratio"`
	Seed            uint64  `json:"seed"`
}

// classify names an error the way the report counts it — "503 ServerBusy"
// (HTTP status and Azure error code), "timeout" (the request's time limit),
// "connection" (no HTTP answer), "other" — and gives the HTTP status (0
// without one).
func classify(err error) (string, int) {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		if re.ErrorCode != "" {
			return strconv.Itoa(re.StatusCode) + " " + re.ErrorCode, re.StatusCode
		}
		return strconv.Itoa(re.StatusCode), re.StatusCode
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout", 0
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return "timeout", 0
		}
		return "connection", 0
	}
	return "other", 0
}

// errorsText prints errors as "12 (503 ServerBusy=10, 409 EntityAlreadyExists=2)",
// most frequent first.
func errorsText(n int64, by map[string]int64) string {
	if n == 0 {
		return "0"
	}
	keys := slices.Collect(maps.Keys(by))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(by[b], by[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, by[k])
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
}

const lineFormat = "%9s %11s %10s %10s %9s %9s  %s\n"

func headerText() string {
	return fmt.Sprintf(lineFormat, "elapsed", "entities/s", "writes/s", "reads/s", "p50 ms", "p99 ms", "errors")
}

func latencyText(ok int64, v float64) string {
	if ok == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func (iv Interval) text() string {
	return fmt.Sprintf(lineFormat, strconv.FormatFloat(iv.ElapsedSeconds, 'f', 1, 64)+"s",
		strconv.FormatFloat(iv.EntitiesPerSec, 'f', 1, 64), strconv.FormatFloat(iv.WritesPerSec, 'f', 1, 64),
		strconv.FormatFloat(iv.ReadsPerSec, 'f', 1, 64), latencyText(iv.OK, iv.P50Ms), latencyText(iv.OK, iv.P99Ms),
		errorsText(iv.Errors, iv.ErrorsByCode))
}

func (s Summary) text() string {
	var b strings.Builder
	how := "completed"
	if s.Interrupted {
		how = "interrupted"
	}
	rateTarget := "unlimited"
	if s.RateTarget > 0 {
		rateTarget = strconv.FormatFloat(s.RateTarget, 'f', -1, 64) + "/s"
	}
	fmt.Fprintf(&b, "summary: %s %s on table %s, %d workers, rate %s, %.1fs\n",
		s.Scenario, how, s.Table, s.Workers, rateTarget, s.DurationSeconds)
	fmt.Fprintf(&b, "  entities: %d ok (%.1f/s): %d writes (%.1f/s), %d reads (%.1f/s)\n",
		s.OK, s.EntitiesPerSec, s.Writes, s.WritesPerSec, s.Reads, s.ReadsPerSec)
	fmt.Fprintf(&b, "  latency ms: p50 %s, p90 %s, p99 %s, max %s\n",
		latencyText(s.OK, s.P50Ms), latencyText(s.OK, s.P90Ms), latencyText(s.OK, s.P99Ms), latencyText(s.OK, s.MaxMs))
	fmt.Fprintf(&b, "  errors: %s; throttled (503): %d\n", errorsText(s.Errors, s.ErrorsByCode), s.Throttled)
	return b.String()
}
