package router

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/rpcerr"
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
	// A deadline far below syncWait's and firstWait's halves: at most half
	// of what is left, however long the test pauses before asking (up to
	// the whole minute).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	short, cancel2 := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel2()
	for _, first := range []bool{false, true} {
		if got := stepWait(short, first); got > 200*time.Millisecond || got < 0 {
			t.Errorf("400ms left (first %v): %v, want at most half and not negative", first, got)
		}
		if got, want := stepWait(ctx, first), map[bool]time.Duration{false: syncWait, true: firstWait}[first]; got != want {
			t.Errorf("a minute left (first %v): %v, want %v", first, got, want)
		}
	}
	past, cancel3 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel3()
	if got := stepWait(past, true); got != 0 {
		t.Errorf("deadline passed: %v, want 0", got)
	}
}

func TestWaitMs(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want uint32
	}{
		{-time.Second, 0}, // would wrap to ~49 days as a plain uint32 conversion
		{0, 0},
		{time.Millisecond - 1, 0},
		{300 * time.Millisecond, 300},
		{math.MaxInt64, math.MaxUint32},
	} {
		if got := waitMs(tc.d); got != tc.want {
			t.Errorf("waitMs(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestCombineAnswers(t *testing.T) {
	const gen, group = 3, 7
	unavailable := rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "down", nil)
	notFound := rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "not hosted", nil)
	unimplemented := status.Error(codes.Unimplemented, "method AppliedIndex not implemented")
	ok := func(s string, applied uint64) replicaAnswer {
		return replicaAnswer{server: s, applied: applied, generation: gen}
	}
	failed := func(s string, err error) replicaAnswer { return replicaAnswer{server: s, err: err} }
	for _, tc := range []struct {
		name       string
		answers    []replicaAnswer
		remembered map[string]uint64
		want       uint64
		verdict    syncVerdict
	}{
		{"all answer: the least", []replicaAnswer{ok("a", 30), ok("b", 20), ok("c", 25)}, nil, 20, syncHeld},
		{"unanswered counts with what it reported", []replicaAnswer{ok("a", 30), failed("b", unavailable), ok("c", 25)},
			map[string]uint64{"b": 12}, 12, syncHeld},
		{"unanswered with nothing reported: unknown", []replicaAnswer{ok("a", 30), failed("b", unavailable), ok("c", 25)},
			nil, 0, syncUnknown},
		{"not hosted yet (moved in) with nothing reported: unknown", []replicaAnswer{ok("a", 30), ok("b", 30), failed("d", notFound)},
			map[string]uint64{"a": 30, "b": 30}, 0, syncUnknown},
		{"old server: unknown", []replicaAnswer{ok("a", 30), ok("b", 30), failed("c", unimplemented)}, nil, 0, syncUnknown},
		{"old server, even with a remembered index: unknown", []replicaAnswer{ok("a", 30), failed("c", unimplemented)},
			map[string]uint64{"c": 30}, 0, syncUnknown},
		{"every old server: unknown, not failed", []replicaAnswer{failed("a", unimplemented), failed("b", unimplemented)}, nil, 0, syncUnknown},
		{"newer generation (a split unseen): stale", []replicaAnswer{ok("a", 30), {server: "b", applied: 31, generation: gen + 1}}, nil, 0, syncStale},
		{"older generation (change not applied yet) still counts", []replicaAnswer{ok("a", 30), {server: "b", applied: 28, generation: gen - 1}}, nil, 28, syncHeld},
		{"older generation, same group said: counts", []replicaAnswer{ok("a", 30), {server: "b", applied: 28, generation: gen - 1, group: group}}, nil, 28, syncHeld},
		// The replica has not applied the detach that took the range out
		// of group 1 into its own group 7: its 516 counts entries of group
		// 1's log, not of 7's (chaos seed 2460).
		{"older generation in another group's log: unknown", []replicaAnswer{ok("a", 30), {server: "b", applied: 516, generation: gen - 1, group: 1}}, nil, 0, syncUnknown},
		{"every replica not hosting: stale", []replicaAnswer{failed("a", notFound), failed("b", notFound)}, nil, 0, syncStale},
		{"none answers, nothing reported: failed", []replicaAnswer{failed("a", unavailable), failed("b", unavailable)}, nil, 0, syncFailed},
		{"none answers, all reported before: held", []replicaAnswer{failed("a", unavailable), failed("b", unavailable)},
			map[string]uint64{"a": 9, "b": 7}, 7, syncHeld},
		{"none answers, one reported before: unknown", []replicaAnswer{failed("a", unavailable), failed("b", unavailable)},
			map[string]uint64{"a": 9}, 0, syncUnknown},
		{"no replica: failed", nil, nil, 0, syncFailed},
	} {
		got, verdict, err := combineAnswers(gen, group, tc.answers, tc.remembered)
		if verdict != tc.verdict || got != tc.want {
			t.Errorf("%s: (%d, verdict %d, %v), want (%d, verdict %d)", tc.name, got, verdict, err, tc.want, tc.verdict)
		}
		if (verdict == syncFailed) != (err != nil) {
			t.Errorf("%s: verdict %d with error %v", tc.name, verdict, err)
		}
	}
}

func TestRememberKeepsHighestPerGeneration(t *testing.T) {
	var rs rangeSync
	got := rs.remember(3, 7, []replicaAnswer{{server: "a", applied: 10}, {server: "b", applied: 8}})
	if got["a"] != 10 || got["b"] != 8 || len(got) != 2 {
		t.Fatalf("first: %v", got)
	}
	// A lower report (cannot happen: the state file only grows) does not
	// lower it; a failed answer changes nothing.
	got = rs.remember(3, 7, []replicaAnswer{{server: "a", applied: 7}, {server: "b", err: errors.New("down")}})
	if got["a"] != 10 || got["b"] != 8 {
		t.Fatalf("second: %v", got)
	}
	// A new generation (a move): what was reported for the old one does
	// not count for it.
	got = rs.remember(4, 7, []replicaAnswer{{server: "a", applied: 12}, {server: "b", err: errors.New("down")}})
	if got["a"] != 12 || len(got) != 1 {
		t.Fatalf("new generation: %v", got)
	}
	// An index of another group's log (a replica that has not applied a
	// detach yet) is not kept: a later probe it does not answer would
	// count with it.
	got = rs.remember(4, 7, []replicaAnswer{{server: "b", applied: 516, generation: 3, group: 1}})
	if _, ok := got["b"]; ok || got["a"] != 12 {
		t.Fatalf("another group's log: %v", got)
	}
}
