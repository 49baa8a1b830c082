package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// fakeSyncPS is a partition server answering ReadIndex (as the leader,
// or refusing) and AppliedIndex as a test sets it.
type fakeSyncPS struct {
	pb.UnimplementedPartitionServiceServer
	mu       sync.Mutex
	leader   bool
	index    uint64        // ReadIndex's answer
	delay    time.Duration // before ReadIndex answers
	applied  uint64
	gen      uint64
	err      error // AppliedIndex's error
	old      bool  // a server of a version without AppliedIndex
	reads    int   // ReadIndex calls
	appliedQ int   // AppliedIndex calls
}

func (f *fakeSyncPS) set(fn func(f *fakeSyncPS)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeSyncPS) ReadIndex(ctx context.Context, _ *pb.ReadIndexRequest) (*pb.ReadIndexResponse, error) {
	f.mu.Lock()
	f.reads++
	leader, idx, delay := f.leader, f.index, f.delay
	f.mu.Unlock()
	if !leader {
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonNotLeader, "not the leader", nil)
	}
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &pb.ReadIndexResponse{Index: idx}, nil
}

func (f *fakeSyncPS) AppliedIndex(ctx context.Context, req *pb.AppliedIndexRequest) (*pb.AppliedIndexResponse, error) {
	f.mu.Lock()
	f.appliedQ++
	old, err, applied, gen := f.old, f.err, f.applied, f.gen
	f.mu.Unlock()
	if old {
		return f.UnimplementedPartitionServiceServer.AppliedIndex(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	return &pb.AppliedIndexResponse{AppliedIndex: applied, Generation: gen}, nil
}

// syncRig is a router whose map holds one table of one range (id 10,
// generation 3) on fake servers ps1 (the leader) to ps<n>; no master
// answers, so a map refresh fails and leaves the map as the test set it.
type syncRig struct {
	r     *Router
	ps    map[string]*fakeSyncPS
	table *pb.Table
}

func newSyncRig(t *testing.T, n int) *syncRig {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Masters = []string{"127.0.0.1:1"}
	cfg.RetryTimeout = 500 * time.Millisecond
	r, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	g := &syncRig{r: r, ps: map[string]*fakeSyncPS{}, table: &pb.Table{Name: "t", TableId: 1}}
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("ps%d", i+1))
	}
	r.mu.Lock()
	r.tables["t"] = g.table
	r.leaders[10] = "ps1"
	r.mu.Unlock()
	for _, id := range ids {
		g.addServer(id)
	}
	g.ps["ps1"].set(func(f *fakeSyncPS) { f.leader = true })
	g.setRange(3, ids...)
	return g
}

// addServer adds a fake server holding everything the leader confirms.
func (g *syncRig) addServer(id string) {
	f := &fakeSyncPS{index: 100, applied: 100, gen: 3}
	g.ps[id] = f
	g.r.mu.Lock()
	g.r.servers[id] = &pb.ServerInfo{ServerId: id, GrpcAddr: "fake-" + id}
	g.r.mu.Unlock()
	g.r.RegisterLocal("fake-"+id, f)
}

// setRange puts range 10 at the given generation on the given servers
// into the map (a move, as a refreshed map would show it).
func (g *syncRig) setRange(gen uint64, servers ...string) {
	d := &pb.RangeDescriptor{RangeId: 10, TableId: 1, Table: "t", Generation: gen}
	for _, s := range servers {
		d.Replicas = append(d.Replicas, &pb.Replica{ServerId: s})
	}
	g.r.mu.Lock()
	g.r.ranges[1] = []*pb.RangeDescriptor{d}
	g.r.rangeTable[10] = 1
	g.r.mu.Unlock()
}

func (g *syncRig) sync(t *testing.T) (time.Time, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return g.r.SecondarySync(ctx)
}

