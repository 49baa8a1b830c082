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
		if err := stream.Send(&pb.PartitionMap{Epoch: 1, Version: 1, Keepalives: true}); err != nil {
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

// upgradedAwayMaster answers the first stream as a master that sends
// keepalives and every later one as an older master (a rolling upgrade
// that moved the front-end's stream back to a master not yet upgraded):
// the whole map without keepalives, then silence while nothing changes.
type upgradedAwayMaster struct {
	pb.UnimplementedMasterServiceServer
	streams atomic.Int32
}

func (f *upgradedAwayMaster) GetPartitionMap(context.Context, *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	return &pb.PartitionMap{Epoch: 1, Version: 1}, nil
}

func (f *upgradedAwayMaster) WatchPartitionMap(_ *pb.WatchPartitionMapRequest, stream pb.MasterService_WatchPartitionMapServer) error {
	newer := f.streams.Add(1) == 1
	if err := stream.Send(&pb.PartitionMap{Epoch: 1, Version: 1, Keepalives: newer}); err != nil {
		return err
	}
	if newer {
		// Then silent: the link is lost, and the front-end starts over.
		if err := stream.Send(&pb.PartitionMap{Delta: true, Keepalive: true, Epoch: 1, Version: 1}); err != nil {
			return err
		}
	}
	<-stream.Context().Done()
	return nil
}

// TestOlderMasterStreamNotTimed: a front-end that has seen keepalives
// times a new stream from its start, but an older master's whole map (no
// keepalives announced) disarms the timer: that master is silent while
// nothing changes. Before, the front-end ended such a stream after every
// quiet watchSilence and took a whole map again, for as long as a rolling
// upgrade left that master unupgraded.
func TestOlderMasterStreamNotTimed(t *testing.T) {
	fm := &upgradedAwayMaster{}
	r := startedWithMaster(t, fm, 300*time.Millisecond)
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) && fm.streams.Load() < 2 {
		time.Sleep(20 * time.Millisecond)
	}
	if n := fm.streams.Load(); n < 2 {
		t.Fatalf("%d watch streams in 4 s: the first, silent after its keepalive, was not ended", n)
	}
	// Long enough for the silence bound to end the second stream several
	// times over.
	time.Sleep(1500 * time.Millisecond)
	if n := fm.streams.Load(); n != 2 {
		t.Fatalf("%d watch streams: the older master's quiet stream was ended by the silence bound", n)
	}
	if !r.watch.watching.Load() {
		t.Fatal("not watching the older master's stream")
	}
}
