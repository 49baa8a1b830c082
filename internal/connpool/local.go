package connpool

import (
	"context"

	"google.golang.org/grpc"

	pb "tablestore/proto/tablestorepb"
)

// RegisterLocal makes calls to addr go straight to srv, a partition server
// running in this process, instead of through a loopback gRPC connection.
// `tablestore dev` runs every role in one process; like a database's local
// RPC bypass, this skips the HTTP/2 framing and two socket round trips per
// call while keeping the same request, response and error values.
func (p *Pool) RegisterLocal(addr string, srv pb.PartitionServiceServer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.local == nil {
		p.local = map[string]pb.PartitionServiceClient{}
	}
	p.local[addr] = localClient{srv}
}

// UnregisterLocal sends calls to addr over gRPC again (the local server
// stopped).
func (p *Pool) UnregisterLocal(addr string) {
	p.mu.Lock()
	delete(p.local, addr)
	p.mu.Unlock()
}

// localClient adapts a PartitionServiceServer to the client interface.
type localClient struct{ s pb.PartitionServiceServer }

var _ pb.PartitionServiceClient = localClient{}

func (l localClient) Write(ctx context.Context, in *pb.WriteRequest, _ ...grpc.CallOption) (*pb.WriteResponse, error) {
	return l.s.Write(ctx, in)
}

func (l localClient) WriteMany(ctx context.Context, in *pb.WriteManyRequest, _ ...grpc.CallOption) (*pb.WriteManyResponse, error) {
	return l.s.WriteMany(ctx, in)
}

func (l localClient) Get(ctx context.Context, in *pb.GetRequest, _ ...grpc.CallOption) (*pb.GetResponse, error) {
	return l.s.Get(ctx, in)
}

func (l localClient) GetMany(ctx context.Context, in *pb.GetManyRequest, _ ...grpc.CallOption) (*pb.GetManyResponse, error) {
	return l.s.GetMany(ctx, in)
}

// IsLocal reports whether c calls a partition server of this process
// directly (RegisterLocal): a call to it costs no more than the work it
// carries, so there is nothing to gain by coalescing calls to it.
func IsLocal(c pb.PartitionServiceClient) bool {
	_, ok := c.(localClient)
	return ok
}

func (l localClient) Query(ctx context.Context, in *pb.QueryRequest, _ ...grpc.CallOption) (*pb.QueryResponse, error) {
	return l.s.Query(ctx, in)
}

func (l localClient) CreateReplica(ctx context.Context, in *pb.CreateReplicaRequest, _ ...grpc.CallOption) (*pb.CreateReplicaResponse, error) {
	return l.s.CreateReplica(ctx, in)
}

func (l localClient) DeleteReplica(ctx context.Context, in *pb.DeleteReplicaRequest, _ ...grpc.CallOption) (*pb.DeleteReplicaResponse, error) {
	return l.s.DeleteReplica(ctx, in)
}

func (l localClient) RangeInfo(ctx context.Context, in *pb.RangeInfoRequest, _ ...grpc.CallOption) (*pb.RangeInfoResponse, error) {
	return l.s.RangeInfo(ctx, in)
}

func (l localClient) SplitRange(ctx context.Context, in *pb.SplitRangeRequest, _ ...grpc.CallOption) (*pb.SplitRangeResponse, error) {
	return l.s.SplitRange(ctx, in)
}

func (l localClient) DetachRange(ctx context.Context, in *pb.DetachRangeRequest, _ ...grpc.CallOption) (*pb.DetachRangeResponse, error) {
	return l.s.DetachRange(ctx, in)
}

func (l localClient) AddSpan(ctx context.Context, in *pb.AddSpanRequest, _ ...grpc.CallOption) (*pb.AddSpanResponse, error) {
	return l.s.AddSpan(ctx, in)
}

func (l localClient) AttachSpan(ctx context.Context, in *pb.AttachSpanRequest, _ ...grpc.CallOption) (*pb.AttachSpanResponse, error) {
	return l.s.AttachSpan(ctx, in)
}

func (l localClient) FreezeRange(ctx context.Context, in *pb.FreezeRangeRequest, _ ...grpc.CallOption) (*pb.FreezeRangeResponse, error) {
	return l.s.FreezeRange(ctx, in)
}

func (l localClient) MergeRange(ctx context.Context, in *pb.MergeRangeRequest, _ ...grpc.CallOption) (*pb.MergeRangeResponse, error) {
	return l.s.MergeRange(ctx, in)
}

func (l localClient) UnfreezeRange(ctx context.Context, in *pb.UnfreezeRangeRequest, _ ...grpc.CallOption) (*pb.UnfreezeRangeResponse, error) {
	return l.s.UnfreezeRange(ctx, in)
}

func (l localClient) ChangeReplicas(ctx context.Context, in *pb.ChangeReplicasRequest, _ ...grpc.CallOption) (*pb.ChangeReplicasResponse, error) {
	return l.s.ChangeReplicas(ctx, in)
}

func (l localClient) TransferLeader(ctx context.Context, in *pb.TransferLeaderRequest, _ ...grpc.CallOption) (*pb.TransferLeaderResponse, error) {
	return l.s.TransferLeader(ctx, in)
}

func (l localClient) SplitKey(ctx context.Context, in *pb.SplitKeyRequest, _ ...grpc.CallOption) (*pb.SplitKeyResponse, error) {
	return l.s.SplitKey(ctx, in)
}

func (l localClient) ReadIndex(ctx context.Context, in *pb.ReadIndexRequest, _ ...grpc.CallOption) (*pb.ReadIndexResponse, error) {
	return l.s.ReadIndex(ctx, in)
}

func (l localClient) AppliedIndex(ctx context.Context, in *pb.AppliedIndexRequest, _ ...grpc.CallOption) (*pb.AppliedIndexResponse, error) {
	return l.s.AppliedIndex(ctx, in)
}
