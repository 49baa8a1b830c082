package cluster_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/cluster/clustertest"
	"tablestore/internal/edm"
	pb "tablestore/proto/tablestorepb"
)

// TestOversizedRequestIDRefused: a write whose request id could not be
// indexed (bbolt's key limit) is refused before the log with
// InvalidArgument, and nothing of it is applied; a write with an id at
// the bound goes through.
func TestOversizedRequestIDRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.Start(t, 1, 3)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, time.Minute)
	const table = "requestid"
	clustertest.NewTable(t, sc, table)
	id := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()
	write := func(rk string, reqID []byte) error {
		e := &edm.Entity{PartitionKey: "p", RowKey: rk}
		var err error
		clustertest.WaitFor(t, 30*time.Second, "a leader to answer", func() bool {
			l := clustertest.RangeLeader(c, table)
			if l < 0 {
				return false
			}
			_, err = c.Servers[l].Server.Service().Write(ctx, &pb.WriteRequest{RangeId: id, RequestId: reqID, Ops: []*pb.EntityOp{{
				Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: rk, Entity: edm.MarshalBinary(e)}}})
			return status.Code(err) != codes.Unavailable && status.Code(err) != codes.FailedPrecondition
		})
		return err
	}
	if err := write("big", bytes.Repeat([]byte{'x'}, 40000)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("write with a 40,000-byte request id: %v, want InvalidArgument", err)
	}
	if err := write("edge", bytes.Repeat([]byte{'y'}, 1024)); err != nil {
		t.Fatalf("write with a 1,024-byte request id: %v", err)
	}
	tc := sc.NewClient(table)
	if _, err := tc.GetEntity(context.Background(), "p", "big", nil); !clustertest.IsStatus(err, 404) {
		t.Fatalf("the refused write's entity: %v, want 404", err)
	}
	if _, err := tc.GetEntity(ctx, "p", "edge", nil); err != nil {
		t.Fatalf("the accepted write's entity: %v", err)
	}
}
