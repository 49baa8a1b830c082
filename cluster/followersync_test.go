package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestSecondarySyncTimeHoldsAcknowledgedWrites checks the contract of
// the secondary's LastSyncTime (docs/reliability.md section 18): every
// write acknowledged on the primary before the reported time is readable
// on the secondary. Writers stream upserts of their own keys and note when
// each was acknowledged; the test asks the front-end for the secondary's
// sync time (SecondarySync, what Get Service Stats reports) again and
// again, then reads every writer's key from the secondary (SecondaryGet:
// the same replica, followers first) and wants at least the last value
// acknowledged before that time. With "leader changes" the range's
// leadership moves three times under the writes and probes; with "leader
// isolated" the range leader is cut off the Raft network twice (it keeps
// answering gRPC, and believes it leads until its lease lapses), until
// the writes have gone on through a new leader. A follower
// that reported the leader's last contact (main before this test) failed
// the steady case: its heartbeats and appends are newer than the commit
// index they carry.
func TestSecondarySyncTimeHoldsAcknowledgedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, tc := range []struct {
		name string
		// moves: leadership transfers, or with isolate, isolations of the leader.
		moves   int
		isolate bool
	}{
		{"steady", 0, false},
		{"leader changes", 3, false},
		{"leader isolated", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testSyncTimeHoldsWrites(t, tc.moves, tc.isolate) })
	}
}

