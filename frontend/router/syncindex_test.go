package router

import (
	"context"
	"testing"
	"time"
)

func TestHeldTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pairs := []syncPair{{t0, 10}, {t0.Add(time.Second), 20}, {t0.Add(2 * time.Second), 30}}
	for _, tc := range []struct {
		applied uint64
		want    time.Time
	}{
		{9, time.Time{}}, // holds none: unknown
		{10, t0},
		{29, t0.Add(time.Second)}, // lagging: an older, honest time
		{30, t0.Add(2 * time.Second)},
		{99, t0.Add(2 * time.Second)},
	} {
		if got := heldTime(pairs, tc.applied); !got.Equal(tc.want) {
			t.Errorf("heldTime(applied %d) = %v, want %v", tc.applied, got, tc.want)
		}
	}
	if got := heldTime(nil, 5); !got.IsZero() {
		t.Errorf("heldTime(no pairs) = %v", got)
	}
}

func TestAddPair(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name  string
		pairs []syncPair
		add   syncPair
		want  []syncPair
	}{
		{"first", nil, syncPair{at(0), 5}, []syncPair{{at(0), 5}}},
		{"same index: later time replaces", []syncPair{{at(0), 5}}, syncPair{at(50), 5}, []syncPair{{at(50), 5}}},
		{"second kept", []syncPair{{at(0), 5}}, syncPair{at(50), 6}, []syncPair{{at(0), 5}, {at(50), 6}}},
		{"newest too close to the one before: replaced", []syncPair{{at(0), 5}, {at(50), 6}}, syncPair{at(100), 7},
			[]syncPair{{at(0), 5}, {at(100), 7}}},
		{"spaced: appended", []syncPair{{at(0), 5}, {at(300), 6}}, syncPair{at(400), 7},
			[]syncPair{{at(0), 5}, {at(300), 6}, {at(400), 7}}},
	} {
		got := addPair(append([]syncPair(nil), tc.pairs...), tc.add)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if !got[i].at.Equal(tc.want[i].at) || got[i].index != tc.want[i].index {
				t.Fatalf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
	}
	// The history is bounded, oldest dropped.
	var pairs []syncPair
	for i := range 3 * syncKeep {
		pairs = addPair(pairs, syncPair{at(i * 1000), uint64(i + 1)})
	}
	if len(pairs) != syncKeep || pairs[len(pairs)-1].index != 3*syncKeep || pairs[0].index != 2*syncKeep+1 {
		t.Fatalf("after %d pairs: %d kept, %v..%v", 3*syncKeep, len(pairs), pairs[0], pairs[len(pairs)-1])
	}
}

func TestStepWait(t *testing.T) {
	if got := stepWait(context.Background(), false); got != syncWait {
		t.Errorf("no deadline: %v, want %v", got, syncWait)
	}
	if got := stepWait(context.Background(), true); got != firstWait {
		t.Errorf("no deadline, first: %v, want %v", got, firstWait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	for _, first := range []bool{false, true} {
		if got := stepWait(ctx, first); got > 100*time.Millisecond || got <= 0 {
			t.Errorf("200ms left (first %v): %v, want at most half", first, got)
		}
	}
}
