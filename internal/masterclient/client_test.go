package masterclient

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "tablestore/proto/tablestorepb"
)

// answering is a master that answers every GetPartitionMap.
type answering struct {
	pb.UnimplementedMasterServiceServer
}

func (answering) GetPartitionMap(context.Context, *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	return &pb.PartitionMap{}, nil
}

// TestReconnectSoonAfterOutage: a client that kept calling a master it could
// not reach for seconds (a server cut off, chaos seed 299) reaches it again
// soon after it is back. With gRPC's default reconnect backoff (1 s growing
// by 1.6 up to 120 s) the first call after a 6 s outage succeeded 2 - 4 s
// after the master listened again; a partition server's heartbeat, and what
// the master's answer creates, waited that long.
func TestReconnectSoonAfterOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 6 s outage")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every connection attempt is refused
	c, err := New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func(limit time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		return c.Call(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
			_, err := mc.GetPartitionMap(ctx, &pb.GetPartitionMapRequest{})
			return err
		})
	}
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); {
		if err := call(500 * time.Millisecond); err == nil {
			t.Fatal("a call succeeded with no master listening")
		}
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the master's port was taken meanwhile: %v", err)
	}
	srv := grpc.NewServer()
	pb.RegisterMasterServiceServer(srv, answering{})
	go srv.Serve(ln)
	defer srv.Stop()
	back := time.Now()
	deadline := back.Add(10 * time.Second)
	for call(time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no call succeeded within 10 s of the master listening")
		}
	}
	// The client's backoff is at most 500 ms (+20 % jitter); 2 s leaves a
	// loaded machine room and still fails the default backoff.
	if took := time.Since(back); took > 2*time.Second {
		t.Fatalf("first successful call %v after the master listened again, want within 2 s", took.Round(time.Millisecond))
	} else {
		t.Logf("first successful call %v after the master listened again", took.Round(time.Millisecond))
	}
}