func testSyncTimeHoldsWrites(t *testing.T, moves int, isolate bool) {
	c := clustertest.Start(t, 1, 3)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	rt := c.Frontends[0].Router
	ctx := clustertest.Context(t, 4*time.Minute)
	const table = "syncholds"
	tc := clustertest.NewTable(t, sc, table)
	const writers = 6
	key := func(w int) string { return fmt.Sprintf("k%d", w) }
	for w := range writers {
		if err := putV(ctx, tc, key(w), 0); err != nil {
			t.Fatal(err)
		}
	}

	type ack struct {
		v  int
		at time.Time // taken after the client saw the answer: no earlier than the acknowledgement
	}
	var mu sync.Mutex
	acks := make([][]ack, writers)
	// lastBefore is, per writer, the last value acknowledged before at.
	lastBefore := func(at time.Time) []int {
		mu.Lock()
		defer mu.Unlock()
		out := make([]int, writers)
		for w, as := range acks {
			for i := len(as) - 1; i >= 0; i-- {
				if as[i].at.Before(at) {
					out[w] = as[i].v
					break
				}
			}
		}
		return out
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var written, writeFailed atomic.Int64
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc := sc.NewClient(table)
			for v := 1; wctx.Err() == nil; v++ {
				if err := putV(wctx, tc, key(w), v); err != nil {
					if wctx.Err() != nil {
						return
					}
					if isolate {
						// A write caught on the isolated leader may fail
						// after the client's retries: not acknowledged,
						// so the check does not count it (a later
						// value of the key overwrites it either way).
						writeFailed.Add(1)
						continue
					}
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				at := time.Now()
				mu.Lock()
				acks[w] = append(acks[w], ack{v, at})
				mu.Unlock()
				written.Add(1)
			}
		}()
	}
	t.Cleanup(func() {
		for i := range c.Servers {
			c.IsolateServer(i, false)
		}
	})
	// isolateLeader cuts the range's leader (as the master last heard)
	// off the Raft network until 200 more writes went through another.
	isolateLeader := func() error {
		victim := -1
		if err := pollUntil(wctx, time.Minute, func() bool { victim = clustertest.RangeLeader(c, table); return victim >= 0 }); err != nil {
			return fmt.Errorf("no range leader: %w", err)
		}
		c.IsolateServer(victim, true)
		defer c.IsolateServer(victim, false)
		before := written.Load()
		if err := pollUntil(wctx, time.Minute, func() bool { return written.Load() >= before+200 }); err != nil {
			return fmt.Errorf("writes stalled with ps%d isolated: %w", victim+1, err)
		}
		return nil
	}
	var moved atomic.Int64
	if moves > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range moves {
				// Spread the moves over the probes: one per 200 writes.
				next := written.Load() + 200
				if err := pollUntil(wctx, time.Minute, func() bool { return written.Load() >= next }); err != nil {
					return
				}
				var err error
				if isolate {
					err = isolateLeader()
				} else {
					err = transferRangeLeader(wctx, mc, table)
				}
				if err != nil {
					if wctx.Err() == nil {
						errs <- fmt.Errorf("move: %w", err)
					}
					return
				}
				moved.Add(1)
			}
		}()
	}

	const syncMetric = "tablestore_router_secondary_sync_index_total"
	outcomes := []string{"reused", "confirmed", "failed"}
	before := map[string]float64{}
	for _, o := range outcomes {
		before[o] = clustertest.MetricValue(t, syncMetric, map[string]string{"outcome": o})
	}
	// Probe while the writes go on, until probes answers with a time,
	// spread over at least writes acknowledged writes (and every move).
	const probes, writes = 150, 1000
	known, unknown, failed := 0, 0, 0
	var lastErr error
	deadline := time.Now().Add(3 * time.Minute)
	for known < probes || written.Load() < writes || moved.Load() < int64(moves) {
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("in 3 minutes: %d probes with a time (%d without, %d failed, last error %v) during %d writes and %d moves; want %d during %d and %d",
				known, unknown, failed, lastErr, written.Load(), moved.Load(), probes, writes, moves)
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		synced, err := rt.SecondarySync(pctx)
		if err != nil {
			// A probe during a leadership move may fail; counted, and
			// the test ends (above) if none ever answers.
			failed++
			lastErr = err
			cancel()
			continue
		}
		if synced.IsZero() {
			unknown++
			cancel()
			continue
		}
		if now := time.Now(); synced.After(now) {
			t.Fatalf("sync time %v is in the future (now %v)", synced, now)
		}
		want := lastBefore(synced)
		for w := range writers {
			e, err := rt.SecondaryGet(pctx, table, key(w), "r")
			if err != nil {
				failed++
				lastErr = err
				continue
			}
			v, ok := e.Get("V")
			if !ok {
				t.Fatalf("%s has no V", key(w))
			}
			if int(v.Int) < want[w] {
				t.Fatalf("probe %d: sync time %v, but the secondary reads %s=%d; %d was acknowledged before it",
					known, synced.Format(time.RFC3339Nano), key(w), v.Int, want[w])
			}
		}
		cancel()
		known++
	}
	stop()
	wg.Wait()
	var indexes []string
	for _, o := range outcomes {
		indexes = append(indexes, fmt.Sprintf("%s %.0f", o, clustertest.MetricValue(t, syncMetric, map[string]string{"outcome": o})-before[o]))
	}
	t.Logf("%d probes with a time, %d without, %d failed calls (last %v), during %d writes (%d failed) and %d leader moves; read indexes: %v",
		known, unknown, failed, lastErr, written.Load(), writeFailed.Load(), moved.Load(), indexes)
}

