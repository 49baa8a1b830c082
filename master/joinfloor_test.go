package master

import (
	"testing"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

func TestJoinFloorRefusal(t *testing.T) {
	d := &pb.RangeDescriptor{RangeId: 7, Generation: 3, Replicas: []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}}
	for _, tc := range []struct {
		name   string
		d      *pb.RangeDescriptor
		ok     bool
		server string
		want   codes.Code // codes.OK: answered
	}{
		{name: "listed", d: d, ok: true, server: "ps3", want: codes.OK},
		{name: "not listed", d: d, ok: true, server: "ps4", want: codes.FailedPrecondition},
		{name: "no server id", d: d, ok: true, server: "", want: codes.FailedPrecondition},
		{name: "range gone", ok: false, server: "ps3", want: codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := joinFloorRefusal(7, tc.d, tc.ok, tc.server)
			got := codes.OK
			if err != nil {
				got = rpcerr.Parse(err).Code
			}
			if got != tc.want {
				t.Fatalf("joinFloorRefusal = %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}

// JoinFloor's refusal for a reason of the range (no leader confirms
// itself; the range changed during the call) is not one the partition
// server's master client takes for a master that is down or not the
// leader (Unavailable, DeadlineExceeded, NOT_LEADER): answered so, it
// moved the client, which the server's heartbeats share, off the master
// leader.
func TestNoJoinFloorKeepsTheMaster(t *testing.T) {
	info := rpcerr.Parse(errNoJoinFloor("join floor of range 7: not leader"))
	if info.Code != codes.Aborted || info.Reason != rpcerr.ReasonNoJoinFloor {
		t.Fatalf("refusal %v %q, want Aborted %q", info.Code, info.Reason, rpcerr.ReasonNoJoinFloor)
	}
	if joinFloorSearch.Rounds <= 0 || joinFloorSearch.AttemptTimeout <= 0 || joinFloorSearch.AttemptTimeout >= joinFloorLeaderWait {
		t.Fatalf("leader search %+v: want a rounds cap and an attempt timeout below %v", joinFloorSearch, joinFloorLeaderWait)
	}
}
