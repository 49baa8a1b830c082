package partitionserver

import (
	"context"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// floorMaster answers JoinFloor per range as told, and counts the calls.
type floorMaster struct {
	pb.UnimplementedMasterServiceServer
	mu      sync.Mutex
	answers map[uint64]func() (*pb.JoinFloorResponse, error)
	calls   map[uint64]int
}

func (m *floorMaster) JoinFloor(_ context.Context, req *pb.JoinFloorRequest) (*pb.JoinFloorResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[req.GetRangeId()]++
	return m.answers[req.GetRangeId()]()
}

func (m *floorMaster) called(id uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[id]
}

func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// joinAssigned end to end against a master: each outcome of JoinFloor
// leaves no call in flight; a refusal for a reason of the range pauses
// the range (asked again only after the pause) and creates nothing; a
// floor creates the replica with it; a zero floor creates it without one,
// counted once created.
func TestJoinAssignedWiring(t *testing.T) {
	listing := func(id uint64) *pb.RangeDescriptor {
		return &pb.RangeDescriptor{RangeId: id, Table: "t", TableId: 7, Generation: 3,
			Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "f"}}}
	}
	const (
		noFloor = 51 // no leader confirms itself
		moved   = 52 // the map no longer lists this server
		floored = 53
		zero    = 54 // the leader's server gives none
		born    = 55 // a missed split recorded it (missedsplit.go), no leader
		reborn  = 56 // recorded, but moved since its birth, no leader
		boot    = 57 // bootstrapped here
	)
	m := &floorMaster{calls: map[uint64]int{}, answers: map[uint64]func() (*pb.JoinFloorResponse, error){
		noFloor: func() (*pb.JoinFloorResponse, error) {
			return nil, rpcerr.New(codes.Aborted, rpcerr.ReasonNoJoinFloor, "join floor of range 51: not leader", nil)
		},
		moved: func() (*pb.JoinFloorResponse, error) {
			return nil, rpcerr.New(codes.FailedPrecondition, "", "range 52 has no replica on f", nil)
		},
		floored: func() (*pb.JoinFloorResponse, error) {
			return &pb.JoinFloorResponse{Range: listing(floored), FloorTerm: 5, FloorIndex: 20}, nil
		},
		zero: func() (*pb.JoinFloorResponse, error) {
			return &pb.JoinFloorResponse{Range: listing(zero)}, nil
		},
		born: func() (*pb.JoinFloorResponse, error) {
			return nil, rpcerr.New(codes.Aborted, rpcerr.ReasonNoJoinFloor, "join floor of range 55: not leader", nil)
		},
		reborn: func() (*pb.JoinFloorResponse, error) {
			return nil, rpcerr.New(codes.Aborted, rpcerr.ReasonNoJoinFloor, "join floor of range 56: not leader", nil)
		},
	}}
	s := started(t, newAgainstMaster(t, m, func(c *Config) { c.HeartbeatInterval = DefaultConfig().HeartbeatInterval }))

	settled := func(what string, want int) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if inFlight, paused := s.joins.busy(); inFlight == 0 && paused == want {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: %d calls in flight, %d ranges paused; want 0 and %d", what, inFlight, paused, want)
			}
		}
	}
	before := counterValue(t, joinWithoutFloorTotal)

	// No floor: nothing created, the range paused.
	s.joinAssigned(listing(noFloor), nil)
	settled("no floor", 1)
	if s.hosts(noFloor) {
		t.Fatal("replica created without its floor")
	}
	s.joinAssigned(listing(noFloor), nil) // during its pause: no call
	if n := m.called(noFloor); n != 1 {
		t.Fatalf("range %d asked %d times within its pause, want once", noFloor, n)
	}
	for deadline := time.Now().Add(20 * time.Second); m.called(noFloor) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the paused range never asked again")
		}
		s.joinAssigned(listing(noFloor), nil) // reconcile's next passes
	}
	settled("no floor again", 1)

	// Moved away: nothing created, nothing paused but the first.
	s.joinAssigned(listing(moved), nil)
	settled("moved", 1)
	if s.hosts(moved) {
		t.Fatal("replica created for a range the map moved away")
	}

	// A floor: created with it, not counted.
	s.joinAssigned(listing(floored), nil)
	settled("floored", 1)
	if !s.hosts(floored) {
		t.Fatal("replica not created with its floor")
	}
	if got, err := storedFloor(s.logs.Log(floored)); err != nil || got != (joinFloor{5, 20}) {
		t.Fatalf("stored floor %v, %v; want {5 20}", got, err)
	}
	if n := counterValue(t, joinWithoutFloorTotal) - before; n != 0 {
		t.Fatalf("%v floorless creations counted after one with its floor", n)
	}
	if marked, err := bornHere(s.logs.Log(floored)); err != nil || marked {
		t.Fatalf("replica joined with its floor marked as bootstrapped here: %v, %v", marked, err)
	}

	// A zero floor: created, counted once.
	s.joinAssigned(listing(zero), nil)
	settled("zero floor", 1)
	if !s.hosts(zero) {
		t.Fatal("replica not created with a zero floor")
	}
	if n := counterValue(t, joinWithoutFloorTotal) - before; n != 1 {
		t.Fatalf("%v floorless creations counted, want 1", n)
	}
	if marked, err := bornHere(s.logs.Log(zero)); err != nil || marked {
		t.Fatalf("replica joined without a floor marked as bootstrapped here: %v, %v", marked, err)
	}

	// A bootstrapped replica (a new range's) is marked: its history here
	// began at the range's birth (missedsplit.go).
	if err := s.createReplica(listing(boot), true, false, nil, joinFloor{}); err != nil {
		t.Fatal(err)
	}
	if marked, err := bornHere(s.logs.Log(boot)); err != nil || !marked {
		t.Fatalf("bootstrapped replica not marked: %v, %v", marked, err)
	}
	births := counterValue(t, joinAtBirthTotal)

	// A missed split's range, as born: created at its birth floor
	// without asking the master (its range has no leader).
	s.births.Store(uint64(born), &pb.SplitBirth{Index: 40, Right: listing(born)})
	s.joinAssigned(listing(born), nil)
	// The count follows the creation (joinFromBirth): wait for both.
	for deadline := time.Now().Add(20 * time.Second); !s.hosts(born) || counterValue(t, joinAtBirthTotal) == births; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("missed split's range not created at its birth")
		}
	}
	if got, err := storedFloor(s.logs.Log(born)); err != nil || got != birthFloor {
		t.Fatalf("stored floor %v, %v; want the birth floor %v", got, err, birthFloor)
	}
	if n := m.called(born); n != 0 {
		t.Fatalf("master asked %d times for a range created at its birth", n)
	}
	if n := counterValue(t, joinAtBirthTotal) - births; n != 1 {
		t.Fatalf("%v creations at the birth floor counted, want 1", n)
	}
	if _, ok := s.births.Load(uint64(born)); ok {
		t.Fatal("the record of a range created at its birth kept")
	}

	// Moved since its birth: the record is dropped and the master asked,
	// which gives no floor: nothing created.
	moved2 := listing(reborn)
	moved2.Generation = 5
	s.births.Store(uint64(reborn), &pb.SplitBirth{Index: 40, Right: listing(reborn)})
	s.joinAssigned(moved2, nil)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := s.births.Load(uint64(reborn)); !ok {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("the record of a range moved since its birth kept")
		}
	}
	s.joinAssigned(moved2, nil) // the next reconcile
	settled("reborn", 2)
	if s.hosts(reborn) {
		t.Fatal("a range moved since its birth created without its floor")
	}
	if n := m.called(reborn); n != 1 {
		t.Fatalf("master asked %d times for a range moved since its birth, want once", n)
	}
}
