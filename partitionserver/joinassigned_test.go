package partitionserver

import (
	"errors"
	"testing"
	"time"

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
		{name: "no leader confirms", err: rpcerr.New(codes.Aborted, rpcerr.ReasonNoJoinFloor, "join floor of range 7: not leader", nil), step: joinRetry},
		{name: "older master's no leader", err: rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "join floor of range 7: not leader", nil), step: joinRetry},
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
	// Created at the removal's generation, the range's removal is
	// forgotten (a later one is noted again).
	if gen, ok := s.removedAt.Load(id); ok {
		t.Fatalf("removal at generation %v still remembered after the replica was created at 6", gen)
	}
}

// The Join bookkeeping: one call per range, at most maxJoinsInFlight, a
// pause after a call that gave no floor (doubling from joinRetryFirst to
// joinRetryMax, forgotten on any other outcome), and a range in its pause
// leaves its slot to the others: 32 leaderless ranges first in the
// assignments no longer starve the rest.
func TestJoinTracker(t *testing.T) {
	var j joinTracker
	now := time.Unix(1000, 0)
	// 32 leaderless ranges take every slot.
	for id := uint64(1); id <= maxJoinsInFlight; id++ {
		if !j.begin(id, now) {
			t.Fatalf("range %d refused with %d in flight", id, id-1)
		}
	}
	if j.begin(1, now) {
		t.Fatal("a second call for range 1 started")
	}
	if j.begin(100, now) {
		t.Fatal("a call beyond the cap started")
	}
	// They give no floor: each is paused, and the healthy range gets a
	// slot while they wait, however often reconcile asks for them first.
	for id := uint64(1); id <= maxJoinsInFlight; id++ {
		if n := j.end(id, true, now); n != 1 {
			t.Fatalf("range %d: %d failures in a row, want 1", id, n)
		}
	}
	later := now.Add(joinRetryFirst / 2)
	for id := uint64(1); id <= maxJoinsInFlight; id++ {
		if j.begin(id, later) {
			t.Fatalf("range %d asked again during its pause", id)
		}
	}
	if !j.begin(100, later) {
		t.Fatal("the healthy range found no slot while the leaderless ones were paused")
	}
	if n := j.end(100, false, later); n != 0 {
		t.Fatalf("a created range counts %d failures", n)
	}
	// The pause doubles up to joinRetryMax (range 1 failed once at now).
	at := now
	for i, pause := range []time.Duration{joinRetryFirst, min(2*joinRetryFirst, joinRetryMax), min(4*joinRetryFirst, joinRetryMax), joinRetryMax, joinRetryMax} {
		if j.begin(1, at.Add(pause-time.Millisecond)) {
			t.Fatalf("failure %d: range 1 asked again before its %v pause", i+1, pause)
		}
		at = at.Add(pause)
		if !j.begin(1, at) {
			t.Fatalf("failure %d: range 1 not asked again after its %v pause", i+1, pause)
		}
		if n := j.end(1, true, at); n != i+2 {
			t.Fatalf("%d failures in a row, want %d", n, i+2)
		}
	}
	// Any other outcome forgets the pause and the count.
	if !j.begin(1, at.Add(joinRetryMax)) {
		t.Fatal("range 1 not asked again after the longest pause")
	}
	j.end(1, false, at.Add(joinRetryMax))
	if !j.begin(1, at.Add(joinRetryMax)) {
		t.Fatal("range 1 still paused after a call that gave a floor")
	}
	j.end(1, false, at.Add(joinRetryMax))
	// Pauses long over are swept; nothing is left in flight.
	far := at.Add(time.Hour)
	j.begin(200, far)
	j.end(200, false, far)
	if inFlight, paused := j.busy(); inFlight != 0 || paused != 0 {
		t.Fatalf("after every call ended and an hour: %d in flight, %d paused; want none", inFlight, paused)
	}
}
