package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/internal/cmdline"
)

// Sentinel errors; wrapped with details.
var (
	// ErrInvalidConfig means a flag or setting is wrong.
	ErrInvalidConfig = errors.New("loadgen: invalid config")
	// ErrCreateTable means the table could not be created (nor found).
	ErrCreateTable = errors.New("loadgen: create table")
)

// loadgenGCPercent is loadgen's GOGC unless the environment sets one.
const loadgenGCPercent = 400

// newFlagSet is loadgen's command line bound to cfg.
func newFlagSet(cfg *Config, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.RegisterFlags(fs)
	return fs
}

// FlagSet returns the flags `tablestore loadgen` accepts, with their
// defaults (for checks of the docs).
func FlagSet() *flag.FlagSet {
	cfg := DefaultConfig()
	return newFlagSet(&cfg, io.Discard)
}

// Run runs `tablestore loadgen` with args (the words after "loadgen"):
// progress on stdout, usage on stderr. It stops after --duration or on
// Ctrl-C (SIGINT) / SIGTERM, printing the summary either way.
func Run(args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	fs := newFlagSet(&cfg, stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: tablestore loadgen [flags]\n\nDrives a table through the Azure SDK with a key pattern of the table design guide and reports entities/s, latency and errors each second.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := cmdline.Parse(fs, args, stderr, "tablestore loadgen -h lists the flags"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, cmdline.Usagef("unexpected arguments %q", fs.Args()))
	}
	if os.Getenv("GOGC") == "" {
		// The SDK turns every response into maps and back, so the heap
		// churns fast while the live heap stays a few MB: at the default
		// GOGC the collector took 8 % of loadgen's CPU, taken from the
		// server it measures when both share a host.
		defer debug.SetGCPercent(debug.SetGCPercent(loadgenGCPercent))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err := Generate(ctx, cfg, stdout)
	return err
}

// Generate runs the load cfg describes until cfg.Duration passes or ctx
// ends (then the summary says interrupted), writing progress lines and the
// summary to out, and returns the summary.
func Generate(ctx context.Context, cfg Config, out io.Writer) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	keys, err := NewKeyGen(cfg.Scenario, cfg.Partitions, cfg.ZipfS, nil)
	if err != nil {
		return Summary{}, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	idle := cfg.IdleConns
	if idle == 0 {
		idle = cfg.Workers
	}
	transport.MaxIdleConns, transport.MaxIdleConnsPerHost = idle, idle
	defer transport.CloseIdleConnections()
	opts := &aztables.ClientOptions{}
	// No SDK retries: a 503 or a timeout must reach the report, not be
	// hidden behind a retry that succeeds later.
	opts.Retry = policy.RetryOptions{MaxRetries: -1}
	opts.Transport = &http.Client{Transport: transport}
	sc, err := aztables.NewServiceClientFromConnectionString(cfg.Conn, opts)
	if err != nil {
		return Summary{}, fmt.Errorf("%w: --conn: %v", ErrInvalidConfig, err)
	}
	if err := ensureTable(ctx, sc, cfg.Table, cfg.RequestTimeout); err != nil {
		return Summary{}, err
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}

	p := newPrinter(out, cfg.JSON)
	st := Start{
		Type: "start", Endpoint: endpointOf(cfg.Conn), Table: cfg.Table, Scenario: cfg.Scenario,
		Partitions: cfg.Partitions, Workers: cfg.Workers, RateTarget: cfg.Rate,
		DurationSeconds: cfg.Duration.Seconds(), EntitySize: cfg.EntitySize, ReadRatio: cfg.ReadRatio, Seed: seed,
	}
	if err := p.start(st); err != nil {
		return Summary{}, err
	}

	begin := time.Now()
	g := &generator{
		cfg: cfg, tc: sc.NewClient(cfg.Table), keys: keys, seed: seed,
		lim: NewLimiter(cfg.Rate, begin), col: NewCollector(begin),
		// Row keys start with the run's id so reruns on the same table
		// never collide with earlier entities.
		runID:   strconv.FormatInt(begin.UnixNano(), 36),
		payload: payloadProps(cfg.EntitySize),
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	rep := newReporter(cfg, st, begin)
	defer rep.close()
	rep.watch(runCtx)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.worker(runCtx, w)
		}()
	}
	ticker := time.NewTicker(cfg.ReportInterval)
	var printErr error
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case now := <-ticker.C:
			iv := g.col.Interval(now)
			rep.interval(iv)
			if err := p.interval(iv); err != nil && printErr == nil {
				printErr = err
			}
		}
	}
	ticker.Stop()
	end := time.Now()
	wg.Wait()
	// The last, partial period, unless it is too short to mean anything.
	if g.col.Pending() && end.Sub(begin) > 0 {
		if iv := g.col.Interval(end); iv.IntervalSeconds >= 0.1 {
			rep.interval(iv)
			if err := p.interval(iv); err != nil && printErr == nil {
				printErr = err
			}
		}
	}
	s := g.col.Summary(end)
	s.Scenario, s.Table, s.Workers, s.RateTarget = cfg.Scenario, cfg.Table, cfg.Workers, cfg.Rate
	s.Interrupted = ctx.Err() != nil
	if err := p.summary(s); err != nil && printErr == nil {
		printErr = err
	}
	if err := rep.finish(ctx, s); err != nil && printErr == nil {
		printErr = err
	}
	return s, printErr
}

