package chaos

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// Scans are the workload's queries: a scanner lists the table, or a
// PartitionKey range of it, with the SDK's pager and a small $top, so that
// every scan follows many continuations across ranges that split, merge
// and move under it while faults hit the servers. Each completed scan is
// checked (checkScan) against what the writers had been told when it
// began; a scan that fails mid-way is counted, not checked.

// noValue marks an attempted key whose value scans do not compare (the
// counters and registers change), and an entity returned without V.
const noValue = math.MinInt64

// errScanStopped ends a scan the end of the run cut short.
var errScanStopped = errors.New("scan: the workload stopped")

// confirmation is a key every page asked later whose span holds it must
// return: the workload never deletes.
type confirmation struct {
	key string // "pk/rk"
	how string // why it must be there, for the report
	// acked: its write was acknowledged (or setup made it), at at (after
	// the client saw the answer; confirmations are appended in at order).
	// Else a completed primary scan returned it: the secondary is not held
	// to it.
	acked bool
	at    time.Time
	// again: the key's acknowledgement after a completed scan had
	// confirmed it already; for the secondary alone (the primary holds
	// the key from its first confirmation on).
	again bool
}

// pkBounds is a scan's PartitionKey range (its $filter).
type pkBounds struct {
	lower, upper         string
	hasLower, hasUpper   bool
	lowerIncl, upperIncl bool
}

// holds reports whether pk lies in b.
func (b pkBounds) holds(pk string) bool {
	if b.hasLower && (pk < b.lower || (pk == b.lower && !b.lowerIncl)) {
		return false
	}
	return !b.hasUpper || pk < b.upper || (pk == b.upper && b.upperIncl)
}

// filter is b as an OData $filter ("" when unbounded).
func (b pkBounds) filter() string {
	var parts []string
	if b.hasLower {
		parts = append(parts, fmt.Sprintf("PartitionKey %s '%s'", map[bool]string{true: "ge", false: "gt"}[b.lowerIncl], b.lower))
	}
	if b.hasUpper {
		parts = append(parts, fmt.Sprintf("PartitionKey %s '%s'", map[bool]string{true: "le", false: "lt"}[b.upperIncl], b.upper))
	}
	return strings.Join(parts, " and ")
}

// scanPage is one page of a scan: the continuation it was asked with and
// the one it returned (raw tokens as the SDK saw them), which of the
// scan's entities it carried, and how many confirmations there were when
// it was asked for (w.confirmed[:confirmedAt]: each must be on the page
// if its key lies in the page's span).
type scanPage struct {
	askedPK, askedRK string
	nextPK, nextRK   string
	hasNext          bool
	first, n         int // s.ents[first : first+n]
	from, to         time.Duration
	confirmedAt      int
}

// scanEntity is one entity a scan returned.
type scanEntity struct {
	pk, rk string
	value  int64 // noValue when absent
	page   int
}

func (e scanEntity) key() string { return e.pk + "/" + e.rk }

// scanRec is one scan: how it was asked and what each page returned.
type scanRec struct {
	id, worker int
	// secondary: read from the read-access secondary endpoint; synced is
	// its LastSyncTime before the first page (since the workload began;
	// hasSync false: the stats gave none), up to which every acknowledged
	// write must be readable there.
	secondary bool
	synced    time.Duration
	hasSync   bool
	bounds    pkBounds
	top       int32
	sel       bool          // $select=PartitionKey,RowKey,V
	pause     time.Duration // between pages: a slow scan spans faults and reshapes
	started   time.Duration
	pages     []scanPage
	ents      []scanEntity
	required  int // keys checkScan required of it (present or missing)
}

// scanViolation is one finding of checkScan.
type scanViolation struct {
	kind   string // missing, duplicate, out of order, unknown, outside filter, wrong value, refused page
	key    string
	detail string
}

func (v scanViolation) String() string { return v.kind + " " + v.key + ": " + v.detail }

// keyLess orders entities as Azure returns them: PartitionKey, then RowKey.
func keyLess(apk, ark, bpk, brk string) bool {
	return apk < bpk || (apk == bpk && ark < brk)
}

func splitKey(k string) (pk, rk string) {
	pk, rk, _ = strings.Cut(k, "/")
	return pk, rk
}

