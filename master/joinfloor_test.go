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
