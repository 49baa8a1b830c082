package partitionserver

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	pb "tablestore/proto/tablestorepb"
)

// startedServer is a started partition server with no master (its
// heartbeats fail, which changes nothing here) and no quiescing.
func startedServer(t *testing.T) *Server {
	t.Helper()
	return startedServerWith(t, nil)
}

// startedServerWith is startedServer with tune applied to its
// configuration.
func startedServerWith(t *testing.T, tune func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID = "f"
	cfg.DataDir = filepath.Join(t.TempDir(), "ps")
	cfg.GRPCAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Masters = []string{"127.0.0.1:1"}
	cfg.QuiesceAfter = 0
	if tune != nil {
		tune(&cfg)
	}
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// moveDesc is range id at generation gen as a move's CreateReplica names
// it: voters a, b and c, not this server.
func moveDesc(id, gen uint64) *pb.RangeDescriptor {
	return &pb.RangeDescriptor{RangeId: id, Table: "t", TableId: 7, Generation: gen,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
}

// askVote sends a vote request for range id to s over the raft transport
// from a candidate whose log ends at (lastTerm, lastIndex).
func askVote(t *testing.T, s *Server, id, lastTerm, lastIndex uint64) raft.RequestVoteResponse {
	t.Helper()
	g, err := newTestTransport(t).Group(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("a"), Addr: []byte("a-addr")},
		Term: lastTerm + 1, LastLogTerm: lastTerm, LastLogIndex: lastIndex}
	var resp raft.RequestVoteResponse
	// A server admits no vote for a read lease after it starts (its
	// transport answers "not granted" in the candidate's term itself).
	if wait := s.cfg.ReadLease - time.Since(s.startedAt); wait > 0 {
		time.Sleep(wait)
	}
	if err := g.RequestVote("f", raft.ServerAddress(s.RaftAddr()), req, &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// The wiring of the floor from CreateReplica to the member's gate: a
// replica a move creates records the floor and refuses, over the
// transport, a candidate behind it; a retried CreateReplica of a hosted
// replica raises the floor on the running member (its first attempt may
// have failed to open it, or crashed before the floor was recorded).
func TestCreateReplicaFloorWiring(t *testing.T) {
	s := startedServer(t)
	const id = 41
	if err := s.createReplica(moveDesc(id, 3), false, false, nil, joinFloor{term: 7, index: 50}); err != nil {
		t.Fatal(err)
	}
	if got, err := storedFloor(s.logs.Log(id)); err != nil || got != (joinFloor{7, 50}) {
		t.Fatalf("stored floor %v, %v; want {7 50}", got, err)
	}
	if resp := askVote(t, s, id, 6, 100); resp.Granted || resp.Term != 7 {
		t.Fatalf("vote of a candidate behind the floor: %+v, want refused at term 7", resp)
	}

	// Hosted: the retried CreateReplica raises the floor on the live gate.
	if err := s.createReplica(moveDesc(id, 3), false, false, nil, joinFloor{term: 9, index: 80}); err != nil {
		t.Fatal(err)
	}
	if got, err := storedFloor(s.logs.Log(id)); err != nil || got != (joinFloor{9, 80}) {
		t.Fatalf("stored floor after the retry %v, %v; want {9 80}", got, err)
	}
	if resp := askVote(t, s, id, 8, 100); resp.Granted || resp.Term != 9 {
		t.Fatalf("vote of a candidate behind the raised floor: %+v, want refused at term 9", resp)
	}
	// A lower floor never lowers it.
	if err := s.createReplica(moveDesc(id, 3), false, false, nil, joinFloor{term: 2, index: 5}); err != nil {
		t.Fatal(err)
	}
	if got, err := storedFloor(s.logs.Log(id)); err != nil || got != (joinFloor{9, 80}) {
		t.Fatalf("stored floor after a lower one %v, %v; want {9 80}", got, err)
	}
}

// A leftover replica (removed at a generation below the move's) is replaced
// only with a floor: an older master sends none, and an empty replica
// without one is worse than the leftover with its log.
func TestLeftoverKeptWithoutFloor(t *testing.T) {
	s := startedServer(t)
	const id = 42
	own := &pb.RangeDescriptor{RangeId: id, Table: "t", TableId: 7, Generation: 1, Replicas: []*pb.Replica{{ServerId: "f"}}}
	if err := s.createReplica(own, true, false, map[string]string{"f": s.RaftAddr()}, joinFloor{}); err != nil {
		t.Fatal(err)
	}
	old := s.slotOf(id)
	if err := s.createReplica(moveDesc(id, 3), false, false, nil, joinFloor{}); err != nil {
		t.Fatal(err)
	}
	if sl := s.slotOf(id); sl != old || sl.primary().Descriptor().GetGeneration() != 1 {
		t.Fatal("the leftover was replaced without a floor")
	}
}

// A late delete of an earlier move (before = the new generation) that
// comes while a move re-creates the replica must not wipe the new replica:
// it waits for the create and then meets the new generation. Before the
// range lock it waited on the old slot's lock, took it after the create's
// own delete, passed the generation guard on the old descriptor and
// deleted the new replica's state and log by range id.
func TestLateDeleteDuringRecreate(t *testing.T) {
	s := startedServer(t)
	const id = 43
	own := &pb.RangeDescriptor{RangeId: id, Table: "t", TableId: 7, Generation: 1, Replicas: []*pb.Replica{{ServerId: "f"}}}
	if err := s.createReplica(own, true, false, map[string]string{"f": s.RaftAddr()}, joinFloor{}); err != nil {
		t.Fatal(err)
	}
	old := s.slotOf(id)
	old.lock() // the create's delete of the leftover waits here
	created := make(chan error, 1)
	go func() { created <- s.createReplica(moveDesc(id, 3), false, false, nil, joinFloor{term: 7, index: 50}) }()
	// Wait until the create holds the range lock.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if s.rangeLockUsers(id) > 0 {
			break
		}
		if time.Now().After(deadline) {
			old.unlock()
			t.Fatal("createReplica never took the range lock")
		}
	}
	deleted := make(chan error, 1)
	go func() { deleted <- s.deleteReplica(id, 3, 0) }()
	old.unlock()
	if err := <-created; err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := <-deleted; !errors.Is(err, ErrLateDelete) {
		t.Fatalf("late delete: %v, want ErrLateDelete", err)
	}
	sl := s.slotOf(id)
	if sl == nil || sl == old || sl.primary().Descriptor().GetGeneration() != 3 {
		t.Fatal("the re-created replica is not hosted at generation 3")
	}
	states, err := s.store.RangeStates()
	if err != nil {
		t.Fatal(err)
	}
	stored := false
	for _, st := range states {
		stored = stored || (st.GetRange().GetRangeId() == id && st.GetRange().GetGeneration() == 3)
	}
	if !stored {
		t.Fatal("the re-created replica's state is not stored at generation 3")
	}
	if got, err := storedFloor(s.logs.Log(id)); err != nil || got != (joinFloor{7, 50}) {
		t.Fatalf("stored floor %v, %v; want {7 50}", got, err)
	}
}

// A quiet replica with a join floor answers nothing the floor refuses
// (the message opens its member, whose gate refuses it): its closed vote
// and its acknowledgement of a stale leader's heartbeat would bypass the
// gate.
func TestQuietReplicaKeepsFloor(t *testing.T) {
	s, _, lg := quietServer(t) // quiet at entry 42 of term 5
	if got := s.Answer(1, voteReq("a", 6)); got == nil {
		t.Fatal("without a floor the quiet replica leaves the vote to its member; want it granted closed")
	}
	s, _, lg = quietServer(t)
	if _, err := raiseFloor(lg, joinFloor{term: 6, index: 50}); err != nil {
		t.Fatal(err)
	}
	if got := s.Answer(1, voteReq("a", 6)); got != nil {
		t.Fatalf("vote of a candidate behind the floor answered closed: %#v", got)
	}
	if got := s.Answer(1, appendReq("a", 5, 42, 5)); got != nil {
		t.Fatalf("heartbeat of a leader below the floor's term answered closed: %#v", got)
	}
}
