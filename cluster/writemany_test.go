package cluster_test

import (
	"context"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/cluster/clustertest"
	"tablestore/internal/edm"
	"tablestore/internal/rangeclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// manyErr is the error a WriteMany result carries (nil on success).
func manyErr(t *testing.T, r *pb.WriteManyResult) error {
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

// TestWriteManyAnswersEachWrite: a range leader serves the writes of one
// WriteMany call each as Write would: applied, refused for its own reason
// (an existing row, no operations, a range not hosted) without failing the
// others, deduplicated by request id when the call is repeated; a follower
// answers NOT_LEADER for each.
func TestWriteManyAnswersEachWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.Start(t, 1, 3)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "writemany"
	tc := clustertest.NewTable(t, sc, table)
	if err := putV(ctx, tc, "exists", 1); err != nil {
		t.Fatal(err)
	}
	rangeID := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()
	ins := func(pk string, v int) *pb.WriteRequest {
		e := &edm.Entity{PartitionKey: pk, RowKey: "r", Properties: []edm.Property{{Name: "V", Value: edm.Value{Type: edm.TypeInt32, Int: int64(v)}}}}
		return &pb.WriteRequest{RangeId: rangeID, RequestId: []byte("writemany-" + pk), Ops: []*pb.EntityOp{{
			Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: pk, RowKey: "r", Entity: edm.MarshalBinary(e)}}}
	}
	elsewhere := ins("b", 3)
	elsewhere.RangeId = rangeID + 1_000_000
	req := &pb.WriteManyRequest{Writes: []*pb.WriteRequest{ins("a", 1), ins("exists", 2), {RangeId: rangeID, RequestId: []byte("none")}, elsewhere, ins("c", 4)}}
	want := []struct {
		reason string
		v      int
	}{{"", 1}, {rpcerr.ReasonEntityAlreadyExists, 1}, {rpcerr.ReasonInvalidInput, 0}, {rpcerr.ReasonRangeNotFound, 0}, {"", 4}}

	var leader int
	var first *pb.WriteManyResponse
	clustertest.WaitFor(t, 30*time.Second, "the range leader to serve WriteMany", func() bool {
		if leader = clustertest.RangeLeader(c, table); leader < 0 {
			return false
		}
		resp, err := c.Servers[leader].Server.Service().WriteMany(ctx, req)
		if err != nil {
			t.Fatalf("WriteMany: %v", err)
		}
		first = resp
		// Until the writes that must apply get a final answer: a
		// leadership change (NOT_LEADER), a transfer (ServerBusy) or an
		// unknown outcome is retried, as the front-end would, and the
		// request ids make a repeat of an applied write answer with its
		// first result.
		for _, i := range []int{0, 4} {
			if err := manyErr(t, resp.GetResults()[i]); err != nil && rangeclient.Classify(err).Retry && !rangeclient.Classify(err).Stale {
				return false
			}
		}
		return true
	})
	if len(first.GetResults()) != len(want) {
		t.Fatalf("%d results for %d writes", len(first.GetResults()), len(want))
	}
	for i, w := range want {
		err := manyErr(t, first.GetResults()[i])
		if got := rpcerr.Parse(err).Reason; got != w.reason || (w.reason == "") != (err == nil) {
			t.Errorf("write %d: err %v (reason %q), want reason %q", i, err, got, w.reason)
		}
		if w.v != 0 {
			pk := req.GetWrites()[i].GetOps()[0].GetPartitionKey()
			if v, err := directGet(ctx, c, leader, rangeID, pk); err != nil || v != w.v {
				t.Errorf("write %d: %s reads %v, %v; want %d", i, pk, v, err, w.v)
			}
		}
	}
	// The same call again: the applied writes answer with their first
	// attempt's Timestamp instead of applying twice.
	again, err := c.Servers[leader].Server.Service().WriteMany(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 4} {
		if err := manyErr(t, again.GetResults()[i]); err != nil {
			t.Fatalf("repeated write %d: %v", i, err)
		}
		if a, b := again.GetResults()[i].GetResponse().GetTimestampUnixNano(), first.GetResults()[i].GetResponse().GetTimestampUnixNano(); a != b {
			t.Errorf("repeated write %d: Timestamp %d, first %d", i, a, b)
		}
	}
	// A follower refuses each write with NOT_LEADER.
	follower := (leader + 1) % len(c.Servers)
	resp, err := c.Servers[follower].Server.Service().WriteMany(ctx, &pb.WriteManyRequest{Writes: []*pb.WriteRequest{ins("d", 5), ins("e", 6)}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.GetResults() {
		if err := manyErr(t, r); !rpcerr.Is(err, rpcerr.ReasonNotLeader) {
			t.Errorf("follower, write %d: %v, want NOT_LEADER", i, err)
		}
	}
}

// TestWriteManyAcrossRanges: one WriteMany call carries the writes of two
// ranges led by the same server (the front-end's lane is per leader
// address): the server groups them by range, each write is applied by its
// own range or refused for its own reason — an existing row, a key the
// range no longer holds after the split (STALE_RANGE), and, once the
// right-hand range's leadership has moved away, NOT_LEADER for its writes
// only, while the left-hand range's writes in the same call apply.
func TestWriteManyAcrossRanges(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.Start(t, 1, 3)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "writemanyranges"
	tc := clustertest.NewTable(t, sc, table)
	for _, pk := range []string{"exists-a", "zz"} {
		if err := putV(ctx, tc, pk, 1); err != nil {
			t.Fatal(err)
		}
	}
	split := clustertest.SplitRange(t, ctx, mc, table, "m")
	left, right := split.GetLeft().GetRangeId(), split.GetRight().GetRangeId()

	// moveRight makes the right-hand range's leader the left's (same) or
	// another of its replicas (!same); it returns the left's leader.
	moveRight := func(same bool) int {
		var leader int
		clustertest.WaitFor(t, 60*time.Second, "the ranges' leaders placed", func() bool {
			m := clustertest.PartitionMap(t, mc)
			l, r := m.GetLeaders()[left], m.GetLeaders()[right]
			if l == "" || r == "" {
				return false
			}
			leader = c.ServerIndex(l)
			if (l == r) == same {
				return true
			}
			to := l
			if !same {
				for _, rep := range clustertest.TableRanges(m, table)[1].GetReplicas() {
					if rep.GetServerId() != l {
						to = rep.GetServerId()
					}
				}
			}
			_ = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
				_, err := m.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: right, ToServerId: to})
				return err
			})
			return false
		})
		return leader
	}
	ins := func(rangeID uint64, pk string, v int) *pb.WriteRequest {
		e := &edm.Entity{PartitionKey: pk, RowKey: "r", Properties: []edm.Property{{Name: "V", Value: edm.Value{Type: edm.TypeInt32, Int: int64(v)}}}}
		return &pb.WriteRequest{RangeId: rangeID, RequestId: []byte("writemanyranges-" + pk), Ops: []*pb.EntityOp{{
			Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: pk, RowKey: "r", Entity: edm.MarshalBinary(e)}}}
	}
	type want struct {
		reason string
		v      int // the value read back from the write's range, 0: not read
	}
	// call sends req to server i until the writes that must apply get a
	// final answer (a leadership change or an unknown outcome is retried,
	// as the front-end would; request ids make a repeat answer with the
	// first result), then checks each write's answer.
	call := func(i int, req *pb.WriteManyRequest, wants []want) {
		t.Helper()
		var resp *pb.WriteManyResponse
		clustertest.WaitFor(t, 30*time.Second, "WriteMany answered", func() bool {
			var err error
			if resp, err = c.Servers[i].Server.Service().WriteMany(ctx, req); err != nil {
				t.Fatalf("WriteMany: %v", err)
			}
			for j, w := range wants {
				err := manyErr(t, resp.GetResults()[j])
				if w.reason == "" && err != nil && rangeclient.Classify(err).Retry && !rangeclient.Classify(err).Stale {
					return false
				}
			}
			return true
		})
		if len(resp.GetResults()) != len(wants) {
			t.Fatalf("%d results for %d writes", len(resp.GetResults()), len(wants))
		}
		for j, w := range wants {
			err := manyErr(t, resp.GetResults()[j])
			if got := rpcerr.Parse(err).Reason; got != w.reason || (w.reason == "") != (err == nil) {
				t.Errorf("write %d (range %d): err %v (reason %q), want reason %q", j, req.GetWrites()[j].GetRangeId(), err, got, w.reason)
			}
			if w.v != 0 {
				wr := req.GetWrites()[j]
				if v, err := directGet(ctx, c, i, wr.GetRangeId(), wr.GetOps()[0].GetPartitionKey()); err != nil || v != w.v {
					t.Errorf("write %d: %s reads %v, %v; want %d", j, wr.GetOps()[0].GetPartitionKey(), v, err, w.v)
				}
			}
		}
	}

	leader := moveRight(true)
	call(leader, &pb.WriteManyRequest{Writes: []*pb.WriteRequest{
		ins(left, "a", 2), ins(right, "n", 3), ins(left, "exists-a", 4), ins(right, "zz", 5),
		ins(left, "p", 6), // "p" is the right-hand range's since the split
		ins(right, "o", 7), ins(left, "b", 8),
	}}, []want{
		{"", 2}, {"", 3}, {rpcerr.ReasonEntityAlreadyExists, 1}, {rpcerr.ReasonEntityAlreadyExists, 1},
		{rpcerr.ReasonStaleRange, 0}, {"", 7}, {"", 8},
	})

	leader = moveRight(false)
	call(leader, &pb.WriteManyRequest{Writes: []*pb.WriteRequest{
		ins(right, "q", 9), ins(left, "c", 10), ins(right, "r", 11), ins(left, "d", 12),
	}}, []want{
		{rpcerr.ReasonNotLeader, 0}, {"", 10}, {rpcerr.ReasonNotLeader, 0}, {"", 12},
	})
}
