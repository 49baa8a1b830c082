package chaos

import (
	"sort"
	"time"
)

// The availability target counts only the time in which a majority
// of a range's replicas and of the masters is up ("election plus
// re-routing"); a window in which two of a range's three replicas were
// killed, paused or cut off is outside it. The harness records when each
// role was impaired and where each range's replicas were, and this file
// decides, as a pure function of those records, how much of each write gap
// fell while a majority was up.

// impairment flags: a role is impaired while any of them is set.
const (
	flagDown     = "down"     // not running, or restarted and not yet listening
	flagStopped  = "stopped"  // SIGSTOP
	flagIsolated = "isolated" // cut off from every other role
)

// roleEvent sets or clears one impairment flag of a role at a time since
// the workload started.
type roleEvent struct {
	at   time.Duration
	role string
	flag string
	on   bool
}

// span is one range's key interval [start, end) ("" end: no upper bound)
// and the servers holding its replicas.
type span struct {
	start, end string
	servers    []string
}

// placement is the table's ranges as the master's map showed them at a time.
type placement struct {
	at     time.Duration
	ranges []span
	// skewed are the servers the map said were clock-skewed (clockNotes).
	skewed []string
}

// writeGap is a window without a successful write to key.
type writeGap struct {
	key      string
	from, to time.Duration
}

// recordGap is the shortest write gap the workload keeps for the
// majority-up evaluation (shorter ones cannot be the worst).
const recordGap = 500 * time.Millisecond

// gapStep is the resolution of the majority check inside a gap.
const gapStep = 20 * time.Millisecond

// majorityUpPart returns the longest part of g during which the range
// holding g.key had fewer than two impaired replicas and fewer than two
// masters were impaired. Before the first placement the first one is used.
func majorityUpPart(g writeGap, events []roleEvent, places []placement, masters []string) time.Duration {
	var longest, run time.Duration
	for t := g.from; t < g.to; t += gapStep {
		step := min(gapStep, g.to-t)
		if majorityUp(g.key, t, events, places, masters) {
			run += step
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

// majorityUp reports whether key's range and the masters had a majority
// up at time at.
func majorityUp(key string, at time.Duration, events []roleEvent, places []placement, masters []string) bool {
	impaired := impairedAt(at, events)
	down := 0
	for _, m := range masters {
		if impaired[m] {
			down++
		}
	}
	if 2*down >= len(masters) && len(masters) > 0 {
		return false
	}
	sp, ok := spanAt(key, at, places)
	if !ok {
		return true
	}
	down = 0
	for _, s := range sp.servers {
		if impaired[s] {
			down++
		}
	}
	return 2*down < len(sp.servers)
}

// impairedAt replays events (sorted by time) up to at.
func impairedAt(at time.Duration, events []roleEvent) map[string]bool {
	flags := map[string]map[string]bool{}
	for _, e := range events {
		if e.at > at {
			break
		}
		if flags[e.role] == nil {
			flags[e.role] = map[string]bool{}
		}
		flags[e.role][e.flag] = e.on
	}
	out := map[string]bool{}
	for r, fs := range flags {
		for _, on := range fs {
			out[r] = out[r] || on
		}
	}
	return out
}

// spanAt finds key's range in the last placement taken at or before at.
func spanAt(key string, at time.Duration, places []placement) (span, bool) {
	if len(places) == 0 {
		return span{}, false
	}
	i := sort.Search(len(places), func(i int) bool { return places[i].at > at })
	p := places[max(0, i-1)]
	for _, s := range p.ranges {
		if key >= s.start && (s.end == "" || key < s.end) {
			return s, true
		}
	}
	return span{}, false
}

// The workload's writers are sequential and each walks over many keys: an
// insert writer writes p00, p05, p10, ... in turn. While one range is
// unavailable every writer soon waits on it, and no write to any other key
// is even attempted: the window between two successful writes to a key on
// a healthy range then holds the other range's outage (chaos seed 69: p06,
// on a range led throughout, went 3.4 s without a write while the writers
// waited on range 4, whose leader was killed). The figure is about
// a range that does not take writes, so a key's gap is counted from the
// first attempt to write it after its last successful write (waits): the
// time a client that wanted to write the key waited. A failed attempt
// leaves the window open until the next success.

// waits tracks, per key, the writes in flight and since when some write
// has been wanted without a success.
type waits struct {
	pending map[string]int
	since   map[string]time.Duration
}

func newWaits() *waits {
	return &waits{pending: map[string]int{}, since: map[string]time.Duration{}}
}

// begin notes an attempt to write key starting at at.
func (w *waits) begin(key string, at time.Duration) {
	w.pending[key]++
	if _, ok := w.since[key]; !ok {
		w.since[key] = at
	}
}

// end notes the end of an attempt at at; a success closes the window and
// returns it (attempts still in flight open the next one at once).
func (w *waits) end(key string, at time.Duration, ok bool) (writeGap, bool) {
	w.pending[key]--
	if !ok {
		return writeGap{}, false
	}
	g := writeGap{key: key, from: w.since[key], to: at}
	if w.pending[key] > 0 {
		w.since[key] = at
	} else {
		delete(w.since, key)
	}
	return g, true
}