// TestReadIndexAndAppliedIndex checks the two partition RPCs behind the
// secondary's sync time on each server: only the range leader confirms
// a read index, it covers a write acknowledged before the call, and once a
// replica's AppliedIndex reports that index its follower reads see the
// write.
func TestReadIndexAndAppliedIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.Start(t, 1, 3)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "readindex"
	tc := clustertest.NewTable(t, sc, table)
	if err := putV(ctx, tc, "a", 1); err != nil {
		t.Fatal(err)
	}
	desc := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	rangeID, generation := desc.GetRangeId(), desc.GetGeneration()
	readIndex := func(i int) (uint64, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := c.Servers[i].Server.Service().ReadIndex(cctx, &pb.ReadIndexRequest{RangeId: rangeID})
		return resp.GetIndex(), err
	}
	// leaderIndex polls until exactly one server confirms a read index
	// (an election may be under way) and every other refuses as not the
	// leader.
	leaderIndex := func() (leader int, idx uint64) {
		var last string
		err := pollUntil(ctx, time.Minute, func() bool {
			leader = -1
			for i := range c.Servers {
				got, err := readIndex(i)
				switch {
				case err == nil && leader >= 0:
					last = fmt.Sprintf("ps%d and ps%d both confirm", leader+1, i+1)
					return false
				case err == nil:
					leader, idx = i, got
				case rpcerr.Parse(err).Reason != rpcerr.ReasonNotLeader:
					last = fmt.Sprintf("ps%d: %v", i+1, err)
					return false
				}
			}
			if leader < 0 {
				last = "none confirms"
			}
			return leader >= 0
		})
		if err != nil {
			t.Fatalf("no single server confirmed a read index: %v (last: %s)", err, last)
		}
		return leader, idx
	}
	_, before := leaderIndex()
	if err := putV(ctx, tc, "b", 2); err != nil {
		t.Fatal(err)
	}
	_, idx := leaderIndex()
	if idx <= before {
		t.Fatalf("read index %d after a write acknowledged, %d before it", idx, before)
	}
	for i := range c.Servers {
		var applied uint64
		clustertest.WaitFor(t, time.Minute, fmt.Sprintf("ps%d to hold index %d", i+1, idx), func() bool {
			resp, err := c.Servers[i].Server.Service().AppliedIndex(ctx, &pb.AppliedIndexRequest{RangeId: rangeID, Index: idx, WaitMs: 200})
			applied = resp.GetAppliedIndex()
			return err == nil && applied >= idx
		})
		// The replica reports its descriptor's generation (a front-end with
		// an older map learns it is stale): the range has not changed.
		resp0, err := c.Servers[i].Server.Service().AppliedIndex(ctx, &pb.AppliedIndexRequest{RangeId: rangeID})
		if err != nil || resp0.GetGeneration() != generation {
			t.Fatalf("ps%d: AppliedIndex generation %d (err %v), the map's %d", i+1, resp0.GetGeneration(), err, generation)
		}
		resp, err := c.Servers[i].Server.Service().Get(ctx, &pb.GetRequest{RangeId: rangeID, PartitionKey: "b", RowKey: "r", FollowerRead: true})
		if err != nil {
			t.Fatalf("ps%d holds index %d (applied %d) but its follower read of b fails: %v", i+1, idx, applied, err)
		}
		if v := entityV(t, resp.GetEntity()); v != 2 {
			t.Fatalf("ps%d holds index %d but reads b=%d", i+1, idx, v)
		}
	}
}

// TestSecondarySyncOverQuietRanges: the secondary's sync time is known
// when the ranges are quiet (their Raft members closed): the front-end's
// read index wakes each range (an election), on the first probe of a
// range with up to firstWait (2 s) to get it, since there is no older
// time to answer with. Three rounds of six new tables, each round probed
// once all its tables went quiet, with a few calls allowed (within 20 s)
// for the woken ranges' elections.
func TestSecondarySyncOverQuietRanges(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, nil, quiesceFast)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	rt := c.Frontends[0].Router
	ctx := clustertest.Context(t, 3*time.Minute)
	for round := range 3 {
		for i := range 6 {
			tc := clustertest.NewTable(t, sc, fmt.Sprintf("quiet%d%d", round, i))
			if err := putV(ctx, tc, "k", 1); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 6 {
			waitQuiet(t, c, mc, fmt.Sprintf("quiet%d%d", round, i), time.Minute)
		}
		// The first call wakes every quiet range at once (up to 18
		// elections on a loaded machine): one range not confirmed within
		// firstWait answers "unknown" for that call. Calls are repeated
		// for up to 20 s; what the test wants is that a time comes.
		var (
			synced  time.Time
			err     error
			calls   int
			start   = time.Now()
			elapsed time.Duration
		)
		if perr := pollUntil(ctx, 20*time.Second, func() bool {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			calls++
			cstart := time.Now()
			synced, err = rt.SecondarySync(pctx)
			elapsed = time.Since(cstart)
			return err == nil && !synced.IsZero()
		}); perr != nil {
			t.Fatalf("round %d (%d quiet tables): no sync time in %d calls over %v: last %v, err %v",
				round, 6*(round+1), calls, time.Since(start).Round(time.Millisecond), synced, err)
		}
		t.Logf("round %d: %d quiet tables, a time on call %d (%v after the first began); sync time %v before that call ended, which took %v",
			round, 6*(round+1), calls, time.Since(start).Round(time.Millisecond), time.Since(synced).Round(time.Millisecond), elapsed.Round(time.Millisecond))
	}
}
