package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/cluster/clustertest"
	"tablestore/internal/edm"
	"tablestore/internal/masterclient"
	"tablestore/internal/rangeclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// getManyErr is the error a GetMany result carries (nil on success).
func getManyErr(t *testing.T, r *pb.GetManyResult) error {
	t.Helper()
	if r.GetResponse() != nil {
		return nil
	}
	var st spb.Status
	if err := proto.Unmarshal(r.GetStatus(), &st); err != nil {
		t.Fatalf("undecodable status: %v", err)
	}
	return status.ErrorProto(&st)
}

// TestGetManyAnswersEachRead: a range leader serves the reads of one
// GetMany call each as Get would: found, not found, a range not hosted,
// a key outside the range, each with its own answer; a follower answers
// NOT_LEADER for each linearizable read and serves the follower reads of
// the same call.
func TestGetManyAnswersEachRead(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.Start(t, 1, 3)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "getmany"
	tc := clustertest.NewTable(t, sc, table)
	for i, pk := range []string{"a", "b"} {
		if err := putV(ctx, tc, pk, i+1); err != nil {
			t.Fatal(err)
		}
	}
	rangeID := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()
	get := func(pk string) *pb.GetRequest { return &pb.GetRequest{RangeId: rangeID, PartitionKey: pk, RowKey: "r"} }
	elsewhere := get("a")
	elsewhere.RangeId = rangeID + 1_000_000
	req := &pb.GetManyRequest{Gets: []*pb.GetRequest{get("a"), get("missing"), elsewhere, get("b"), get("a")}}
	want := []struct {
		reason string
		v      int
	}{{"", 1}, {rpcerr.ReasonEntityNotFound, 0}, {rpcerr.ReasonRangeNotFound, 0}, {"", 2}, {"", 1}}

	var resp *pb.GetManyResponse
	clustertest.WaitFor(t, 30*time.Second, "the range leader to serve GetMany", func() bool {
		leader := clustertest.RangeLeader(c, table)
		if leader < 0 {
			return false
		}
		var err error
		if resp, err = c.Servers[leader].Server.Service().GetMany(ctx, req); err != nil {
			t.Fatalf("GetMany: %v", err)
		}
		// A leadership change meanwhile (NOT_LEADER) is retried, as the
		// front-end would.
		for _, r := range resp.GetResults() {
			if err := getManyErr(t, r); err != nil && rangeclient.Classify(err).Retry && !rangeclient.Classify(err).Stale {
				return false
			}
		}
		return true
	})
	if len(resp.GetResults()) != len(want) {
		t.Fatalf("%d results for %d reads", len(resp.GetResults()), len(want))
	}
	for i, w := range want {
		r := resp.GetResults()[i]
		err := getManyErr(t, r)
		if got := rpcerr.Parse(err).Reason; got != w.reason || (w.reason == "") != (err == nil) {
			t.Errorf("read %d: err %v (reason %q), want reason %q", i, err, got, w.reason)
			continue
		}
		if w.v != 0 {
			if v := entityV(t, r.GetResponse().GetEntity()); v != w.v {
				t.Errorf("read %d: V = %d, want %d", i, v, w.v)
			}
		}
	}

	// A follower: NOT_LEADER for each linearizable read; the follower
	// reads of the same call are served from its applied state.
	leader := clustertest.RangeLeader(c, table)
	follower := (leader + 1) % len(c.Servers)
	fr := get("b")
	fr.FollowerRead = true
	mixed := &pb.GetManyRequest{Gets: []*pb.GetRequest{get("a"), fr, get("b")}}
	clustertest.WaitFor(t, 30*time.Second, "the follower to serve its follower read", func() bool {
		resp, err := c.Servers[follower].Server.Service().GetMany(ctx, mixed)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{0, 2} {
			if err := getManyErr(t, resp.GetResults()[i]); !rpcerr.Is(err, rpcerr.ReasonNotLeader) {
				t.Fatalf("follower, read %d: %v, want NOT_LEADER", i, err)
			}
		}
		r := resp.GetResults()[1]
		return getManyErr(t, r) == nil && entityV(t, r.GetResponse().GetEntity()) == 2
	})
}

func entityV(t *testing.T, b []byte) int {
	t.Helper()
	e, err := edm.UnmarshalBinary(b)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := e.Get("V")
	if !ok {
		t.Fatal("no property V")
	}
	return int(v.Int)
}

// TestCoalescedReadsSeeLatestWrite: through the front-end, readers that
// run side by side (so their reads share GetMany calls, across the ranges
// of two tables) never see a value older than the last write acknowledged
// before their read began; also while the ranges' leadership moves
// between servers under them (a coalesced read queued for the old leader
// is refused NOT_LEADER there, or answered after it stepped down, and is
// retried at the new one: it must still see every acknowledged write).
func TestCoalescedReadsSeeLatestWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, tt := range []struct {
		name string
		// transfers is how many times each table's range changes
		// leader while the reads and writes run.
		transfers int
	}{
		{"steady leaders", 0},
		{"leadership transfers", 3},
	} {
		t.Run(tt.name, func(t *testing.T) { testCoalescedReadsSeeLatestWrite(t, tt.transfers) })
	}
}

