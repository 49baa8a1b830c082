package master

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestDeletedRangesPendingUntilFrozen: a table's DeleteTable command
// records its ranges as pending a freeze (name, id, descriptors), a
// DELETED_RANGES_FROZEN command clears them for that table only, a
// replayed delete (the client's retry) records nothing again, and the
// list survives a snapshot and restore. Before, the pending freeze lived
// in the deleting master's memory only.
func TestDeletedRangesPendingUntilFrozen(t *testing.T) {
	const (
		create = pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE
		del    = pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE
		frozen = pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETED_RANGES_FROZEN
	)
	s := newState()
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	first := applyCmd(t, s, create, &pb.CreateTableCommand{Name: "Tbl", Replicas: reps})
	applyCmd(t, s, create, &pb.CreateTableCommand{Name: "other", Replicas: reps})
	res := applyCmd(t, s, del, &pb.DeleteTableCommand{Name: "tbl", RequestId: []byte("d1")})
	if res.err != nil {
		t.Fatal(res.err)
	}
	id := first.table.GetTableId()
	d := s.deletedPending[id]
	if d == nil || d.GetName() != "Tbl" || len(d.GetRanges()) != 1 || d.GetRanges()[0].GetRangeId() != first.ranges[0].GetRangeId() {
		t.Fatalf("pending after the delete = %v, want Tbl's range", s.deletedPending)
	}
	if !s.deletePendingName("TBL", 0) || s.deletePendingName("other", 0) {
		t.Fatal("deletePendingName does not name the deleted table alone")
	}
	// Kept through a snapshot and restore.
	if r := snapshotted(t, s); !r.deletePendingName("tbl", 0) || len(r.deletedPending) != 1 {
		t.Fatalf("restored pending = %v", r.deletedPending)
	}
	// The table created again and deleted: a second entry, its own.
	second := applyCmd(t, s, create, &pb.CreateTableCommand{Name: "tbl", Replicas: reps})
	applyCmd(t, s, del, &pb.DeleteTableCommand{Name: "tbl", RequestId: []byte("d2")})
	if len(s.deletedPending) != 2 {
		t.Fatalf("pending = %v, want both incarnations", s.deletedPending)
	}
	if res := applyCmd(t, s, frozen, &pb.DeletedRangesFrozenCommand{TableId: id}); res.err != nil {
		t.Fatal(res.err)
	}
	if _, ok := s.deletedPending[id]; ok || s.deletedPending[second.table.GetTableId()] == nil {
		t.Fatalf("pending after clearing the first = %v, want the second only", s.deletedPending)
	}
	applyCmd(t, s, frozen, &pb.DeletedRangesFrozenCommand{TableId: second.table.GetTableId()})
	// A retry of the first delete, replayed from its record, and a
	// clearing of an id no longer pending, change nothing.
	if res := applyCmd(t, s, del, &pb.DeleteTableCommand{Name: "tbl", RequestId: []byte("d1")}); res.err != nil || len(res.ranges) != 1 {
		t.Fatalf("replayed delete = %+v", res)
	}
	if res := applyCmd(t, s, frozen, &pb.DeletedRangesFrozenCommand{TableId: id}); res.err != nil {
		t.Fatal(res.err)
	}
	if len(s.deletedPending) != 0 || s.deletePendingName("tbl", 0) {
		t.Fatalf("pending at the end = %v, want none", s.deletedPending)
	}
}

// heldFreeze is a fake partition server whose FreezeRange waits until
// hold is closed (a range without quorum), then freezes.
type heldFreeze struct {
	pb.UnimplementedPartitionServiceServer
	hold   chan struct{}
	mu     sync.Mutex
	frozen int
}

