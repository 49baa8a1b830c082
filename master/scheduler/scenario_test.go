package scheduler

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the expected output of the scenarios in testdata/")

// TestScenarios runs every scripted scenario in testdata/: a text file of
// directives (a command line, input lines, "----", the expected output,
// a blank line), in the form of etcd-io/raft's datadriven tests. With
// -update the expected outputs are rewritten from what the scheduler does.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenario(t, f) })
	}
}

// directive is one block of a scenario file.
type directive struct {
	pre      []string // comments and blank lines before the command
	line     int
	cmd      string
	args     map[string]string
	input    []string
	expected string
}

func parseScenario(t *testing.T, path string) ([]*directive, []string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var out []*directive
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		d := &directive{pre: pre, line: i + 1, args: map[string]string{}}
		pre = nil
		fields := strings.Fields(l)
		d.cmd = fields[0]
		for _, a := range fields[1:] {
			k, v, _ := strings.Cut(a, "=")
			d.args[k] = v
		}
		for i++; i < len(lines) && lines[i] != "----"; i++ {
			d.input = append(d.input, lines[i])
		}
		var exp []string
		for i++; i < len(lines) && lines[i] != ""; i++ {
			exp = append(exp, lines[i])
		}
		d.expected = strings.Join(exp, "\n")
		out = append(out, d)
	}
	return out, pre
}

// TestScenariosZoneEach runs the scenarios that name no zone again with
// each server in a zone of its own: a server that names none shares a
// zone with no other (zone.go), so the plans must be the same, and a
// cluster without zones plans as it did before zones existed.
func TestScenariosZoneEach(t *testing.T) {
	if *update {
		t.Skip("-update rewrites from TestScenarios")
	}
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "zone=") {
			continue
		}
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runScenarioIn(t, f, &world{cfg: DefaultConfig(), slots: 4, now: t0, nextID: 1, zoneEach: true})
		})
	}
}

func runScenario(t *testing.T, path string) { runScenarioIn(t, path, newWorld()) }

