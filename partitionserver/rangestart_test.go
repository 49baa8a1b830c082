package partitionserver

import (
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestAssignedStarted: which assigned generation-1 ranges the server takes
// for started (to Join with a floor) from the heartbeat answer it holds.
func TestAssignedStarted(t *testing.T) {
	tests := []struct {
		name string
		resp *pb.HeartbeatResponse
		want bool
	}{
		{"older master: records no starts, bootstrap as before", &pb.HeartbeatResponse{}, false},
		{"older master listing nothing", &pb.HeartbeatResponse{UnstartedRangeIds: nil}, false},
		{"listed unstarted: bootstrap", &pb.HeartbeatResponse{RangeStartsKnown: true, UnstartedRangeIds: []uint64{4, 7}}, false},
		{"not listed: started", &pb.HeartbeatResponse{RangeStartsKnown: true, UnstartedRangeIds: []uint64{4}}, true},
		{"none unstarted", &pb.HeartbeatResponse{RangeStartsKnown: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rp reportState
			rp.take(tt.resp)
			if got := rp.started(7); got != tt.want {
				t.Fatalf("started(7) = %v, want %v", got, tt.want)
			}
		})
	}
}
