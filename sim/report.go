package sim

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"tablestore/master/scheduler"
)

// Report is the result of a simulation.
type Report struct {
	Workload     string         `json:"workload"`
	Servers      int            `json:"servers"`
	Ranges       int            `json:"ranges_at_start"`
	Seed         int64          `json:"seed"`
	DurationSec  float64        `json:"simulated_seconds"`
	EventAtSec   float64        `json:"event_at_seconds"`
	Capacity     float64        `json:"server_capacity_entities_per_sec"`
	Target       float64        `json:"target_spread"`
	ElapsedSec   float64        `json:"elapsed_seconds"`
	Points       []Point        `json:"points"`
	OpsPerMinute []Minute       `json:"ops_per_minute"`
	OpsByRule    map[string]int `json:"ops_by_rule"`
	Failed       int            `json:"ops_not_applicable"`
	SpreadBefore float64        `json:"spread_before_event"`
	PeakSpread   float64        `json:"peak_spread_after_event"`
	AbsorbSec    float64        `json:"absorb_seconds"`
	ServedShare  float64        `json:"served_over_offered"`
	FinalSpread  float64        `json:"final_spread"`
	RangesAtEnd  int            `json:"ranges_at_end"`
	GroupsAtEnd  int            `json:"raft_groups_at_end"`
	stableFor    time.Duration
	eventAt      time.Duration
	minutes      map[int]map[string]int
	// ops are the operations started, with when (for the thrash and
	// determinism tests).
	ops []timedOp
}

// Point is the state of the simulated cluster at one step.
type Point struct {
	T       float64 `json:"t"`
	Offered float64 `json:"offered"`
	Served  float64 `json:"served"`
	Spread  float64 `json:"spread"`
	Ranges  int     `json:"ranges"`
	Groups  int     `json:"raft_groups"`
}

// Minute counts the operations started in one simulated minute, by rule.
type Minute struct {
	Minute int            `json:"minute"`
	Ops    map[string]int `json:"ops"`
}

func newReport(cfg Config) *Report {
	return &Report{Workload: cfg.Workload, Servers: cfg.Servers, Ranges: cfg.Ranges, Seed: cfg.Seed,
		DurationSec: cfg.Duration.Seconds(), EventAtSec: cfg.EventAt.Seconds(), Capacity: cfg.Capacity, Target: cfg.Target,
		OpsByRule: map[string]int{}, minutes: map[int]map[string]int{}, stableFor: 30 * time.Second, eventAt: cfg.EventAt}
}

func (r *Report) sample(t time.Duration, offered, served, spread float64, ranges, groups int) {
	r.Points = append(r.Points, Point{T: t.Seconds(), Offered: offered, Served: served, Spread: spread, Ranges: ranges, Groups: groups})
}

// timedOp is an operation and the simulated time it started.
type timedOp struct {
	t  time.Duration
	op scheduler.Op
}

func (r *Report) op(t time.Duration, o scheduler.Op) {
	r.ops = append(r.ops, timedOp{t, o})
	m := int(t / time.Minute)
	if r.minutes[m] == nil {
		r.minutes[m] = map[string]int{}
	}
	r.minutes[m][o.Rule]++
	r.OpsByRule[o.Rule]++
}

// finish computes the summary figures.
func (r *Report) finish(elapsed time.Duration) {
	r.ElapsedSec = elapsed.Seconds()
	for m := 0; m <= int(r.DurationSec/60); m++ {
		r.OpsPerMinute = append(r.OpsPerMinute, Minute{Minute: m, Ops: r.minutes[m]})
	}
	offered, served := 0.0, 0.0
	r.AbsorbSec = -1
	for i, p := range r.Points {
		offered += p.Offered
		served += p.Served
		if p.T < r.eventAt.Seconds() {
			r.SpreadBefore = max(r.SpreadBefore, p.Spread)
			continue
		}
		r.PeakSpread = max(r.PeakSpread, p.Spread)
		if r.AbsorbSec < 0 && r.stableFrom(i) {
			r.AbsorbSec = p.T - r.eventAt.Seconds()
		}
	}
	if offered > 0 {
		r.ServedShare = served / offered
	}
	if n := len(r.Points); n > 0 {
		r.FinalSpread, r.RangesAtEnd, r.GroupsAtEnd = r.Points[n-1].Spread, r.Points[n-1].Ranges, r.Points[n-1].Groups
	}
}

