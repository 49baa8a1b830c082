package master

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// replicaScript answers a replica's applied index as a function of the
// time since the wait began.
type replicaScript func(elapsed time.Duration) (uint64, error)

func applied(n uint64) replicaScript {
	return func(time.Duration) (uint64, error) { return n, nil }
}

// climbing applies one entry every step from base.
func climbing(base uint64, step time.Duration) replicaScript {
	return func(e time.Duration) (uint64, error) { return base + uint64(e/step), nil }
}

var errDown = errors.New("connection refused")

func down(time.Duration) (uint64, error) { return 0, errDown }

func scripted(scripts map[string]replicaScript) ([]string, func(context.Context, string) (uint64, error)) {
	var mu sync.Mutex
	var start time.Time
	var servers []string
	for s := range scripts {
		servers = append(servers, s)
	}
	return servers, func(_ context.Context, server string) (uint64, error) {
		mu.Lock()
		if start.IsZero() {
			start = time.Now()
		}
		e := time.Since(start)
		mu.Unlock()
		return scripts[server](e)
	}
}

// TestWaitFreeze: the bounded wait after a merge's freeze (index 10)
// returns once every replica applied it, gives up on a replica that
// applies nothing for mergeFreezeWait or does not answer, and waits up to
// mergeFreezeWaitMax for one still catching up. Outcomes only: no upper
// bound on the time taken (loaded CI machines).
func TestWaitFreeze(t *testing.T) {
	tests := []struct {
		name    string
		scripts map[string]replicaScript
		ok      bool
		atLeast time.Duration
	}{
		{"every replica applied the freeze", map[string]replicaScript{"a": applied(10), "b": applied(12), "c": applied(10)}, true, 0},
		{"a replica stalled short of it", map[string]replicaScript{"a": applied(10), "b": applied(9), "c": applied(10)}, false, mergeFreezeWait},
		{"a replica does not answer", map[string]replicaScript{"a": applied(10), "b": down, "c": applied(10)}, false, mergeFreezeWait},
		{"a replica catching up in time", map[string]replicaScript{"a": applied(10), "b": climbing(4, 250*time.Millisecond), "c": applied(10)}, true, 1250 * time.Millisecond},
		{"a replica catching up too slowly", map[string]replicaScript{"a": applied(10), "b": climbing(0, 400*time.Millisecond), "c": applied(10)}, false, mergeFreezeWaitMax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			servers, ask := scripted(tt.scripts)
			start := time.Now()
			err := waitFreeze(context.Background(), servers, 10, ask)
			took := time.Since(start)
			if (err == nil) != tt.ok {
				t.Fatalf("waitFreeze = %v after %v, want ok=%v", err, took, tt.ok)
			}
			if took < tt.atLeast {
				t.Fatalf("waitFreeze returned after %v, before %v", took, tt.atLeast)
			}
		})
	}
	t.Run("the caller gives up", func(t *testing.T) {
		t.Parallel()
		servers, ask := scripted(map[string]replicaScript{"a": applied(9)})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := waitFreeze(ctx, servers, 10, ask); !errors.Is(err, context.Canceled) {
			t.Fatalf("waitFreeze with a cancelled context = %v", err)
		}
	})
}

// TestAwaitCatchUp: before the freeze, a replica behind the others is
// waited for while it keeps applying, not once it stalls.
func TestAwaitCatchUp(t *testing.T) {
	tests := []struct {
		name    string
		scripts map[string]replicaScript
		start   map[string]uint64
		want    map[string]uint64 // at least
		atLeast time.Duration
	}{
		{"level", map[string]replicaScript{"a": applied(10), "b": applied(10)}, map[string]uint64{"a": 10, "b": 10}, map[string]uint64{"a": 10, "b": 10}, 0},
		{"one behind, catching up", map[string]replicaScript{"a": applied(10), "b": climbing(4, 100*time.Millisecond)}, map[string]uint64{"a": 10, "b": 4},
			map[string]uint64{"a": 10, "b": 10}, 500 * time.Millisecond},
		{"one behind, stalled", map[string]replicaScript{"a": applied(10), "b": applied(4)}, map[string]uint64{"a": 10, "b": 4},
			map[string]uint64{"a": 10, "b": 4}, mergeFreezeWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ask := scripted(tt.scripts)
			start := time.Now()
			awaitCatchUp(context.Background(), tt.start, 10, ask)
			if took := time.Since(start); took < tt.atLeast {
				t.Fatalf("returned after %v, before %v", took, tt.atLeast)
			}
			for s, w := range tt.want {
				if tt.start[s] < w {
					t.Fatalf("%s: applied %d when the wait ended, want %d", s, tt.start[s], w)
				}
			}
		})
	}
}

// TestFreezeProgress: a replica holds a merge's or attach's freeze (index
// 448) only when it reports itself frozen at that index; an applied index
// past it alone does not count. The case that failed chaos seed 2460: a
// replica that had not applied the merge's isolate yet still served the
// range as a span of its old group, whose log was at 516, unfrozen; it was
// counted as holding the freeze, and its server panicked applying the
// merge.
func TestFreezeProgress(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   *pb.RangeStatus
		want uint64
	}{
		{"frozen at the index", &pb.RangeStatus{AppliedIndex: 450, Frozen: true, FrozenIndex: 448}, 450},
		{"not there yet", &pb.RangeStatus{AppliedIndex: 300}, 300},
		{"another log's index past it, unfrozen", &pb.RangeStatus{AppliedIndex: 516}, 447},
		{"frozen at another index", &pb.RangeStatus{AppliedIndex: 600, Frozen: true, FrozenIndex: 590}, 447},
		{"an older build reports no freeze index", &pb.RangeStatus{AppliedIndex: 449, Frozen: true}, 449},
		{"an older build, not frozen", &pb.RangeStatus{AppliedIndex: 449}, 447},
		{"no answer", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := freezeProgress(tc.st, 448); got != tc.want {
				t.Errorf("freezeProgress(%v, 448) = %d, want %d", tc.st, got, tc.want)
			}
		})
	}
}
