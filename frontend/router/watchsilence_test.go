package router

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "tablestore/proto/tablestorepb"
)

// silentMaster streams the whole map, optionally one keepalive, and then
// nothing, with the stream left open: a link that drops packets without
// closing, as a firewall or a hung host leaves it.
type silentMaster struct {
	pb.UnimplementedMasterServiceServer
	keepalive bool
	streams   atomic.Int32
}

func (f *silentMaster) GetPartitionMap(context.Context, *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	return &pb.PartitionMap{Epoch: 1, Version: 1}, nil
}

func (f *silentMaster) WatchPartitionMap(_ *pb.WatchPartitionMapRequest, stream pb.MasterService_WatchPartitionMapServer) error {
	f.streams.Add(1)
	if err := stream.Send(&pb.PartitionMap{Epoch: 1, Version: 1, Keepalives: f.keepalive}); err != nil {
		return err
	}
	if f.keepalive {
		if err := stream.Send(&pb.PartitionMap{Delta: true, Keepalive: true, Epoch: 1, Version: 1}); err != nil {
			return err
		}
	}
	<-stream.Context().Done()
	return nil
}

// TestWatchSilenceIsALostMaster: a watch stream whose master has sent a
// keepalive and then falls silent is a lost master: the front-end starts
// over (a new stream, another master if there is one), and meanwhile its
// map counts as stale (readiness, stored access policies). Before, such a
// stream counted as a live master for good. A master that never sent a
// keepalive (an older version, silent while nothing changes) is waited on
// as before.
func TestWatchSilenceIsALostMaster(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepalive bool
		lost      bool
	}{
		{"a master that sends keepalives, silent", true, true},
		{"an older master, silent", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fm := &silentMaster{keepalive: tc.keepalive}
			r := startedWithMaster(t, fm, 300*time.Millisecond)
			deadline := time.Now().Add(10 * time.Second)
			for !r.watch.watching.Load() {
				if time.Now().After(deadline) {
					t.Fatal("the watch never delivered")
				}
				time.Sleep(10 * time.Millisecond)
			}
			// Long enough for the silence to end a stream more than once.
			deadline = time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) && fm.streams.Load() < 3 {
				time.Sleep(20 * time.Millisecond)
			}
			if got := fm.streams.Load() >= 3; got != tc.lost {
				t.Fatalf("%d watch streams opened in 3 s, want a new one after each silence: %v", fm.streams.Load(), tc.lost)
			}
		})
	}
}

// startedWithMaster starts a router whose only master is m (served on a
// loopback port) with the given watch silence.
func startedWithMaster(t *testing.T, m pb.MasterServiceServer, silence time.Duration) *Router {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterMasterServiceServer(srv, m)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cfg := DefaultConfig()
	cfg.Masters = []string{ln.Addr().String()}
	r, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r.watchSilence = silence
	t.Cleanup(r.Close)
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}
