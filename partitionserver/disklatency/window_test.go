package disklatency

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at builds samples ending at t0+offset with the given durations.
func at(offset time.Duration, ds ...time.Duration) []Sample {
	out := make([]Sample, len(ds))
	for i, d := range ds {
		out[i] = Sample{At: t0.Add(offset), D: d}
	}
	return out
}

func repeat(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	now := t0.Add(20 * time.Second)
	span := 10 * time.Second
	tests := []struct {
		name    string
		samples []Sample
		want    Summary
	}{
		{"empty", nil, Summary{}},
		{"one", at(15*time.Second, 3*ms), Summary{Commits: 1, Median: 3 * ms}},
		{"odd count: the middle", at(15*time.Second, 9*ms, 1*ms, 5*ms), Summary{Commits: 3, Median: 5 * ms}},
		{"even count: the lower middle", at(15*time.Second, 1*ms, 2*ms, 150*ms, 160*ms), Summary{Commits: 4, Median: 2 * ms}},
		// One hiccup among healthy commits does not move the median (a
		// maximum would read 900 ms).
		{"one hiccup", append(at(12*time.Second, repeat(20, 2*ms)...), at(13*time.Second, 900*ms)...), Summary{Commits: 21, Median: 2 * ms}},
		// A slow disk: most commits take the fault's 150 ms.
		{"persistently slow", append(at(12*time.Second, repeat(30, 152*ms)...), at(11*time.Second, 1*ms, 2*ms)...), Summary{Commits: 32, Median: 152 * ms}},
		// Older than the span, or (a clock step) in the future: left out.
		{"outside the window", append(at(5*time.Second, repeat(50, 200*ms)...), append(at(25*time.Second, 300*ms), at(19*time.Second, 4*ms)...)...), Summary{Commits: 1, Median: 4 * ms}},
		{"exactly span old: out", append(at(10*time.Second, 200*ms), at(10*time.Second+ms, 3*ms)...), Summary{Commits: 1, Median: 3 * ms}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Summarize(tc.samples, now, span); got != tc.want {
				t.Fatalf("Summarize = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestWindowKeepsTheLatest(t *testing.T) {
	w := New(time.Minute)
	// Slow commits first, then more healthy ones than the window keeps:
	// only the latest count.
	for i := 0; i < 100; i++ {
		w.Observe(t0, 200*time.Millisecond)
	}
	for i := 0; i < capacity; i++ {
		w.Observe(t0.Add(time.Second), time.Millisecond)
	}
	if got := w.Summary(t0.Add(2 * time.Second)); got != (Summary{Commits: capacity, Median: time.Millisecond}) {
		t.Fatalf("Summary = %+v, want %d commits of 1ms", got, capacity)
	}
	if got := New(0).Span(); got != DefaultSpan {
		t.Fatalf("New(0).Span() = %v, want %v", got, DefaultSpan)
	}
}
