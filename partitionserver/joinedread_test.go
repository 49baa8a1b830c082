package partitionserver

import (
	"context"
	"testing"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestJoinedEmptyReplicaRefusesFollowerReads: a replica a Join creates
// (a server down across a split, or one whose replica was lost) is
// created empty with the master's descriptor, which lists it; until its
// snapshot arrives it must not answer the secondary: it would answer from
// nothing: every entity of the range "not found".
func TestJoinedEmptyReplicaRefusesFollowerReads(t *testing.T) {
	s := startedServer(t)
	const id = 43
	d := &pb.RangeDescriptor{RangeId: id, Table: "t", TableId: 7, Generation: 3,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "f"}}}
	if err := s.createJoined(d, nil, joinFloor{term: 7, index: 50}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Service().Get(context.Background(), &pb.GetRequest{RangeId: id, PartitionKey: "p", RowKey: "r", FollowerRead: true})
	if rpcerr.Parse(err).Reason != rpcerr.ReasonStaleRange {
		t.Fatalf("follower read on an empty joined replica (applied 0, floor 50): %v; want %s (it holds none of the range's entities)", err, rpcerr.ReasonStaleRange)
	}
}