func (f *heldFreeze) FreezeRange(ctx context.Context, _ *pb.FreezeRangeRequest) (*pb.FreezeRangeResponse, error) {
	select {
	case <-f.hold:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f.mu.Lock()
	f.frozen++
	f.mu.Unlock()
	return &pb.FreezeRangeResponse{FreezeIndex: 7}, nil
}

func (f *heldFreeze) DeleteReplica(context.Context, *pb.DeleteReplicaRequest) (*pb.DeleteReplicaResponse, error) {
	return &pb.DeleteReplicaResponse{}, nil
}

// TestDeleteFreezeFinishedByNextLeader: a delete whose ranges do not
// freeze in time answers an unknown outcome; its leader then steps down.
// Every master refuses a create of the name from the replicated list
// (a follower too, which no freezing of its own ever told), and once the
// ranges can freeze the new leader freezes them and clears the pending
// entry on every master (the deposed one cannot: it no longer leads);
// the client's retry of the delete is answered from its record.
// Before, the freezing and the refusal lived in the deposed leader's
// memory only: the new leader neither froze nor refused.
func TestDeleteFreezeFinishedByNextLeader(t *testing.T) {
	g := startGroup(t, 3)
	old := g.leader()
	hold := make(chan struct{})
	fakes := map[string]*heldFreeze{}
	for _, id := range []string{"a", "b", "c"} {
		fakes[id] = &heldFreeze{hold: hold}
		for _, m := range g.ms {
			m.s.pool.RegisterLocal("local-"+id, fakes[id])
		}
		if _, err := old.s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "local-" + id}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t",
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := (&service{s: old.s}).DeleteTable(ctx, &pb.DeleteTableRequest{Name: "t", RequestId: []byte("del-1")}); err == nil {
		t.Fatal("the delete answered with its range unfrozen")
	}
	// Every master holds the pending freeze; a follower, which is
	// freezing nothing, refuses the name from it alone.
	for _, m := range g.ms {
		waitUntil(t, 5*time.Second, m.cfg.ID+" holds the pending freeze", func() bool { return pendingOn(m.s, "t") })
		if m != old {
			if m.s.deleting.running(1) {
				t.Fatalf("follower %s is freezing", m.cfg.ID)
			}
			if err := nameFree(false, pendingOn(m.s, "t")); err != ErrTableBeingDeleted {
				t.Fatalf("follower %s: nameFree = %v, want ErrTableBeingDeleted", m.cfg.ID, err)
			}
		}
	}
	if err := old.s.StepDown(); err != nil {
		t.Fatal(err)
	}
	var next *testMaster
	waitUntil(t, 10*time.Second, "a new master leader", func() bool {
		next = g.leader()
		return next != nil && next != old
	})
	_, err := (&service{s: next.s}).CreateTable(context.Background(), &pb.CreateTableRequest{Name: "T", RequestId: []byte("create-1")})
	if info := rpcerr.Parse(err); info.Reason != rpcerr.ReasonTableBeingDeleted {
		t.Fatalf("create on the new leader = %v, want TableBeingDeleted", err)
	}
	waitUntil(t, 5*time.Second, "the new leader freezing", func() bool { return next.s.deleting.running(1) })
	close(hold)
	// The client's retry of the delete, on the new leader, is answered
	// from its record once the range froze.
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer rcancel()
	if _, err := (&service{s: next.s}).DeleteTable(rctx, &pb.DeleteTableRequest{Name: "t", RequestId: []byte("del-1")}); err != nil {
		t.Fatalf("the delete's retry on the new leader = %v, want done", err)
	}
	for _, m := range g.ms {
		waitUntil(t, 10*time.Second, m.cfg.ID+" clears the pending freeze", func() bool { return !pendingOn(m.s, "t") })
	}
	n := 0
	for _, f := range fakes {
		f.mu.Lock()
		n += f.frozen
		f.mu.Unlock()
	}
	if n == 0 {
		t.Error("the range was never frozen")
	}
	waitUntil(t, 5*time.Second, "the name free on the new leader", func() bool {
		return nameFree(false, pendingOn(next.s, "t")) == nil
	})
	// A delete whose ranges freeze at once answers after its pending
	// entry is cleared: a create of the name sent after the answer is
	// not refused.
	if _, err := next.s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "u",
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := (&service{s: next.s}).DeleteTable(rctx, &pb.DeleteTableRequest{Name: "u"}); err != nil {
		t.Fatal(err)
	}
	if err := nameFree(false, pendingOn(next.s, "u")); err != nil {
		t.Fatalf("create right after the delete's answer: %v", err)
	}
}

// pendingOn reports whether s's replicated state holds a pending freeze
// of a deleted table of that name.
func pendingOn(s *Server, name string) (p bool) {
	s.fsm.read(func(st *state) { p = st.deletePendingName(name, 0) })
	return p
}

// TestUnknownCommandKindSkipped: a master applies a command kind it does
// not know (DELETED_RANGES_FROZEN on a master of an older build) as an
// error result, its state unchanged, and applies the next commands as
// before: a rolling upgrade's old masters follow a new leader's log.
func TestUnknownCommandKindSkipped(t *testing.T) {
	f := &fsm{st: newState()}
	apply := applier(t, f)
	apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: []*pb.Replica{{ServerId: "a"}}})
	before := f.st.snapshot()
	res := apply(pb.MasterCommandKind(999), &pb.DeletedRangesFrozenCommand{TableId: 1})
	if !errors.Is(res.err, ErrUnknownCommand) {
		t.Fatalf("unknown kind = %v, want ErrUnknownCommand", res.err)
	}
	if after := f.st.snapshot(); !proto.Equal(before, after) {
		t.Fatal("an unknown command changed the state")
	}
	if res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, &pb.DeleteTableCommand{Name: "t"}); res.err != nil {
		t.Fatalf("delete after the unknown command: %v", res.err)
	}
}
