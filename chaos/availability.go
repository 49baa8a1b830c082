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