// stableFrom reports whether the spread stays within the target from
// point i for stableFor (or to the end).
func (r *Report) stableFrom(i int) bool {
	start := r.Points[i].T
	for _, p := range r.Points[i:] {
		if p.T-start > r.stableFor.Seconds() {
			break
		}
		if p.Spread > r.Target {
			return false
		}
	}
	return true
}

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}

// Summary is a few lines for a terminal.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workload %s: %d servers, %d ranges (%d at the end, in %d Raft groups), %.0f s simulated in %.1f s\n",
		r.Workload, r.Servers, r.Ranges, r.RangesAtEnd, r.GroupsAtEnd, r.DurationSec, r.ElapsedSec)
	fmt.Fprintf(&b, "served/offered %.3f; spread (max/mean leader load) before the event %.2f, peak after %.2f, final %.2f\n",
		r.ServedShare, r.SpreadBefore, r.PeakSpread, r.FinalSpread)
	if r.EventAtSec >= r.DurationSec {
		// No event happened: "not back under" would read as a failure.
		fmt.Fprintf(&b, "no event: --event-at %.0f s is not before the end of the run (--duration %.0f s)\n", r.EventAtSec, r.DurationSec)
	} else if r.AbsorbSec >= 0 {
		fmt.Fprintf(&b, "spread back under %.2f %.0f s after the event (at %.0f s)\n", r.Target, r.AbsorbSec, r.EventAtSec)
	} else {
		fmt.Fprintf(&b, "spread not back under %.2f after the event\n", r.Target)
	}
	rules := make([]string, 0, len(r.OpsByRule))
	for k := range r.OpsByRule {
		rules = append(rules, k)
	}
	sort.Strings(rules)
	for _, k := range rules {
		fmt.Fprintf(&b, "  %-22s %d\n", k, r.OpsByRule[k])
	}
	return b.String()
}

// line is one series of a chart.
type line struct {
	Name, Color string
	Y           []float64
}

var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"}

