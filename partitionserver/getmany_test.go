package partitionserver

import (
	"bytes"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestCapAnswer: a GetMany answer keeps its entities within the budget;
// the reads past it get a retryable refusal, the first answered read is
// always kept, and refusals already in the answer stay as they are.
func TestCapAnswer(t *testing.T) {
	ok := func(n int) *pb.GetManyResult {
		return &pb.GetManyResult{Response: &pb.GetResponse{Entity: bytes.Repeat([]byte{'x'}, n)}}
	}
	notFound, _ := proto.Marshal(status.Convert(rpcerr.New(codes.NotFound, rpcerr.ReasonEntityNotFound, "no", nil)).Proto())
	failed := &pb.GetManyResult{Status: notFound}
	tests := []struct {
		name    string
		results []*pb.GetManyResult
		budget  int
		kept    []bool // per result: still answered (or its own refusal)
	}{
		{"within the budget", []*pb.GetManyResult{ok(3), ok(3), failed, ok(4)}, 10, []bool{true, true, true, true}},
		{"past the budget", []*pb.GetManyResult{ok(4), ok(4), ok(4), ok(1)}, 10, []bool{true, true, false, false}},
		{"the first answered read is kept alone", []*pb.GetManyResult{failed, ok(50), ok(1)}, 10, []bool{true, true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			capAnswer(tt.results, tt.budget)
			for i, r := range tt.results {
				if r.GetResponse() != nil {
					if !tt.kept[i] {
						t.Errorf("result %d answered past the budget", i)
					}
					continue
				}
				var st spb.Status
				if err := proto.Unmarshal(r.GetStatus(), &st); err != nil {
					t.Fatalf("result %d: %v", i, err)
				}
				err := status.ErrorProto(&st)
				switch {
				case tt.kept[i] && rpcerr.Parse(err).Reason != rpcerr.ReasonEntityNotFound:
					t.Errorf("result %d: %v, want it kept", i, err)
				case !tt.kept[i] && (status.Code(err) != codes.Unavailable || rpcerr.Parse(err).Reason != rpcerr.ReasonUnavailable):
					t.Errorf("result %d: %v, want a retryable UNAVAILABLE", i, err)
				}
			}
		})
	}
}