// TestSecondarySyncCombinesReplicas runs SecondarySync against fake
// servers, a call to learn what each replica holds, then a call with one
// of them changed.
func TestSecondarySyncCombinesReplicas(t *testing.T) {
	unavailable := rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "down", nil)
	notFound := rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "not hosted", nil)
	for _, tc := range []struct {
		name   string
		change func(g *syncRig)
		// known: a time; else zero (unknown) or, with fails, an error.
		known, fails bool
		refresh      bool // a map refresh is started
		older        bool // the time is from before the change
	}{
		{"unchanged", func(g *syncRig) {}, true, false, false, false},
		{"a follower stops answering: counts with what it reported", func(g *syncRig) {
			// The others move on to index 200; ps3 reported 100: the
			// time is the first call's.
			g.ps["ps1"].set(func(f *fakeSyncPS) { f.index, f.applied = 200, 200 })
			g.ps["ps2"].set(func(f *fakeSyncPS) { f.applied = 200 })
			g.ps["ps3"].set(func(f *fakeSyncPS) { f.err = unavailable })
		}, true, false, false, true},
		{"a follower is of an older version", func(g *syncRig) {
			g.ps["ps3"].set(func(f *fakeSyncPS) { f.old = true })
		}, false, false, false, false},
		{"moved in, not answering yet", func(g *syncRig) {
			g.addServer("ps4")
			g.ps["ps4"].set(func(f *fakeSyncPS) { f.err = notFound })
			g.setRange(4, "ps1", "ps2", "ps4")
		}, false, false, false, false},
		{"moved in and answering", func(g *syncRig) {
			g.addServer("ps4")
			g.setRange(4, "ps1", "ps2", "ps4")
			for _, f := range g.ps {
				f.set(func(f *fakeSyncPS) { f.gen = 4 })
			}
		}, true, false, false, false},
		{"split the map has not seen", func(g *syncRig) {
			g.ps["ps2"].set(func(f *fakeSyncPS) { f.gen = 4 })
		}, false, false, true, false},
		{"no replica hosts it any more", func(g *syncRig) {
			for _, f := range g.ps {
				f.set(func(f *fakeSyncPS) { f.err = notFound })
			}
		}, false, false, true, false},
		{"every replica down: each counts with what it reported", func(g *syncRig) {
			for _, f := range g.ps {
				f.set(func(f *fakeSyncPS) { f.err = unavailable })
			}
		}, true, false, false, false},
		{"every replica down after a move: nothing reported for it", func(g *syncRig) {
			g.setRange(4, "ps1", "ps2", "ps3")
			for _, f := range g.ps {
				f.set(func(f *fakeSyncPS) { f.err = unavailable })
			}
		}, false, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newSyncRig(t, 3)
			before := time.Now()
			synced, err := g.sync(t)
			if err != nil || synced.Before(before) || synced.After(time.Now()) {
				t.Fatalf("first call: %v, %v; want a time in the call", synced, err)
			}
			refreshes := counterValue(t, refreshesTotal)
			changed := time.Now()
			tc.change(g)
			// Past syncReuse, so the second call confirms a new index.
			time.Sleep(2 * syncReuse)
			synced, err = g.sync(t)
			switch {
			case tc.fails && err == nil:
				t.Fatalf("second call: %v, want an error", synced)
			case !tc.fails && err != nil:
				t.Fatalf("second call: %v", err)
			case tc.known && synced.IsZero():
				t.Fatal("second call: no time, want one")
			case !tc.known && !synced.IsZero():
				t.Fatalf("second call: %v, want none", synced)
			}
			// A replica that did not answer holds what it reported in
			// the first call, not more: the time is from before the change.
			if tc.older && !synced.Before(changed) {
				t.Fatalf("second call: %v, after the change (%v) a replica that did not answer may not hold", synced, changed)
			}
			if tc.refresh {
				deadline := time.Now().Add(10 * time.Second)
				for counterValue(t, refreshesTotal) == refreshes {
					if time.Now().After(deadline) {
						t.Fatal("no map refresh started")
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
}

// TestReadIndexEndsWhenTheKeyMoved: a key that the map puts in another
// range ends the read index at once (errRangeChanged), without asking a
// server or refreshing the map until the budget is spent.
func TestReadIndexEndsWhenTheKeyMoved(t *testing.T) {
	g := newSyncRig(t, 3)
	probed := &pb.RangeDescriptor{RangeId: 9, TableId: 1, Generation: 2}
	_, err := g.r.readIndex(context.Background(), g.table, probed, time.Minute)
	if !errors.Is(err, errRangeChanged) {
		t.Fatalf("read index for a range the key left: %v, want errRangeChanged", err)
	}
	if n := g.ps["ps1"].reads; n != 0 {
		t.Fatalf("the leader of the other range was asked %d times", n)
	}
}

// TestSharedReadIndex: concurrent stats calls share one ReadIndex; one
// that took longer than syncReuse counts as shared, not failed, and the
// caller that started it giving up does not end it.
func TestSharedReadIndex(t *testing.T) {
	g := newSyncRig(t, 3)
	g.ps["ps1"].set(func(f *fakeSyncPS) { f.delay = 150 * time.Millisecond })
	d, _ := g.r.locate(g.table, "")
	count := func(o string) float64 { return counterValue(t, syncIndexTotal.WithLabelValues(o)) }
	failed, reused, confirmed := count("failed"), count("reused"), count("confirmed")
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g.r.confirmedPairs(ctx, g.table, d)
		}()
	}
	wg.Wait()
	if n := g.ps["ps1"].reads; n != 1 {
		t.Errorf("%d ReadIndex calls, want 1 shared", n)
	}
	if f, r, c := count("failed")-failed, count("reused")-reused, count("confirmed")-confirmed; f != 0 || r+c != 3 || c < 1 {
		t.Errorf("outcomes: failed %v, reused %v, confirmed %v; want 0 failed, 3 answered by one confirmation", f, r, c)
	}

	// The caller that starts it gives up at once: the next finds its pair.
	g2 := newSyncRig(t, 3)
	g2.ps["ps1"].set(func(f *fakeSyncPS) { f.delay = 50 * time.Millisecond })
	d2, _ := g2.r.locate(g2.table, "")
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if pairs := g2.r.confirmedPairs(gone, g2.table, d2); len(pairs) != 0 {
		t.Fatalf("a caller that gave up got %v", pairs)
	}
	rs := g2.r.sync.get(10)
	deadline := time.Now().Add(10 * time.Second)
	for len(g2.r.snapshotPairs(rs)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the shared ReadIndex ended with its first caller")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
