package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// TestFollowerSyncTimeDuringWrites: a follower asked for its sync time
// (the follower read behind Get Service Stats' LastSyncTime) while writes
// stream in always knows it: a follower whose apply is a few entries
// behind the commit index it has heard of waits for them instead of
// answering "unknown" (the flaky conformance StatsOnlyOnSecondary: no
// LastSyncTime a few ms after writes). The time it reports is never in
// the future and never older than the writes it was asked after.
func TestFollowerSyncTimeDuringWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startCluster(t, 1, 3)
	sc := serviceClient(t, c, 0)
	mc := masterClient(t, c)
	ctx := ctxT(t, 3*time.Minute)
	const table = "followersync"
	tc := newTable(t, sc, table)
	if err := putV(ctx, tc, "k", 0); err != nil {
		t.Fatal(err)
	}
	d := tableRanges(partitionMap(t, mc), table)[0]
	req := &pb.QueryRequest{RangeId: d.GetRangeId(), Generation: d.GetGeneration(), Limit: 1,
		HasStart: true, StartPartitionKey: d.GetStart(), FollowerRead: true}
	// synced asks server i for its sync time as the front-end's
	// SecondarySync does (0: unknown).
	synced := func(i int) (int64, error) {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := c.Servers[i].Server.Service().Query(qctx, req)
		return resp.GetSyncedUnixNano(), err
	}
	followers := func() []int {
		var out []int
		for {
			leader := rangeLeader(c, table)
			if leader >= 0 {
				for i := range c.Servers {
					if i != leader {
						out = append(out, i)
					}
				}
				return out
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Both followers hold the range and have heard from its leader.
	waitFor(t, time.Minute, "both followers to report a sync time", func() bool {
		for _, i := range followers() {
			if s, err := synced(i); err != nil || s == 0 {
				return false
			}
		}
		return true
	})

	// Writers keep the followers' apply a few entries behind their commit
	// index most of the time.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var written atomic.Int64
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc := sc.NewClient(table)
			for v := 1; wctx.Err() == nil; v++ {
				if err := putV(wctx, tc, fmt.Sprintf("k%d", w), v); err != nil {
					if wctx.Err() == nil {
						errs <- fmt.Errorf("writer %d: %w", w, err)
					}
					return
				}
				written.Add(1)
			}
		}()
	}
	// Probe while the writes go on: at least probes answers, spread over
	// at least writes acknowledged writes.
	const probes, writes = 300, 1500
	unknown, n := 0, 0
	deadline := time.Now().Add(2 * time.Minute)
	for (n < probes || written.Load() < writes) && time.Now().Before(deadline) {
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		for _, i := range followers() {
			asked := time.Now()
			s, err := synced(i)
			if err != nil {
				// A leadership change under load is not this test's
				// subject; only an answer counts.
				continue
			}
			n++
			if s == 0 {
				unknown++
				continue
			}
			if got := time.Unix(0, s); got.After(time.Now()) {
				t.Fatalf("server %d reports sync time %v, in the future (asked at %v)", i, got, asked)
			}
		}
	}
	stop()
	wg.Wait()
	t.Logf("%d probes during %d writes, %d without a sync time", n, written.Load(), unknown)
	if n < probes || written.Load() < writes {
		t.Fatalf("only %d probes answered during %d writes in time, want %d during %d", n, written.Load(), probes, writes)
	}
	if unknown > 0 {
		t.Fatalf("%d of %d follower probes during writes reported no sync time", unknown, n)
	}
}