// checkScan checks a completed scan: each entity once (duplicate), in
// key order (out of order), within its filter (outside filter), written by
// some attempt (unknown) with the value written (wrong value), and every
// confirmed key within the filter present (missing) if it was confirmed
// before the page whose span holds it was asked for (a page answers after
// every write acknowledged before it was asked, as Azure's queries do;
// required must hold the confirmations up to the last page's
// confirmedAt). attempted maps each key a write was sent for to its value
// (noValue: not compared).
func checkScan(s *scanRec, required []confirmation, attempted map[string]int64) []scanViolation {
	var out []scanViolation
	seen := make(map[string]int, len(s.ents))
	for i, e := range s.ents {
		k := e.key()
		if j, dup := seen[k]; dup {
			out = append(out, scanViolation{"duplicate", k, fmt.Sprintf("entity %d and %d: %s; %s", j, i, s.pageAt(j), s.pageAt(i))})
		} else {
			seen[k] = i
		}
		if p := s.ents[max(i-1, 0)]; i > 0 && keyLess(e.pk, e.rk, p.pk, p.rk) {
			out = append(out, scanViolation{"out of order", k, fmt.Sprintf("entity %d after %s: %s; %s", i, p.key(), s.pageAt(i-1), s.pageAt(i))})
		}
		if !s.bounds.holds(e.pk) {
			out = append(out, scanViolation{"outside filter", k, s.pageAt(i)})
		}
		v, ok := attempted[k]
		switch {
		case !ok:
			out = append(out, scanViolation{"unknown", k, "no write was sent for it; " + s.pageAt(i)})
		case v != noValue && e.value != noValue && e.value != v:
			out = append(out, scanViolation{"wrong value", k, fmt.Sprintf("V=%d, written %d; %s", e.value, v, s.pageAt(i))})
		}
	}
	out = append(out, s.missing(required, seen)...)
	for i := range out {
		out[i].detail = s.header() + ": " + out[i].detail
	}
	return out
}

// missing reports the required keys a scan should have returned: in its
// filter, and confirmed before the page whose span holds them was asked.
func (s *scanRec) missing(required []confirmation, seen map[string]int) []scanViolation {
	type pos struct{ pk, rk string }
	starts := make([]pos, len(s.pages)) // where each page began; page 0 at the start
	for p, pg := range s.pages[min(1, len(s.pages)):] {
		starts[p+1] = pos{decodeTok(pg.askedPK), decodeTok(pg.askedRK)}
	}
	var out []scanViolation
	for j, c := range required {
		pk, rk := splitKey(c.key)
		if !s.bounds.holds(pk) || (s.secondary && !c.acked) || (!s.secondary && c.again) {
			continue
		}
		// The last page that began at or before the key.
		p := sort.Search(len(starts), func(i int) bool { return keyLess(pk, rk, starts[i].pk, starts[i].rk) }) - 1
		if p < 0 || j >= s.pages[p].confirmedAt {
			continue // confirmed after its page was asked for (or no page)
		}
		s.required++
		if _, ok := seen[c.key]; ok {
			continue
		}
		out = append(out, scanViolation{"missing", c.key, fmt.Sprintf("%s, before page %d was asked, not returned; %s", c.how, p, s.around(pk, rk))})
	}
	return out
}

// header names the scan for a report.
func (s *scanRec) header() string {
	where := "primary"
	if s.secondary {
		where = "secondary, LastSyncTime none"
		if s.hasSync {
			where = fmt.Sprintf("secondary, LastSyncTime t+%.3fs", s.synced.Seconds())
		}
	}
	return fmt.Sprintf("scan %d (scanner %d, %s, began t+%.3fs, filter %q, $top %d, select %v, pause %v, %d pages, %d entities)",
		s.id, s.worker, where, s.started.Seconds(), s.bounds.filter(), s.top, s.sel, s.pause, len(s.pages), len(s.ents))
}

// pageAt describes the page that carried entity i.
func (s *scanRec) pageAt(i int) string {
	if i < 0 || i >= len(s.ents) {
		return "no such entity"
	}
	return s.describePage(s.ents[i].page)
}