func runScenarioIn(t *testing.T, path string, w *world) {
	ds, tail := parseScenario(t, path)
	var rewritten strings.Builder
	for _, d := range ds {
		got, err := w.run(d)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", path, d.line, d.cmd, err)
		}
		got = strings.TrimRight(got, "\n")
		if !*update && got != d.expected {
			t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", path, d.line, d.cmd, got, d.expected)
		}
		for _, l := range d.pre {
			rewritten.WriteString(l + "\n")
		}
		fmt.Fprintf(&rewritten, "%s\n", strings.Join(append([]string{d.cmd}, argStrings(d)...), " "))
		for _, l := range d.input {
			rewritten.WriteString(l + "\n")
		}
		rewritten.WriteString("----\n")
		if got != "" {
			rewritten.WriteString(got + "\n")
		}
		rewritten.WriteString("\n")
	}
	for _, l := range tail {
		rewritten.WriteString(l + "\n")
	}
	if *update {
		out := strings.TrimRight(rewritten.String(), "\n") + "\n"
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func argStrings(d *directive) []string {
	var out []string
	for k, v := range d.args {
		if v == "" {
			out = append(out, k)
		} else {
			out = append(out, k+"="+v)
		}
	}
	sort.Strings(out)
	return out
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// world is the cluster a scenario scripts: the scheduler's input, kept up
// to date as planned operations are applied.
type world struct {
	cfg      Config
	slots    int
	now      time.Time
	servers  []Server
	ranges   []*Range
	workload map[string]float64 // PartitionKey -> entities/s, table 1
	inflight []Op
	recent   []Op
	last     []Op
	nextID   uint64
	// reported holds the merged ranges' next reports: as in the master,
	// a merged range keeps the last report (and trend) its leader sent
	// for the left part alone until the leader reports again (the next
	// observe).
	reported map[uint64]*Load
	// zoneEach puts each server that names no zone in one of its own
	// (TestScenariosZoneEach), and state leaves zones out.
	zoneEach bool
}

func newWorld() *world {
	return &world{cfg: DefaultConfig(), slots: 4, now: t0, nextID: 1}
}

func (w *world) run(d *directive) (string, error) {
	switch d.cmd {
	case "config":
		return "", w.config(d.args)
	case "servers":
		return "", w.setServers(d.input)
	case "ranges":
		return "", w.setRanges(d.input)
	case "workload":
		return "", w.setWorkload(d.input)
	case "busy":
		return "", w.setBusy(d.input)
	case "advance":
		dur, err := time.ParseDuration(d.args["by"])
		w.now = w.now.Add(dur)
		return "", err
	case "schedule":
		return w.schedule(d.args)
	case "apply":
		return w.apply(d.args)
	case "run":
		return w.runFor(d.args)
	case "state":
		return w.state(), nil
	}
	return "", fmt.Errorf("unknown command %q", d.cmd)
}

func (w *world) config(args map[string]string) error {
	ints := map[string]*int{"slots": &w.slots, "max-per-server": &w.cfg.MaxPerServer, "max-group-spans": &w.cfg.MaxGroupSpans,
		"anchor-group-spans": &w.cfg.AnchorGroupSpans}
	bools := map[string]*bool{"balance-leaders": &w.cfg.BalanceLeaders, "balance-replicas": &w.cfg.BalanceReplicas, "shared-host": &w.cfg.SharedHost,
		"attach-cold": &w.cfg.AttachCold}
	for k, v := range args {
		var err error
		switch {
		case ints[k] != nil:
			*ints[k], err = strconv.Atoi(v)
		case bools[k] != nil:
			*bools[k] = v == "true"
		case k == "split-load":
			w.cfg.SplitLoad, err = strconv.ParseFloat(v, 64)
		case k == "merge-load":
			w.cfg.MergeLoad, err = strconv.ParseFloat(v, 64)
		case k == "split-window":
			w.cfg.SplitWindow, err = time.ParseDuration(v)
		case k == "merge-cooldown":
			w.cfg.MergeCooldown, err = time.ParseDuration(v)
		case k == "replicate-after":
			w.cfg.ReplicateAfter, err = time.ParseDuration(v)
		case k == "split-bytes" || k == "merge-bytes":
			var n uint64
			n, err = parseBytes(v)
			if k == "split-bytes" {
				w.cfg.SplitBytes = n
			} else {
				w.cfg.MergeBytes = n
			}
		default:
			return fmt.Errorf("unknown config %q", k)
		}
		if err != nil {
			return err
		}
	}
	return w.cfg.Validate()
}

func parseBytes(s string) (uint64, error) {
	mult := uint64(1)
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n * mult, err
}

// setServers reads "id [down=DUR] [back=DUR] [silent] [draining] [unseen]
// [slow=MEDIAN] [slow-cleared=DUR] [skewed=OFFSET] [disk=FREE/SIZE/RESERVE]
// [zone=Z] [attach-spans]" lines (slow-cleared: found no longer slow DUR
// ago; skewed: its clock is off by OFFSET, over the master's bound; disk:
// the data directory's figures, in bytes with K, M or G; zone: its failure
// domain; attach-spans: it announces attach_spans).
func (w *world) setServers(lines []string) error {
	w.servers = nil
	for _, l := range lines {
		f := strings.Fields(l)
		s := Server{ID: f[0], Live: true, LastSeen: w.now}
		for _, a := range f[1:] {
			if err := w.serverAttr(&s, a); err != nil {
				return err
			}
		}
		if w.zoneEach && s.Zone == "" {
			s.Zone = "own-" + s.ID
		}
		w.servers = append(w.servers, s)
	}
	sort.Slice(w.servers, func(i, j int) bool { return w.servers[i].ID < w.servers[j].ID })
	return nil
}

// serverAttr sets one attribute of a servers line on s.
func (w *world) serverAttr(s *Server, a string) error {
	k, v, _ := strings.Cut(a, "=")
	var d time.Duration
	switch k {
	case "down", "back", "slow", "slow-cleared", "skewed":
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return err
		}
	}
	switch k {
	case "down":
		s.Live, s.LastSeen = false, w.now.Add(-d)
	case "back":
		s.Back = w.now.Add(-d)
	case "silent":
		s.Silent = true
	case "slow":
		s.Slow, s.SlowMedian = true, d
	case "slow-cleared":
		s.SlowCleared = w.now.Add(-d)
	case "skewed":
		s.ClockSkewed, s.ClockOffset = true, d
	case "draining":
		s.Draining = true
	case "unseen":
		s.Live, s.LastSeen = false, time.Time{}
	case "attach-spans":
		s.AttachSpans = true
	case "zone":
		s.Zone = v
	case "disk":
		var err error
		s.Disk, err = parseDisk(v)
		return err
	default:
		return fmt.Errorf("unknown server attribute %q", a)
	}
	return nil
}

func parseDisk(v string) (Disk, error) {
	f := strings.Split(v, "/")
	if len(f) != 3 {
		return Disk{}, fmt.Errorf("disk=%s: want FREE/SIZE/RESERVE", v)
	}
	var n [3]uint64
	for i, s := range f {
		var err error
		if n[i], err = parseBytes(s); err != nil {
			return Disk{}, err
		}
	}
	return Disk{Available: n[0], Capacity: n[1], Reserve: n[2]}, nil
}

// setRanges reads "rID [start,end) a* b c [eps=N] [bytes=N] [keys=k:n,...]
// [table=N] [group=N] [frozen] [anchor] [hot=DUR] [warm=DUR] [cold=DUR]
// [applied=a:N,...] [missing=a] [broken=a]"
// lines; * marks the leader (anchor: the range founds an anchor group;
// warm: at least half of split-load that long).
func (w *world) setRanges(lines []string) error {
	w.ranges, w.reported = nil, nil
	for _, l := range lines {
		r, err := w.parseRange(l)
		if err != nil {
			return fmt.Errorf("%q: %w", l, err)
		}
		w.ranges = append(w.ranges, r)
		w.nextID = max(w.nextID, r.ID+1)
	}
	w.sortRanges()
	return nil
}

func (w *world) parseRange(l string) (*Range, error) {
	f := strings.Fields(l)
	if len(f) < 2 || !strings.HasPrefix(f[0], "r") {
		return nil, fmt.Errorf("want rID [start,end) replicas...")
	}
	id, err := strconv.ParseUint(f[0][1:], 10, 64)
	if err != nil {
		return nil, err
	}
	start, end, ok := strings.Cut(strings.Trim(f[1], "[)"), ",")
	if !ok {
		return nil, fmt.Errorf("bad bounds %q", f[1])
	}
	r := &Range{ID: id, TableID: 1, Table: "t", Start: start, End: end}
	for _, a := range f[2:] {
		if err := w.rangeAttr(r, a); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (w *world) rangeAttr(r *Range, a string) error {
	k, v, isKV := strings.Cut(a, "=")
	switch {
	case !isKV && a == "frozen":
		r.Frozen = true
	case !isKV && a == "anchor":
		r.Anchor = true
	case !isKV && a == "pending":
		r.Pending = true
	case !isKV && strings.HasSuffix(a, "*"):
		r.Leader = strings.TrimSuffix(a, "*")
		r.Replicas = append(r.Replicas, Replica{Server: r.Leader})
	case !isKV:
		r.Replicas = append(r.Replicas, Replica{Server: a})
	case k == "eps" || k == "bytes" || k == "keys" || k == "sample":
		return loadAttr(r, k, v)
	default:
		return w.otherAttr(r, k, v)
	}
	return nil
}

func loadAttr(r *Range, k, v string) error {
	if r.Load == nil {
		r.Load = &Load{}
	}
	var err error
	switch k {
	case "eps":
		r.Load.EntitiesPerSec, err = strconv.ParseFloat(v, 64)
	case "bytes":
		r.Load.Bytes, err = parseBytes(v)
	case "keys":
		r.Load.HotKeys, err = parseKeys(v)
	case "sample":
		r.Load.Sample, err = parseKeys(v)
	}
	return err
}

func (w *world) otherAttr(r *Range, k, v string) error {
	var err error
	switch k {
	case "table":
		r.TableID, err = strconv.ParseUint(v, 10, 64)
	case "group":
		r.Group, err = strconv.ParseUint(v, 10, 64)
	case "hot", "warm", "cold":
		var d time.Duration
		d, err = time.ParseDuration(v)
		switch k {
		case "hot":
			r.HotSince = w.now.Add(-d)
		case "warm":
			r.WarmSince = w.now.Add(-d)
		default:
			r.ColdSince = w.now.Add(-d)
		}
	case "applied":
		err = setApplied(r, v)
	case "missing":
		if rep := r.replica(v); rep != nil {
			rep.Missing = true
		}
	case "broken":
		if rep := r.replica(v); rep != nil {
			rep.Broken = true
		}
	default:
		err = fmt.Errorf("unknown range attribute %q", k)
	}
	return err
}

func parseKeys(v string) ([]KeyLoad, error) {
	var out []KeyLoad
	for _, kv := range strings.Split(v, ",") {
		k, n, _ := strings.Cut(kv, ":")
		f, err := strconv.ParseFloat(n, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, KeyLoad{Key: k, EntitiesPerSec: f})
	}
	return out, nil
}

func setApplied(r *Range, v string) error {
	for _, kv := range strings.Split(v, ",") {
		s, n, _ := strings.Cut(kv, ":")
		i, err := strconv.ParseUint(n, 10, 64)
		if err != nil {
			return err
		}
		if rep := r.replica(s); rep != nil {
			rep.Applied = i
		}
	}
	return nil
}

// setWorkload reads "key:rate ..." lines: the load of table 1 per
// PartitionKey, from which every range's load is derived on each step of
// run.
func (w *world) setWorkload(lines []string) error {
	w.workload = map[string]float64{}
	for _, l := range lines {
		ks, err := parseKeys(strings.Join(strings.Fields(l), ","))
		if err != nil {
			return err
		}
		for _, k := range ks {
			w.workload[k.Key] = k.EntitiesPerSec
		}
	}
	return nil
}

// setBusy reads "rID" lines (an operation in flight on that range) and
// "rL+rR" lines (a merge of rL and rR in flight).
func (w *world) setBusy(lines []string) error {
	w.inflight = nil
	parse := func(s string) (uint64, error) {
		return strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(s), "r"), 10, 64)
	}
	for _, l := range lines {
		left, right, merge := strings.Cut(l, "+")
		id, err := parse(left)
		if err != nil {
			return err
		}
		o := Op{Kind: TransferLeader, Range: id, At: w.now}
		if merge {
			if o.Right, err = parse(right); err != nil {
				return err
			}
			o.Kind = Merge
		}
		w.inflight = append(w.inflight, o)
	}
	return nil
}

func (w *world) snapshot() *Snapshot {
	var recent []Op
	for _, o := range w.recent {
		if w.now.Sub(o.At) < w.cfg.RecentWindow() {
			recent = append(recent, o)
		}
	}
	w.recent = recent
	return &Snapshot{Now: w.now, Servers: w.servers, Ranges: w.ranges, InFlight: w.inflight, Recent: recent, Slots: w.slots}
}

func (w *world) schedule(args map[string]string) (string, error) {
	if at, ok := args["at"]; ok {
		d, err := time.ParseDuration(at)
		if err != nil {
			return "", err
		}
		w.now = t0.Add(d)
	}
	var err error
	w.last, err = w.scheduleChecked()
	return formatOps(w.last), err
}

// scheduleChecked runs the scheduler over the world's snapshot, and again
// with the operations in flight and recent in reverse order (the master
// gathers them from maps, in no fixed order): a pure function must plan
// the same either way.
func (w *world) scheduleChecked() ([]Op, error) {
	snap := w.snapshot()
	ops := Schedule(w.cfg, snap)
	rev := *snap
	rev.InFlight = slices.Clone(snap.InFlight)
	slices.Reverse(rev.InFlight)
	rev.Recent = slices.Clone(snap.Recent)
	slices.Reverse(rev.Recent)
	if a, b := formatOps(ops), formatOps(Schedule(w.cfg, &rev)); a != b {
		return ops, fmt.Errorf("the plan depends on the order of the operations in flight or recent:\n%s\nreversed:\n%s", a, b)
	}
	return ops, nil
}

func formatOps(ops []Op) string {
	if len(ops) == 0 {
		return "(none)"
	}
	var b strings.Builder
	for _, o := range ops {
		b.WriteString(o.String() + "\n")
	}
	return b.String()
}

// runFor steps the world: each step derives loads from the workload (if
// any), folds them into the trends, schedules, and applies what was
// planned as if it completed at once.
func (w *world) runFor(args map[string]string) (string, error) {
	total, err := time.ParseDuration(args["for"])
	if err != nil {
		return "", err
	}
	step := time.Second
	if s, ok := args["every"]; ok {
		if step, err = time.ParseDuration(s); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	for end := w.now.Add(total); !w.now.After(end); w.now = w.now.Add(step) {
		w.observe()
		if w.last, err = w.scheduleChecked(); err != nil {
			return "", err
		}
		for _, o := range w.last {
			fmt.Fprintf(&b, "%v: %s\n", w.now.Sub(t0), o)
		}
		w.applyLast()
	}
	w.now = w.now.Add(-step)
	if b.Len() == 0 {
		return "(none)", nil
	}
	return b.String(), nil
}

func (w *world) observe() {
	for _, r := range w.ranges {
		if l, ok := w.reported[r.ID]; ok {
			r.Load = l
			delete(w.reported, r.ID)
		}
		if w.workload != nil {
			w.deriveLoad(r)
		}
		if r.Load != nil {
			r.Observe(w.cfg, r.Load.EntitiesPerSec, w.now)
		}
	}
}

func (w *world) deriveLoad(r *Range) {
	var bytes uint64
	if r.Load != nil {
		bytes = r.Load.Bytes
	}
	l := &Load{Bytes: bytes}
	for k, v := range w.workload {
		if k >= r.Start && (r.End == "" || k < r.End) {
			l.EntitiesPerSec += v
			l.Sample = append(l.Sample, KeyLoad{Key: k, EntitiesPerSec: v})
		}
	}
	sort.Slice(l.Sample, func(i, j int) bool { return l.Sample[i].Key < l.Sample[j].Key })
	l.HotKeys = append([]KeyLoad(nil), l.Sample...)
	sort.SliceStable(l.HotKeys, func(i, j int) bool { return l.HotKeys[i].EntitiesPerSec > l.HotKeys[j].EntitiesPerSec })
	r.Load = l
}

func (w *world) sortRanges() {
	sort.Slice(w.ranges, func(i, j int) bool {
		a, b := w.ranges[i], w.ranges[j]
		if a.TableID != b.TableID {
			return a.TableID < b.TableID
		}
		return a.Start < b.Start
	})
}

func (w *world) find(id uint64) *Range {
	for _, r := range w.ranges {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// apply is the apply directive: took=DUR, the operations finished DUR
// after they started (Op.Done), and the clock moves on to then; failed,
// they failed (Op.Failed): recent, not applied.
func (w *world) apply(args map[string]string) (string, error) {
	if v, ok := args["took"]; ok {
		took, err := time.ParseDuration(v)
		if err != nil {
			return "", err
		}
		for i := range w.last {
			w.last[i].Done = w.last[i].At.Add(took)
		}
		w.now = w.now.Add(took)
	}
	if _, ok := args["failed"]; ok {
		for i := range w.last {
			w.last[i].Failed = true
		}
	}
	return w.applyLast(), nil
}

// applyLast applies the last planned operations as if they completed.
func (w *world) applyLast() string {
	var b strings.Builder
	for _, o := range w.last {
		r := w.find(o.Range)
		if r == nil {
			continue
		}
		if o.Failed {
			w.recent = append(w.recent, o)
			continue
		}
		switch o.Kind {
		case Split:
			o.Right = w.split(r, o)
		case Merge:
			w.merge(r, w.find(o.Right))
		case Move:
			w.move(r, o)
		case Isolate:
			w.isolate(r) // the span leaves its anchor group
		case Attach:
			w.attach(r, w.find(o.Group))
		case TransferLeader:
			// The leadership of the range's whole Raft group.
			for _, sp := range w.ranges {
				if sp.GroupID() == r.GroupID() {
					sp.Leader = o.To
				}
			}
		}
		w.recent = append(w.recent, o)
	}
	w.last = nil
	w.sortRanges()
	b.WriteString(w.state())
	return b.String()
}

// move applies o, a move of r's replica: of every range of r's Raft
// group when o moves it whole (the master's moveGroup), else of r alone,
// which first leaves its group as the master has it (isolate).
func (w *world) move(r *Range, o Op) {
	spans := []*Range{r}
	if o.Whole {
		spans = nil
		for _, sp := range w.ranges {
			if sp.GroupID() == r.GroupID() {
				spans = append(spans, sp)
			}
		}
	} else {
		w.isolate(r)
	}
	for _, sp := range spans {
		if rep := sp.replica(o.From); rep != nil {
			*rep = Replica{Server: o.To, Applied: rep.Applied}
		}
		w.moveBytes(sp, o.From, o.To)
		if sp.Leader == o.From {
			sp.Leader = o.To
		}
	}
}

// moveBytes has a move of r free its bytes, twice (its state and its
// snapshot), on from's disk and take them on to's, for the servers that
// report disk figures.
func (w *world) moveBytes(r *Range, from, to string) {
	n := 2 * r.bytes()
	for i := range w.servers {
		d := &w.servers[i].Disk
		switch {
		case d.Capacity == 0:
		case w.servers[i].ID == from:
			d.Available = min(d.Capacity, d.Available+n)
		case w.servers[i].ID == to:
			d.Available -= min(d.Available, n)
		}
	}
}

// isolate has r leave its Raft group before a move, as the master does
// (Server.isolate): a range that is not its group's namesake leaves it; the
// namesake's siblings leave instead, each a group of its own.
func (w *world) isolate(r *Range) {
	for _, sp := range w.ranges {
		if LeavesOnIsolate(r, sp) {
			sp.Group = 0
		}
	}
}

// attach has r join anchor's group as the master's attach does: its
// replicas co-located onto the group's servers (as a merge's right range's
// are), then a span of the group, led by the group's leader.
func (w *world) attach(r, anchor *Range) {
	if anchor == nil {
		return
	}
	r.Replicas = append([]Replica(nil), anchor.Replicas...)
	r.Leader = anchor.Leader
	r.Group = anchor.ID
}

func (w *world) split(r *Range, o Op) uint64 {
	key := o.Key
	if key == "" {
		key = r.Start + "m" // a size split: the range picks its median
	}
	right := &Range{ID: w.nextID, TableID: r.TableID, Table: r.Table, Start: key, End: r.End,
		Replicas: append([]Replica(nil), r.Replicas...), Leader: r.Leader}
	if o.To != "" {
		right.Leader = o.To
	}
	if o.InGroup {
		right.Group = r.GroupID()
	}
	w.nextID++
	r.End = key
	// As in the master, the left half keeps its range id and with it the
	// last load report and trend its leader sent before the split (they
	// describe the whole old range, its bytes too) until the next report
	// (observe installs the half's); the right half has none yet.
	if r.Load != nil {
		if w.reported == nil {
			w.reported = map[uint64]*Load{}
		}
		w.reported[right.ID] = &Load{Bytes: r.Load.Bytes / 2}
		left := *r.Load
		left.Bytes = r.Load.Bytes - r.Load.Bytes/2
		w.reported[r.ID] = &left
	}
	w.ranges = append(w.ranges, right)
	return right.ID
}

func (w *world) merge(l, r *Range) {
	if r == nil {
		return
	}
	if l.GroupID() != r.GroupID() {
		w.isolate(r) // across groups, the right range goes alone
	}
	l.End = r.End
	// The merged range keeps the left part's report and trend until its
	// leader reports again (observe installs the merged figures).
	if l.Load != nil && r.Load != nil {
		if w.reported == nil {
			w.reported = map[uint64]*Load{}
		}
		w.reported[l.ID] = &Load{EntitiesPerSec: l.Load.EntitiesPerSec + r.Load.EntitiesPerSec, Bytes: l.Load.Bytes + r.Load.Bytes}
	}
	for i, x := range w.ranges {
		if x == r {
			w.ranges = append(w.ranges[:i], w.ranges[i+1:]...)
			break
		}
	}
}

// state prints the ranges and per-server leader load and counts; with
// zones, each range's zones (in replica order) and each server's.
func (w *world) state() string {
	var b strings.Builder
	load := map[string]float64{}
	leaders := map[string]int{}
	replicas := map[string]int{}
	for _, r := range w.ranges {
		var reps []string
		for _, rep := range r.Replicas {
			s := rep.Server
			if s == r.Leader {
				s += "*"
			}
			reps = append(reps, s)
			replicas[rep.Server]++
		}
		eps := r.entitiesPerSec()
		group := ""
		if r.GroupID() != r.ID {
			group = fmt.Sprintf(" group=%d", r.Group)
		}
		if r.Anchor {
			group += " anchor"
		}
		fmt.Fprintf(&b, "r%d [%s,%s) %s eps=%.0f%s%s\n", r.ID, r.Start, r.End, strings.Join(reps, " "), eps, group, w.zonesOf(r))
		load[r.Leader] += eps
		leaders[r.Leader]++
	}
	for _, s := range w.servers {
		fmt.Fprintf(&b, "server %s: leaders=%d replicas=%d leader_eps=%.0f", s.ID, leaders[s.ID], replicas[s.ID], load[s.ID])
		if d := s.Disk; d.Capacity > 0 {
			fmt.Fprintf(&b, " disk=%dM free (%s)", d.Available>>20, d.State())
		}
		if s.Zone != "" && !w.zoneEach {
			fmt.Fprintf(&b, " zone=%s", s.Zone)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// zonesOf renders the zones of r's replicas for state (" zones=A,A,B",
// "-" for a server that names none); "" when no server names one.
func (w *world) zonesOf(r *Range) string {
	zone := map[string]string{}
	named := false
	if w.zoneEach {
		return ""
	}
	for _, s := range w.servers {
		zone[s.ID] = s.Zone
		named = named || s.Zone != ""
	}
	if !named {
		return ""
	}
	var zs []string
	for _, rep := range r.Replicas {
		z := zone[rep.Server]
		if z == "" {
			z = "-"
		}
		zs = append(zs, z)
	}
	return " zones=" + strings.Join(zs, ",")
}
