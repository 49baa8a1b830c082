package partitionserver

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

func TestPlanJoin(t *testing.T) {
	listing := func(servers ...string) *pb.RangeDescriptor {
		d := &pb.RangeDescriptor{RangeId: 7, Generation: 4}
		for _, s := range servers {
			d.Replicas = append(d.Replicas, &pb.Replica{ServerId: s})
		}
		return d
	}
	answer := func(d *pb.RangeDescriptor, term, index uint64) *pb.JoinFloorResponse {
		return &pb.JoinFloorResponse{Range: d, FloorTerm: term, FloorIndex: index}
	}
	for _, tc := range []struct {
		name  string
		resp  *pb.JoinFloorResponse
		err   error
		step  joinStep
		floor joinFloor
	}{
		{name: "floor given", resp: answer(listing("ps1", "ps2", "ps3"), 5, 120), step: joinCreate, floor: joinFloor{5, 120}},
		// A leader on an older server answers no floor: nobody can give
		// one, and the replica joins as before.
		{name: "leader gives none", resp: answer(listing("ps1", "ps2", "ps3"), 0, 0), step: joinCreate},
		{name: "map moved on", resp: answer(listing("ps1", "ps2", "ps4"), 5, 120), step: joinSkip},
		{name: "not assigned", err: rpcerr.New(codes.FailedPrecondition, "", "range 7 has no replica on ps3", nil), step: joinSkip},
		{name: "range gone", err: rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "range 7 not found", nil), step: joinSkip},
		{name: "older master", err: status.Error(codes.Unimplemented, "unknown method JoinFloor"), step: joinUnprotected},
		// Everything else is "not now": the replica is not created
		// without its floor.
		{name: "no leader confirms", err: rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "join floor of range 7: not leader", nil), step: joinRetry},
		{name: "deadline", err: status.Error(codes.DeadlineExceeded, "context deadline exceeded"), step: joinRetry},
		{name: "no master", err: errors.New("masterclient: no master leader reachable"), step: joinRetry},
		{name: "internal", err: status.Error(codes.Internal, "boom"), step: joinRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step, floor, d := planJoin(tc.resp, tc.err, "ps3")
			if step != tc.step || floor != tc.floor {
				t.Fatalf("planJoin = %v %+v, want %v %+v", step, floor, tc.step, tc.floor)
			}
			if (step == joinCreate) != (d != nil) {
				t.Fatalf("descriptor %v with step %v", d, step)
			}
			if step == joinCreate && d != tc.resp.GetRange() {
				t.Fatalf("descriptor %v, want the master's %v", d, tc.resp.GetRange())
			}
		})
	}
}

// A Join whose descriptor predates a delete that removed this server (the
// delete ran first and found nothing) creates nothing; a descriptor at or
// past the removal (the server added back) creates the replica with its
// floor.
func TestCreateJoinedAfterRemoval(t *testing.T) {
	s := startedServer(t)
	const id = 43
	listed := func(gen uint64) *pb.RangeDescriptor {
		d := moveDesc(id, gen)
		d.Replicas = append(d.Replicas, &pb.Replica{ServerId: "f"})
		return d
	}
	if err := s.deleteReplica(id, 6, 0); err != nil {
		t.Fatalf("delete of an absent replica: %v", err)
	}
	if err := s.createJoined(listed(5), nil, joinFloor{4, 30}); !errors.Is(err, errRemovedHere) {
		t.Fatalf("join at generation 5 after a removal at 6: %v, want errRemovedHere", err)
	}
	if s.hosts(id) {
		t.Fatal("replica created from a descriptor older than the removal")
	}
	// A lower removal changes nothing.
	s.noteRemoval(id, 3)
	if err := s.createJoined(listed(6), nil, joinFloor{4, 30}); err != nil {
		t.Fatalf("join at the removal's generation: %v", err)
	}
	if got, err := storedFloor(s.logs.Log(id)); err != nil || got != (joinFloor{4, 30}) {
		t.Fatalf("stored floor %v, %v; want {4 30}", got, err)
	}
}