// describePage says what page p was asked and answered.
func (s *scanRec) describePage(p int) string {
	if p < 0 || p >= len(s.pages) {
		return "no such page"
	}
	pg := s.pages[p]
	b := fmt.Sprintf("page %d (t+%.3f-%.3fs) asked at %s returned %d", p, pg.from.Seconds(), pg.to.Seconds(), tokenPos(pg.askedPK, pg.askedRK), pg.n)
	if pg.n > 0 {
		b += fmt.Sprintf(" [%s .. %s]", s.ents[pg.first].key(), s.ents[pg.first+pg.n-1].key())
	}
	if pg.hasNext {
		return b + " next " + tokenPos(pg.nextPK, pg.nextRK)
	}
	return b + ", last"
}

// around describes the pages on either side of where pk/rk belonged.
func (s *scanRec) around(pk, rk string) string {
	i := 0
	for i < len(s.ents) && keyLess(s.ents[i].pk, s.ents[i].rk, pk, rk) {
		i++
	}
	switch {
	case len(s.ents) == 0:
		return "the scan returned nothing"
	case i == 0:
		return "before " + s.ents[0].key() + " of " + s.pageAt(0)
	case i == len(s.ents):
		return "after " + s.ents[i-1].key() + " of " + s.pageAt(i-1)
	case s.ents[i-1].page == s.ents[i].page:
		return "between " + s.ents[i-1].key() + " and " + s.ents[i].key() + " of " + s.pageAt(i)
	}
	return "after " + s.ents[i-1].key() + " of " + s.pageAt(i-1) + "; before " + s.ents[i].key() + " of " + s.pageAt(i)
}

// tokenPos shows a continuation as its tokens and the keys they decode to.
func tokenPos(pk, rk string) string {
	if pk == "" && rk == "" {
		return "the start"
	}
	return fmt.Sprintf("%q/%q (%s/%s)", pk, rk, decodeTok(pk), decodeTok(rk))
}

// decodeTok decodes a continuation token of the front-end's shape
// ("1!<n>!<base64, '-' for padding>"); anything else is shown as is.
func decodeTok(tok string) string {
	rest, ok := strings.CutPrefix(tok, "1!")
	if !ok {
		return tok
	}
	_, b64, ok := strings.Cut(rest, "!")
	if !ok {
		return tok
	}
	raw, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(b64, "-", "="))
	if err != nil {
		return tok
	}
	return string(raw)
}

// scanStats is what the scanners counted.
type scanStats struct {
	done, failed, pages, entities int
	secondary                     int           // of done
	required                      int           // keys required of the scans done
	noSync                        int           // secondary scans without a LastSyncTime
	maxLag                        time.Duration // the most a secondary scan began after its LastSyncTime
	violations                    []scanViolation
	errors                        []string // the first failures, for the log
}

// scanBounds are the candidate PartitionKey bounds of filtered scans:
// key-space edges, keys of the workload's partitions, split points and
// keys between them.
var scanBounds = []string{"cnt", "cnt2", "p", "p00", "p03", "p05x", "p07", "p08", "p1", "p12", "p15", "q", "reg", "reg2"}

// newScan picks a scan's shape: $top in 50..200, half of them filtered by
// a PartitionKey range, a third with $select. Scanner 0's scans follow
// their continuations at once (a whole-table scan takes about a second);
// scanner 1 pauses 20-150 ms between pages, so its continuations outlive
// splits, merges, moves and faults; scanner 2 reads the secondary.
func newScan(rng *rand.Rand, worker int) *scanRec {
	s := &scanRec{worker: worker, top: int32(50 + rng.Intn(151)), sel: rng.Intn(3) == 0, secondary: worker == 2}
	if worker == 1 {
		s.pause = time.Duration(20+rng.Intn(131)) * time.Millisecond
	}
	if rng.Intn(2) == 0 {
		return s
	}
	a, b := scanBounds[rng.Intn(len(scanBounds))], scanBounds[rng.Intn(len(scanBounds))]
	if a > b {
		a, b = b, a
	}
	s.bounds = pkBounds{lower: a, upper: b, hasLower: rng.Intn(5) != 0, hasUpper: rng.Intn(5) != 0,
		lowerIncl: rng.Intn(2) == 0, upperIncl: rng.Intn(2) == 0}
	return s
}

