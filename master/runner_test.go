package master

import (
	"context"
	"testing"
	"time"

	"tablestore/master/scheduler"
)

// TestRunnerRecentDone: a finished operation stays in the recent list with
// when it finished (Op.Done), which the scheduler measures a reshaped
// range's stale-report window from (a merge that co-located replicas first
// can outlast that window counted from its start).
func TestRunnerRecentDone(t *testing.T) {
	release := make(chan struct{})
	r := newRunner(context.Background(), 1, time.Minute, time.Minute, func(ctx context.Context, o scheduler.Op) error {
		<-release
		return nil
	})
	start := time.Now()
	if !r.start(scheduler.Op{Kind: scheduler.Merge, Range: 1, Right: 2, At: start}) {
		t.Fatal("not started")
	}
	running, recent := r.state(time.Now())
	if len(running) == 0 || len(recent) != 1 || !recent[0].Done.IsZero() {
		t.Fatalf("while running: running %v, recent %v (want Done unset)", running, recent)
	}
	close(release)
	r.wg.Wait()
	_, recent = r.state(time.Now())
	if len(recent) != 1 || recent[0].Done.Before(start) {
		t.Fatalf("after it finished: recent %v, want one with Done set", recent)
	}
	if recent[0].Failed {
		t.Fatalf("a successful operation marked failed: %v", recent[0])
	}
	// Kept for the window from when it finished, not from its start.
	if _, recent = r.state(recent[0].Done.Add(time.Minute - time.Millisecond)); len(recent) != 1 {
		t.Fatalf("pruned before the window from Done passed: %v", recent)
	}
}

// TestRunnerRecentFailed: a failed operation is marked so in the recent
// list (split-size backs off a range whose size split failed).
func TestRunnerRecentFailed(t *testing.T) {
	r := newRunner(context.Background(), 1, time.Minute, time.Minute, func(ctx context.Context, o scheduler.Op) error {
		return ErrBadCommand
	})
	if !r.start(scheduler.Op{Kind: scheduler.Split, Range: 1, At: time.Now()}) {
		t.Fatal("not started")
	}
	r.wg.Wait()
	if _, recent := r.state(time.Now()); len(recent) != 1 || !recent[0].Failed || recent[0].Done.IsZero() {
		t.Fatalf("recent %v, want one failed and done", recent)
	}
}

// TestRunnerRecord: an operation run outside the runner (an operator's
// split or merge) is in the recent list, done and failed as told, so the
// scheduler's windows after a split or merge apply to it.
func TestRunnerRecord(t *testing.T) {
	r := newRunner(context.Background(), 1, time.Minute, time.Minute, nil)
	start := time.Now()
	r.record(scheduler.Op{Kind: scheduler.Split, Range: 3, Key: "k", At: start}, start.Add(time.Second), nil)
	r.record(scheduler.Op{Kind: scheduler.Merge, Range: 4, Right: 5, At: start}, start.Add(time.Second), ErrBadCommand)
	_, recent := r.state(start.Add(time.Second))
	if len(recent) != 2 || recent[0].Range != 3 || recent[0].Failed || !recent[0].Done.Equal(start.Add(time.Second)) ||
		recent[1].Right != 5 || !recent[1].Failed {
		t.Fatalf("recent %+v", recent)
	}
}
