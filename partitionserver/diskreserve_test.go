package partitionserver

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/edm"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestDiskReserveRefusesWrites has a range leader's data directory fall
// under its free-space reserve: client writes are refused with 503
// ServerBusy naming the directory, before the log (nothing of them is
// applied), reads go on, and writes are taken again once space is freed,
// without a restart.
func TestDiskReserveRefusesWrites(t *testing.T) {
	s := startedServer(t)
	const id = 48
	rep, v := leadingRangeWithWrites(t, s, id, 1, 1)
	var free atomic.Uint64
	free.Store(1 << 40)
	s.disk.reserve = 100 << 20
	s.disk.space = func(string) (uint64, uint64, bool) { return free.Load(), 1 << 41, true }
	write := func(rk string) error {
		op := &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: rk,
			Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: "p", RowKey: rk})}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := v.Write(ctx, &pb.WriteRequest{RangeId: id, Generation: 1, Ops: []*pb.EntityOp{op}, RequestId: []byte("id-" + rk)})
		return err
	}
	if err := write("before"); err != nil {
		t.Fatalf("write with room: %v", err)
	}

	free.Store(10 << 20)
	s.disk.sampledAt.Store(0) // the next write samples
	applied := rep.group.Spans()[0].State().GetAppliedIndex()
	err := write("full")
	info := rpcerr.Parse(err)
	if info.Code != codes.ResourceExhausted || info.Reason != rpcerr.ReasonServerBusy || !strings.Contains(err.Error(), s.cfg.DataDir) {
		t.Fatalf("write under the reserve: %v; want ResourceExhausted/ServerBusy naming %s", err, s.cfg.DataDir)
	}
	if got := rep.group.Spans()[0].State().GetAppliedIndex(); got != applied {
		t.Fatalf("applied index %d after the refused write, was %d: it reached the log", got, applied)
	}

	free.Store(1 << 40)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := write("after")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("write after space was freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
