package router

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// blackHoleMaster: the first stream delivers the map and a keepalive, then
// the link drops packets; every later stream on the same (still "ready")
// connection gets nothing at all, not even the whole map, as a black-holed
// TCP connection leaves it.
type blackHoleMaster struct {
	pb.UnimplementedMasterServiceServer
	streams atomic.Int32
}

func (f *blackHoleMaster) GetPartitionMap(context.Context, *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	return &pb.PartitionMap{Epoch: 1, Version: 1}, nil
}

func (f *blackHoleMaster) WatchPartitionMap(_ *pb.WatchPartitionMapRequest, stream pb.MasterService_WatchPartitionMapServer) error {
	if f.streams.Add(1) == 1 {
		if err := stream.Send(&pb.PartitionMap{Epoch: 1, Version: 1}); err != nil {
			return err
		}
		if err := stream.Send(&pb.PartitionMap{Delta: true, Keepalive: true, Epoch: 1, Version: 1}); err != nil {
			return err
		}
	}
	<-stream.Context().Done()
	return nil
}

// TestSilenceAfterReconnectIsArmed: once a front-end has seen a
// keepalive, every later stream is timed from its start: after the
// silence ended the first stream, the next one on a link that still drops
// packets delivers not even the whole map, and must end too, so that the
// front-end keeps trying (another master, or this one once the link
// heals). Before, it was armed only by a keepalive seen on the same
// stream, and the front-end hung on the second stream for good.
func TestSilenceAfterReconnectIsArmed(t *testing.T) {
	fm := &blackHoleMaster{}
	r := startedWithMaster(t, fm, 300*time.Millisecond)
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) && fm.streams.Load() < 3 {
		time.Sleep(20 * time.Millisecond)
	}
	if n := fm.streams.Load(); n < 3 {
		t.Fatalf("%d watch streams in 4 s with a 300 ms silence bound: the stream after the first silence hangs unarmed (watching=%v, stale for %v)",
			n, r.watch.watching.Load(), r.MapStaleFor().Round(time.Millisecond))
	}
}