func testCoalescedReadsSeeLatestWrite(t *testing.T, transfers int) {
	c := clustertest.Start(t, 1, 3)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 3*time.Minute)
	tables := []string{"coalesceda", "coalescedb"}
	var acked [2]atomic.Int64
	for _, name := range tables {
		tc := clustertest.NewTable(t, sc, name)
		if err := putV(ctx, tc, "k", 0); err != nil {
			t.Fatal(err)
		}
	}
	before := clustertest.MetricValue(t, "tablestore_router_coalesced_reads_total", nil)

	// The writers and readers run until each table has this many writes
	// acknowledged, every transfer is done, and the readers have read
	// on after the last one.
	const writes = 150
	const readers = 12
	const readsAfter = 200
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 3+readers)
	for i, name := range tables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc := sc.NewClient(name)
			for v := 1; rctx.Err() == nil; v++ {
				if err := putV(rctx, tc, "k", v); err != nil {
					if rctx.Err() == nil {
						errs <- fmt.Errorf("write %s %d: %w", name, v, err)
					}
					return
				}
				acked[i].Store(int64(v))
			}
		}()
	}
	var reads atomic.Int64
	for w := 0; w < readers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := w % len(tables)
			tc := sc.NewClient(tables[i])
			for rctx.Err() == nil {
				floor := acked[i].Load()
				v, err := getV(rctx, tc, "k")
				if rctx.Err() != nil {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("read %s: %w", tables[i], err)
					return
				}
				if int64(v) < floor {
					errs <- fmt.Errorf("read %s: V = %d after write %d was acknowledged", tables[i], v, floor)
					return
				}
				reads.Add(1)
			}
		}()
	}
	// The transfers: each once the writes have moved on since the last,
	// so that reads and writes run through every one.
	var moved atomic.Int64        // transfers done
	readsAtLast := atomic.Int64{} // reads done when the last transfer was
	transfersDone := make(chan struct{})
	go func() {
		defer close(transfersDone)
		for n := 0; n < transfers; n++ {
			for i, name := range tables {
				floor := acked[i].Load() + 20
				if err := pollUntil(rctx, time.Minute, func() bool { return acked[i].Load() >= floor }); err != nil {
					errs <- fmt.Errorf("transfer %d of %s: the writes did not move on: %w", n, name, err)
					return
				}
				if err := transferRangeLeader(rctx, mc, name); err != nil {
					errs <- fmt.Errorf("transfer %d of %s: %w", n, name, err)
					return
				}
				moved.Add(1)
			}
		}
		readsAtLast.Store(reads.Load())
	}()
	clustertest.WaitFor(t, 2*time.Minute, "every write acknowledged and every transfer done", func() bool {
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		select {
		case <-transfersDone:
		default:
			return false
		}
		return acked[0].Load() >= writes && acked[1].Load() >= writes && reads.Load() >= readsAtLast.Load()+readsAfter
	})
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := moved.Load(), int64(transfers*len(tables)); got != want {
		t.Fatalf("%d leadership transfers, want %d", got, want)
	}
	coalesced := clustertest.MetricValue(t, "tablestore_router_coalesced_reads_total", nil) - before
	t.Logf("%d reads, %.0f of them coalesced, %d and %d writes, %d leadership transfers", reads.Load(), coalesced, acked[0].Load(), acked[1].Load(), moved.Load())
	if coalesced == 0 {
		t.Fatal("no read went through GetMany: the test did not exercise coalescing")
	}
}

// pollUntil polls cond until it holds, ctx ends or timeout passes.
func pollUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// transferRangeLeader moves the leadership of table's (first) range to
// another of its replicas through the master, retrying a refused or
// failed transfer (the master busy with the range, a leader elected
// meanwhile), until the master's map names a new leader.
func transferRangeLeader(ctx context.Context, mc *masterclient.Client, table string) error {
	var rangeID uint64
	var from string
	var err error
	if perr := pollUntil(ctx, time.Minute, func() bool {
		var m *pb.PartitionMap
		if m, err = clustertest.GetPartitionMap(ctx, mc); err != nil {
			return false
		}
		rs := clustertest.TableRanges(m, table)
		if len(rs) == 0 {
			err = fmt.Errorf("no range")
			return false
		}
		rangeID, from = rs[0].GetRangeId(), m.GetLeaders()[rs[0].GetRangeId()]
		return from != ""
	}); perr != nil {
		return fmt.Errorf("no leader of %s: %w (last error %v)", table, perr, err)
	}
	perr := pollUntil(ctx, time.Minute, func() bool {
		m, gerr := clustertest.GetPartitionMap(ctx, mc)
		if gerr != nil {
			err = gerr
			return false
		}
		rs := clustertest.TableRanges(m, table)
		if l := m.GetLeaders()[rangeID]; l != "" && l != from {
			return true
		}
		var to string
		for _, rep := range rs[0].GetReplicas() {
			if rep.GetServerId() != from {
				to = rep.GetServerId()
				break
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		err = mc.Call(cctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: rangeID, ToServerId: to})
			return err
		})
		return false
	})
	if perr != nil {
		return fmt.Errorf("range %d still led by %s: %w (last error %v)", rangeID, from, perr, err)
	}
	return nil
}