// scanLoop runs scans until the workload stops.
func (w *workload) scanLoop(worker int) {
	rng := rand.New(rand.NewSource(time.Now().UnixNano() + int64(worker)))
	for !w.stopped() {
		s := newScan(rng, worker)
		w.mu.Lock()
		w.scanSeq++
		s.id, s.started = w.scanSeq, time.Since(w.start)
		w.mu.Unlock()
		err := w.runScan(s)
		if errors.Is(err, errScanStopped) {
			return
		}
		w.endScan(s, err)
		time.Sleep(time.Duration(300+rng.Intn(500)) * time.Millisecond)
	}
}

// runScan follows the pager to the end, recording every page.
func (w *workload) runScan(s *scanRec) error {
	opts := &aztables.ListEntitiesOptions{Top: &s.top}
	if f := s.bounds.filter(); f != "" {
		opts.Filter = &f
	}
	if s.sel {
		opts.Select = to.Ptr("PartitionKey,RowKey,V")
	}
	tc, required, err := w.scanFrom(s)
	if err != nil {
		return err
	}
	pager := tc.NewListEntitiesPager(opts)
	var askedPK, askedRK string
	for pager.More() {
		if len(s.pages) > 0 {
			time.Sleep(s.pause)
		}
		if w.stopped() {
			return errScanStopped
		}
		pg := scanPage{askedPK: askedPK, askedRK: askedRK, first: len(s.ents)}
		w.mu.Lock()
		pg.confirmedAt, pg.from = required(), time.Since(w.start)
		w.mu.Unlock()
		ctx, cancel := opCtx()
		resp, err := pager.NextPage(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("page %d, asked at %s: %w", len(s.pages), tokenPos(askedPK, askedRK), err)
		}
		pg.to = time.Since(w.start)
		for _, raw := range resp.Entities {
			var e map[string]any
			if err := json.Unmarshal(raw, &e); err != nil {
				return fmt.Errorf("page %d: %w", len(s.pages), err)
			}
			v, ok := parseInt(e["V"])
			if !ok {
				v = noValue
			}
			s.ents = append(s.ents, scanEntity{pk: fmt.Sprint(e["PartitionKey"]), rk: fmt.Sprint(e["RowKey"]), value: v, page: len(s.pages)})
		}
		pg.n = len(s.ents) - pg.first
		if resp.NextPartitionKey != nil {
			pg.hasNext, pg.nextPK = true, *resp.NextPartitionKey
			if resp.NextRowKey != nil {
				pg.nextRK = *resp.NextRowKey
			}
		}
		askedPK, askedRK = pg.nextPK, pg.nextRK
		s.pages = append(s.pages, pg)
	}
	return nil
}

// scanFrom returns the client of s's endpoint and a function (called with
// w.mu held, before each page) saying how many confirmations the page must
// honour: on the primary every confirmation made so far; on the secondary
// those acknowledged at or before its LastSyncTime, read here once (whole
// seconds, so a little earlier than the time it stands for).
func (w *workload) scanFrom(s *scanRec) (*aztables.Client, func() int, error) {
	if !s.secondary {
		return w.tc, func() int { return len(w.confirmed) }, nil
	}
	ctx, cancel := opCtx()
	st, err := w.sec.GetStatistics(ctx, nil)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("service stats: %w", err)
	}
	if st.GeoReplication == nil || st.GeoReplication.LastSyncTime == nil {
		return w.sec.NewClient(table), func() int { return 0 }, nil
	}
	synced := *st.GeoReplication.LastSyncTime
	s.synced, s.hasSync = synced.Sub(w.start), true
	w.mu.Lock()
	n := sort.Search(len(w.confirmed), func(i int) bool { return w.confirmed[i].at.After(synced) })
	w.mu.Unlock()
	return w.sec.NewClient(table), func() int { return n }, nil
}

