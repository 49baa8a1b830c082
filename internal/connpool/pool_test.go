package connpool

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

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