// ensureTable creates the table, accepting one that exists. A cluster just
// started may answer 503 or refuse connections for a moment, so those are
// retried for up to 10 s (no longer: a mistyped endpoint should fail soon).
func ensureTable(ctx context.Context, sc *aztables.ServiceClient, table string, timeout time.Duration) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := sc.CreateTable(cctx, table, nil)
		cancel()
		var re *azcore.ResponseError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &re) && re.ErrorCode == string(aztables.TableAlreadyExists):
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("%w %s: %v", ErrCreateTable, table, ctx.Err())
		case (re == nil || re.StatusCode >= 500) && time.Now().Before(deadline):
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		default:
			key, _ := classify(err)
			return fmt.Errorf("%w %s: %s: %v", ErrCreateTable, table, key, firstLine(err))
		}
	}
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(strings.TrimSpace(err.Error()), "\n")
	return s
}

// endpointOf returns the table endpoint of a connection string (never the
// key) for the report.
func endpointOf(conn string) string {
	var account string
	for _, part := range strings.Split(conn, ";") {
		k, v, _ := strings.Cut(part, "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "tableendpoint":
			return v
		case "accountname":
			account = v
		}
	}
	if account != "" {
		return "https://" + account + ".table.core.windows.net"
	}
	return ""
}

// generator is one run's shared state.
type generator struct {
	cfg     Config
	tc      *aztables.Client
	keys    KeyGen
	seed    uint64
	lim     *Limiter
	col     *Collector
	runID   string
	payload []byte // the entity's payload properties, JSON, with a leading comma
}

// ringSize is how many of its own writes a worker remembers for reads.
const ringSize = 1024

type entityKey struct{ pk, rk string }

// worker sends requests until ctx ends: inserts with the scenario's
// PartitionKeys and, at --read-ratio, point reads of its earlier inserts.
func (g *generator) worker(ctx context.Context, w int) {
	r := rand.New(rand.NewPCG(g.seed, uint64(w)))
	pick := g.keys.Worker(r)
	var ring [ringSize]entityKey
	written := 0
	for i := 0; ; i++ {
		if err := g.lim.Wait(ctx); err != nil {
			return
		}
		read := written > 0 && g.cfg.ReadRatio > 0 && r.Float64() < g.cfg.ReadRatio
		var k entityKey
		if read {
			k = ring[r.IntN(min(written, ringSize))]
		} else {
			k = entityKey{pick(), fmt.Sprintf("%s-%04d-%010d", g.runID, w, i)}
		}
		rctx, cancel := context.WithTimeout(ctx, g.cfg.RequestTimeout)
		t0 := time.Now()
		var err error
		if read {
			_, err = g.tc.GetEntity(rctx, k.pk, k.rk, nil)
		} else {
			_, err = g.tc.AddEntity(rctx, g.body(k, w, i), nil)
		}
		lat := time.Since(t0)
		cancel()
		if ctx.Err() != nil {
			// The run ended under this request; its outcome says nothing
			// about the service.
			return
		}
		g.col.Record(read, lat, err)
		if err == nil && !read {
			ring[written%ringSize] = k
			written++
		}
		if err != nil && g.cfg.Backoff {
			pause(ctx, backoffFor(err))
		}
	}
}