// endScan counts a scan and checks a completed one; what it returned, every
// scan that begins later must return too.
func (w *workload) endScan(s *scanRec, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.scans.failed++
		if len(w.scans.errors) < 5 {
			w.scans.errors = append(w.scans.errors, s.header()+": "+err.Error())
		}
		if refusedPage(err) {
			// The table is never deleted and its pages are asked with
			// the tokens the service gave: a client error answering one
			// (a continuation the front-end cannot follow across a
			// reshape, say) is the service's fault, which counting the
			// scan as failed would hide.
			w.scans.violations = append(w.scans.violations, scanViolation{kind: "refused page",
				detail: fmt.Sprintf("%s: after %d pages: %v", s.header(), len(s.pages), err)})
		}
		return
	}
	w.scans.done++
	if s.secondary {
		w.scans.secondary++
		if !s.hasSync {
			w.scans.noSync++
		} else {
			w.scans.maxLag = max(w.scans.maxLag, s.started-s.synced)
		}
	}
	w.scans.pages += len(s.pages)
	w.scans.entities += len(s.ents)
	required := w.confirmed[:0]
	if n := len(s.pages); n > 0 {
		required = w.confirmed[:s.pages[n-1].confirmedAt]
	}
	w.scans.violations = append(w.scans.violations, checkScan(s, required, w.attempted)...)
	w.scans.required += s.required
	if s.secondary {
		return
	}
	how := fmt.Sprintf("returned by scan %d (began t+%.3fs)", s.id, s.started.Seconds())
	for _, e := range s.ents {
		if _, ok := w.attempted[e.key()]; ok {
			w.confirmLocked(e.key(), how, false)
		}
	}
}

// attemptKeys notes the entities a write is about to be sent for.
func (w *workload) attemptKeys(keys []string, vals []int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, k := range keys {
		w.attempted[k] = vals[i]
	}
}

// confirmLocked makes k required of every page asked from now on (w.mu
// held); acked: its write was acknowledged.
func (w *workload) confirmLocked(k, how string, acked bool) {
	was, ok := w.isConfirmed[k]
	if ok && (was || !acked) {
		return
	}
	// First confirmed, or acknowledged after a scan returned it: the
	// secondary is held to acknowledged writes only, so it needs this.
	w.isConfirmed[k] = acked
	w.confirmed = append(w.confirmed, confirmation{key: k, how: how, acked: acked, at: time.Now(), again: ok})
}

// acknowledgedLocked confirms keys whose write was just acknowledged.
func (w *workload) acknowledgedLocked(keys ...string) {
	how := fmt.Sprintf("acknowledged t+%.3fs", time.Since(w.start).Seconds())
	for _, k := range keys {
		w.confirmLocked(k, how, true)
	}
}

// scanResults copies the scanners' counts into res, logs their first
// failures, and makes each violation a problem: the first 5 in full in
// the problems, the first 20 in the log, every one in scan-violations.txt
// of the seed's directory.
func scanResults(res *Result, w *workload, o Options) {
	w.mu.Lock()
	st := w.scans
	w.mu.Unlock()
	res.Scans, res.ScansFailed, res.ScanPages, res.ScanEntities = st.done, st.failed, st.pages, st.entities
	res.ScansSecondary, res.ScanRequired, res.ScansNoSync, res.SecondaryLag = st.secondary, st.required, st.noSync, st.maxLag
	res.ScanViolations = len(st.violations)
	for _, e := range st.errors {
		o.Logf("seed %d: failed %s", o.Seed, e)
	}
	var all strings.Builder
	for i, v := range st.violations {
		if i < 20 {
			o.Logf("seed %d: scan violation: %s", o.Seed, v)
		}
		fmt.Fprintln(&all, v)
		if i < 5 {
			res.problem("scan: %s", v)
		}
	}
	if n := len(st.violations); n > 5 {
		res.problem("scan: %d more violations (scan-violations.txt)", n-5)
	}
	if all.Len() > 0 && o.Dir != "" {
		os.WriteFile(filepath.Join(o.Dir, "scan-violations.txt"), []byte(all.String()), 0o644)
	}
}

// refusedPage reports whether a scan's error is a client error (4xx) that
// no fault explains: not a timeout or throttling (408, 429), which the
// faults cause and the SDK retries.
func refusedPage(err error) bool {
	st := statusOf(err)
	return st >= 400 && st < 500 && st != 408 && st != 429
}
