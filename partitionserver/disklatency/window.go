package disklatency

import (
	"slices"
	"sync"
	"time"
)

// DefaultSpan is the window the summaries cover.
const DefaultSpan = 10 * time.Second

// capacity bounds the samples kept: at most this many of the latest
// commits are summarised (the Raft log may sync thousands of times a
// second; the state file commits ~10 times a second, so its window is
// the whole span).
const capacity = 1024

// Sample is one commit: when it ended and how long it took.
type Sample struct {
	At time.Time
	D  time.Duration
}

// Summary is what the heartbeat reports of one kind of commit.
type Summary struct {
	// Commits is how many commits the window held.
	Commits int
	// Median is their lower median (at least half the commits took this
	// long or longer); zero without commits.
	Median time.Duration
}

// Summarize is the summary of the samples that ended within span before
// now. It is pure.
func Summarize(samples []Sample, now time.Time, span time.Duration) Summary {
	ds := make([]time.Duration, 0, len(samples))
	for _, s := range samples {
		if age := now.Sub(s.At); age >= 0 && age < span {
			ds = append(ds, s.D)
		}
	}
	if len(ds) == 0 {
		return Summary{}
	}
	slices.Sort(ds)
	return Summary{Commits: len(ds), Median: ds[(len(ds)-1)/2]}
}

// Window keeps the latest commit durations. The zero value is not ready:
// use New. Safe for concurrent use.
type Window struct {
	span time.Duration
	mu   sync.Mutex
	ring []Sample
	next int
}

// New returns a window summarising the last span (DefaultSpan when span
// is not positive).
func New(span time.Duration) *Window {
	if span <= 0 {
		span = DefaultSpan
	}
	return &Window{span: span, ring: make([]Sample, 0, capacity)}
}

// Span is the time the summaries cover.
func (w *Window) Span() time.Duration { return w.span }

// Observe records a commit that ended at at and took d.
func (w *Window) Observe(at time.Time, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ring) < cap(w.ring) {
		w.ring = append(w.ring, Sample{At: at, D: d})
		return
	}
	w.ring[w.next] = Sample{At: at, D: d}
	w.next = (w.next + 1) % len(w.ring)
}

// Summary summarises the commits of the last span before now.
// The samples are copied under the lock and sorted outside it: Observe
// runs on the commit paths.
func (w *Window) Summary(now time.Time) Summary {
	w.mu.Lock()
	samples := slices.Clone(w.ring)
	w.mu.Unlock()
	return Summarize(samples, now, w.span)
}