// chart draws lines over x as an inline SVG, with a vertical marker at
// mark and a dashed horizontal rule at hline (when > 0).
func chart(title string, x []float64, lines []line, mark, hline float64) template.HTML {
	const w, h, pad = 860.0, 220.0, 40.0
	xmax, ymax := 1.0, 0.0
	for _, v := range x {
		xmax = max(xmax, v)
	}
	for _, l := range lines {
		for _, v := range l.Y {
			ymax = max(ymax, v)
		}
	}
	ymax = max(ymax*1.05, hline*1.1, 1e-9)
	px := func(v float64) float64 { return pad + v/xmax*(w-2*pad) }
	py := func(v float64) float64 { return h - pad + -v/ymax*(h-2*pad) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`, w, h+14*float64(len(lines)))
	fmt.Fprintf(&b, `<text x="%.0f" y="14" font-size="13">%s</text>`, pad, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#000"/>`, pad, h-pad, w-pad, h-pad)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#000"/>`, pad, pad, pad, h-pad)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%.3g</text><text x="%.0f" y="%.0f">0</text>`, 2.0, pad, ymax, 2.0, h-pad)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f min</text>`, w-pad, h-pad+14, xmax/60)
	if mark > 0 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#999" stroke-dasharray="4"/>`, px(mark), pad, px(mark), h-pad)
	}
	if hline > 0 {
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#d62728" stroke-dasharray="2"/>`, pad, py(hline), w-pad, py(hline))
	}
	for i, l := range lines {
		b.WriteString(`<polyline fill="none" stroke-width="1.2" stroke="` + l.Color + `" points="`)
		for j, v := range l.Y {
			fmt.Fprintf(&b, "%.1f,%.1f ", px(x[j]), py(v))
		}
		b.WriteString(`"/>`)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`, pad, h+14*float64(i)+4, l.Color, template.HTMLEscapeString(l.Name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// downsample keeps at most n points, taking each bucket's maximum of the
// spread (so a short peak still shows) and the mean of the rest.
func downsample(ps []Point, n int) []Point {
	if len(ps) <= n {
		return ps
	}
	k := int(math.Ceil(float64(len(ps)) / float64(n)))
	var out []Point
	for i := 0; i < len(ps); i += k {
		end := min(i+k, len(ps))
		agg := Point{T: ps[i].T, Ranges: ps[end-1].Ranges, Groups: ps[end-1].Groups}
		for _, p := range ps[i:end] {
			agg.Offered += p.Offered / float64(end-i)
			agg.Served += p.Served / float64(end-i)
			agg.Spread = max(agg.Spread, p.Spread)
		}
		out = append(out, agg)
	}
	return out
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>tablestore sim: {{.R.Workload}}</title>
<style>body{font-family:sans-serif;margin:2em;max-width:900px}td,th{padding:2px 10px;text-align:left}</style></head>
<body><h1>tablestore sim: {{.R.Workload}}</h1>
<p>{{.R.Servers}} servers, {{.R.Ranges}} ranges at the start ({{.R.RangesAtEnd}} at the end, in {{.R.GroupsAtEnd}} Raft groups), {{printf "%.0f" .R.DurationSec}} s simulated in {{printf "%.1f" .R.ElapsedSec}} s; event at {{printf "%.0f" .R.EventAtSec}} s (dashed line); server capacity {{printf "%.0f" .R.Capacity}} entities/s; seed {{.R.Seed}}.</p>
<table>
<tr><th>served / offered</th><td>{{printf "%.3f" .R.ServedShare}}</td></tr>
<tr><th>spread before the event (max/mean leader load)</th><td>{{printf "%.2f" .R.SpreadBefore}}</td></tr>
<tr><th>peak spread after the event</th><td>{{printf "%.2f" .R.PeakSpread}}</td></tr>
<tr><th>time to bring the spread under {{.R.Target}}</th><td>{{if ge .R.AbsorbSec 0.0}}{{printf "%.0f" .R.AbsorbSec}} s{{else}}never{{end}}</td></tr>
<tr><th>final spread</th><td>{{printf "%.2f" .R.FinalSpread}}</td></tr>
</table>
{{range .Charts}}<div>{{.}}</div>{{end}}
<h2>Operations by rule</h2><table>{{range $k, $v := .R.OpsByRule}}<tr><td>{{$k}}</td><td>{{$v}}</td></tr>{{end}}</table>
</body></html>
`))

// WriteHTML writes a self-contained page (inline SVG, no network).
func (r *Report) WriteHTML(w io.Writer) error {
	ps := downsample(r.Points, 720)
	x := make([]float64, len(ps))
	off, srv, spr, rng, grp := make([]float64, len(ps)), make([]float64, len(ps)), make([]float64, len(ps)), make([]float64, len(ps)), make([]float64, len(ps))
	for i, p := range ps {
		x[i], off[i], srv[i], spr[i], rng[i], grp[i] = p.T, p.Offered, p.Served, p.Spread, float64(p.Ranges), float64(p.Groups)
	}
	mark := r.EventAtSec
	charts := []template.HTML{
		chart("Throughput (entities/s)", x, []line{{"offered", colors[0], off}, {"served", colors[2], srv}}, mark, 0),
		chart("Load spread: most-loaded server / mean (red: target)", x, []line{{"max/mean leader load", colors[0], spr}}, mark, r.Target),
		r.opsChart(mark),
		chart("Ranges and Raft groups", x, []line{{"ranges", colors[4], rng}, {"Raft groups", colors[1], grp}}, mark, 0),
	}
	return page.Execute(w, struct {
		R      *Report
		Charts []template.HTML
	}{r, charts})
}

func (r *Report) opsChart(mark float64) template.HTML {
	rules := make([]string, 0, len(r.OpsByRule))
	for k := range r.OpsByRule {
		rules = append(rules, k)
	}
	sort.Strings(rules)
	x := make([]float64, len(r.OpsPerMinute))
	for i, m := range r.OpsPerMinute {
		x[i] = float64(m.Minute * 60)
	}
	var lines []line
	for i, rule := range rules {
		y := make([]float64, len(r.OpsPerMinute))
		for j, m := range r.OpsPerMinute {
			y[j] = float64(m.Ops[rule])
		}
		lines = append(lines, line{rule, colors[i%len(colors)], y})
	}
	return chart("Operations started per minute, by rule", x, lines, mark, 0)
}
