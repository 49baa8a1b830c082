package loadgen

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"tablestore/internal/masterclient"
	"time"

	"tablestore/internal/webchart"
)

// Report is everything a run measured, written by --report as JSON or as
// one self-contained HTML page.
type Report struct {
	// Run is the run's settings; Began is when its load started.
	Run   Start     `json:"run"`
	Began time.Time `json:"began"`
	// Intervals are the progress lines (throughput, latency, errors, 503s).
	Intervals []Interval `json:"intervals"`
	// Cluster samples what the master knew each interval: the table's
	// range count and each server's load as leader. Empty without --master.
	Cluster []ClusterSample `json:"cluster"`
	// Events are the master's decisions during the run (splits, merges,
	// moves, leader transfers, throttling, failures) with their causes.
	Events []ReportEvent `json:"events"`
	// ClusterError says why the cluster view is missing or partial.
	ClusterError string  `json:"cluster_error,omitempty"`
	Summary      Summary `json:"summary"`
}

// ClusterSample is one sample of the master's view.
type ClusterSample struct {
	ElapsedSeconds       float64            `json:"elapsed_seconds"`
	Ranges               int                `json:"ranges"`
	ServerEntitiesPerSec map[string]float64 `json:"server_entities_per_sec"`
}

// ReportEvent is one event of the master's log, placed on the run's time
// axis.
type ReportEvent struct {
	Seq             uint64             `json:"seq"`
	ElapsedSeconds  float64            `json:"elapsed_seconds"`
	Time            time.Time          `json:"time"`
	Kind            string             `json:"kind"`
	Cause           string             `json:"cause"`
	Message         string             `json:"message"`
	Ranges          []uint64           `json:"ranges"`
	Servers         []string           `json:"servers"`
	Figures         map[string]float64 `json:"figures"`
	DurationSeconds float64            `json:"duration_seconds"`
}

//go:embed report.html
var reportPage string

var reportTmpl = template.Must(template.New("report").Parse(reportPage))

// reportFormat returns "json" or "html" from path's extension.
func reportFormat(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return "json", nil
	case ".html", ".htm":
		return "html", nil
	}
	return "", fmt.Errorf("--report %q must end in .json or .html", path)
}

// Encode renders the report in format "json" or "html".
func (r *Report) Encode(format string) ([]byte, error) {
	if format == "json" {
		b, err := json.MarshalIndent(r, "", "  ")
		return append(b, '\n'), err
	}
	var buf bytes.Buffer
	err := reportTmpl.Execute(&buf, struct {
		Title string
		Chart template.JS
		Data  *Report
	}{fmt.Sprintf("loadgen %s on %s, %s", r.Run.Scenario, r.Run.Table, r.Began.Format(time.RFC3339)), template.JS(webchart.JS), r})
	return buf.Bytes(), err
}

// WriteFile writes the report to path in the format its extension names.
func (r *Report) WriteFile(path string) error {
	format, err := reportFormat(path)
	if err != nil {
		return err
	}
	b, err := r.Encode(format)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// reporter gathers a Report during a run; without --report it does nothing.
type reporter struct {
	cfg  Config
	rep  *Report
	cw   *clusterWatch // nil without --master
	mc   *masterclient.Client
	done chan struct{}
	mu   sync.Mutex
}

func newReporter(cfg Config, st Start, begin time.Time) *reporter {
	r := &reporter{cfg: cfg}
	if cfg.Report == "" {
		return r
	}
	r.rep = &Report{Run: st, Began: begin, Intervals: []Interval{}, Cluster: []ClusterSample{}, Events: []ReportEvent{}}
	if addrs := masterclient.ParseAddrs(cfg.Master); len(addrs) > 0 {
		mc, err := masterclient.New(addrs)
		if err != nil {
			r.rep.ClusterError = err.Error()
			return r
		}
		r.mc, r.cw = mc, newClusterWatch(mc, cfg.Table, begin)
	}
	return r
}

// watch samples the cluster each report interval until ctx ends.
func (r *reporter) watch(ctx context.Context) {
	if r.cw == nil {
		return
	}
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		t := time.NewTicker(r.cfg.ReportInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				r.cw.sample(ctx, now)
			}
		}
	}()
}

func (r *reporter) interval(iv Interval) {
	if r.rep == nil {
		return
	}
	r.mu.Lock()
	r.rep.Intervals = append(r.rep.Intervals, iv)
	r.mu.Unlock()
}

// finish takes a last sample (events logged at the very end included) and
// writes the report.
func (r *reporter) finish(ctx context.Context, s Summary) error {
	if r.rep == nil {
		return nil
	}
	if r.cw != nil {
		<-r.done
		r.cw.sample(context.WithoutCancel(ctx), time.Now()) // bounded by sampleTimeout
		var err error
		r.rep.Cluster, r.rep.Events, err = r.cw.result()
		if err != nil {
			r.rep.ClusterError = firstLine(err)
		}
	}
	r.rep.Summary = s
	for _, path := range r.cfg.reportPaths() {
		if err := r.rep.WriteFile(path); err != nil {
			return fmt.Errorf("loadgen: --report: %w", err)
		}
	}
	return nil
}

func (r *reporter) close() {
	if r.mc != nil {
		r.mc.Close()
	}
}