// backoffFor is how long a worker rests after err: what a 503 asks for
// (x-ms-retry-after-ms, else Retry-After seconds), capped at a second so a
// run still measures; 50 ms otherwise.
func backoffFor(err error) time.Duration {
	const fallback, limit = 50 * time.Millisecond, time.Second
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.RawResponse == nil {
		return fallback
	}
	h := re.RawResponse.Header
	if v, err := strconv.Atoi(h.Get("x-ms-retry-after-ms")); err == nil && v > 0 {
		return min(time.Duration(v)*time.Millisecond, limit)
	}
	if v, err := strconv.Atoi(h.Get("Retry-After")); err == nil && v > 0 {
		return min(time.Duration(v)*time.Second, limit)
	}
	return fallback
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// payloadChunk keeps each payload property well under Azure's 64 KiB
// string property limit (strings count two bytes a character).
const payloadChunk = 16000

// entityOverhead approximates the JSON of the keys and small properties, so
// --entity-size is close to the body size.
const entityOverhead = 110

// payloadProps builds the payload properties once: size bytes of 'x' split
// over P0, P1, ... .
func payloadProps(size int) []byte {
	n := max(0, size-entityOverhead)
	var b []byte
	for i := 0; n > 0; i++ {
		c := min(n, payloadChunk)
		b = fmt.Appendf(b, `,"P%d":"%s"`, i, strings.Repeat("x", c))
		n -= c
	}
	return b
}

// body is one entity's JSON. Keys are generated ASCII letters, digits and
// dashes, so they need no escaping.
func (g *generator) body(k entityKey, w, i int) []byte {
	b := make([]byte, 0, len(g.payload)+entityOverhead+len(k.pk)+len(k.rk))
	b = fmt.Appendf(b, `{"PartitionKey":"%s","RowKey":"%s","Worker":%d,"N":%d,"Scenario":"%s"`,
		k.pk, k.rk, w, i%(1<<31), g.cfg.Scenario)
	b = append(b, g.payload...)
	return append(b, '}')
}

// printer writes the report as text or JSON lines.
type printer struct {
	w    io.Writer
	json *json.Encoder
}

func newPrinter(w io.Writer, asJSON bool) *printer {
	p := &printer{w: w}
	if asJSON {
		p.json = json.NewEncoder(w)
		p.json.SetEscapeHTML(false)
	}
	return p
}

func (p *printer) start(s Start) error {
	if p.json != nil {
		return p.json.Encode(s)
	}
	rate := "unlimited"
	if s.RateTarget > 0 {
		rate = strconv.FormatFloat(s.RateTarget, 'f', -1, 64) + "/s"
	}
	_, err := fmt.Fprintf(p.w, "loadgen: %s on %s table %s, %d partitions, %d workers, rate %s, %v, ~%d B entities, read ratio %g, seed %d\n%s",
		s.Scenario, s.Endpoint, s.Table, s.Partitions, s.Workers, rate,
		time.Duration(s.DurationSeconds*float64(time.Second)), s.EntitySize, s.ReadRatio, s.Seed, headerText())
	return err
}

func (p *printer) interval(iv Interval) error {
	if p.json != nil {
		return p.json.Encode(iv)
	}
	_, err := io.WriteString(p.w, iv.text())
	return err
}

func (p *printer) summary(s Summary) error {
	if p.json != nil {
		return p.json.Encode(s)
	}
	_, err := io.WriteString(p.w, s.text())
	return err
}
