package connpool

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	pb "tablestore/proto/tablestorepb"
)

type bigServer struct {
	pb.UnimplementedPartitionServiceServer
	entity []byte
}

func (s *bigServer) Get(ctx context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	return &pb.GetResponse{Entity: s.entity}, nil
}

func (s *bigServer) GetMany(ctx context.Context, req *pb.GetManyRequest) (*pb.GetManyResponse, error) {
	out := &pb.GetManyResponse{}
	for _, g := range req.GetGets() {
		out.Results = append(out.Results, &pb.GetManyResult{Response: &pb.GetResponse{Entity: []byte(g.GetRowKey())}})
	}
	return out, nil
}

// TestFixedWindowsCarryLargeMessages: with the fixed flow-control windows
// on both sides, messages several times a stream's window go through
// (window updates, not estimation, keep them moving), alone and with
// concurrent calls on the same connection.
func TestFixedWindowsCarryLargeMessages(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 5*windowSize+123)
	srv := grpc.NewServer(append(ServerOptions(), grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20))...)
	pb.RegisterPartitionServiceServer(srv, &bigServer{entity: big})
	go srv.Serve(lis)
	defer srv.Stop()
	p := New()
	defer p.Close()
	c, err := p.Partition(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			resp, err := c.Get(ctx, &pb.GetRequest{})
			if err == nil && !bytes.Equal(resp.GetEntity(), big) {
				t.Errorf("entity of %d bytes, want %d", len(resp.GetEntity()), len(big))
			}
			errs <- err
		}()
	}
	req := &pb.GetManyRequest{Gets: []*pb.GetRequest{{RowKey: string(big)}, {RowKey: "small"}}}
	resp, err := c.GetMany(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResults()) != 2 || !bytes.Equal(resp.GetResults()[0].GetResponse().GetEntity(), big) || string(resp.GetResults()[1].GetResponse().GetEntity()) != "small" {
		t.Fatal("large request did not round-trip")
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestReconnectSoonAfterOutage: a pooled connection to a server that was
// down for seconds is ready again soon after the server listens (Reconnect).
// With gRPC's default backoff (1 s growing by 1.6) the front-end reached a
// leader back from a 2 - 5 s outage ~2.5 s after it listened, and its
// router's calls failed at once meanwhile (chaos seeds 217 and 233).
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
	p := New()
	defer p.Close()
	c, err := p.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		c.Connect() // as calls do: keep the channel trying
		if c.GetState() == connectivity.Ready {
			t.Fatal("connected with nothing listening")
		}
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := grpc.NewServer()
	go srv.Serve(ln)
	defer srv.Stop()
	back := time.Now()
	for deadline := back.Add(10 * time.Second); c.GetState() != connectivity.Ready; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not connected within 10 s of the server listening")
		}
		c.Connect()
	}
	// Reconnect's backoff is at most 500 ms (+20 % jitter); 2 s leaves a
	// loaded machine room and still fails gRPC's default backoff.
	if took := time.Since(back); took > 2*time.Second {
		t.Fatalf("ready %v after the server listened again, want within 2 s", took.Round(time.Millisecond))
	} else {
		t.Logf("ready %v after the server listened again", took.Round(time.Millisecond))
	}
}
