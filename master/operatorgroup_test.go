package master

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/connpool"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// anchorGroupServer is a Server with a map and no partition servers (every
// registered server's address answers nothing): an anchor group on a, b
// and c serving the anchor and a user table's range (span), and a user
// table's group of two ranges, its namesake plain and a span born in it
// (inGroup). Servers a to d are registered.
func anchorGroupServer(t *testing.T) (s *Server, anchor, span, plain, inGroup uint64) {
	t.Helper()
	s = &Server{cfg: DefaultConfig(), reports: newReports(), progress: newProgress(), changed: make(chan struct{}),
		watchers: map[*mapWatcher]struct{}{}, epoch: 1, pool: connpool.New(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	t.Cleanup(func() { s.pool.Close() })
	s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
	s.ops = newRunner(context.Background(), 4, time.Minute, time.Minute, func(context.Context, scheduler.Op) error { return nil })
	apply := applier(t, s.fsm)
	for _, id := range []string{"a", "b", "c", "d"} {
		apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "127.0.0.1:1"}})
	}
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Anchor: true, Replicas: reps})
	if res.err != nil {
		t.Fatal(res.err)
	}
	a := res.ranges[0]
	res = apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: reps, GroupId: a.GetRangeId()})
	if res.err != nil {
		t.Fatal(res.err)
	}
	sp := proto.Clone(res.ranges[0]).(*pb.RangeDescriptor)
	sp.Generation = 2 // added (ADD_SPAN stores it at generation 2)
	res = apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "u", Replicas: reps})
	if res.err != nil {
		t.Fatal(res.err)
	}
	p := res.ranges[0]
	left := &pb.RangeDescriptor{RangeId: p.GetRangeId(), GroupId: p.GetRangeId(), Table: "u", TableId: p.GetTableId(), End: "m", Generation: 2, Replicas: reps}
	right := &pb.RangeDescriptor{RangeId: 100, GroupId: p.GetRangeId(), Table: "u", TableId: p.GetTableId(), Start: "m", Generation: 2, Replicas: reps}
	if res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{sp, left, right}}); res.err != nil {
		t.Fatal(res.err)
	}
	return s, a.GetRangeId(), sp.GetRangeId(), p.GetRangeId(), 100
}

// TestOperatorGroupOps: an operator's move or leadership transfer of an
// anchor never takes it out of its group (isolating the anchor would take
// every table's span out instead), nor that of any range asked whole; any
// other range of a shared group is first taken out of it, as before.
// Told apart by where the operation fails on a map with no partition
// servers: the isolating path first asks the group's leader to detach
// ("leaves Raft group"), the whole path never does. A whole move of the
// anchor's group to a server already holding one of its ranges is
// refused before any server is asked. Before session 35 every case
// isolated.
func TestOperatorGroupOps(t *testing.T) {
	s, anchor, span, plain, inGroup := anchorGroupServer(t)
	for _, c := range []struct {
		name        string
		id          uint64
		whole       bool
		wantIsolate bool
	}{
		{"anchor", anchor, false, false},
		{"anchor, whole asked", anchor, true, false},
		{"a table's span of an anchor group", span, false, true},
		{"a table's span of an anchor group, whole asked", span, true, false},
		{"namesake of a table's group", plain, false, true},
		{"span born in a table's group, whole asked", inGroup, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := s.operatorMove(ctx, &pb.MoveRequest{RangeId: c.id, ToServerId: "d", FromServerId: "a", Whole: c.whole})
			if err == nil || strings.Contains(err.Error(), "leaves Raft group") != c.wantIsolate {
				t.Errorf("move: %v; want an error that names a detach: %v", err, c.wantIsolate)
			}
			err = s.operatorTransfer(ctx, c.id, "b", c.whole)
			if err == nil || strings.Contains(err.Error(), "leaves Raft group") != c.wantIsolate {
				t.Errorf("transfer-leader: %v; want an error that names a detach: %v", err, c.wantIsolate)
			}
			if err := s.ops.claim(anchor, span, plain, inGroup); err != nil {
				t.Fatalf("claims left behind: %v", err)
			}
			s.ops.release(anchor, span, plain, inGroup)
		})
	}
	// The anchor's span on d only (a membership change not yet recorded
	// on every range): the group moves once the map agrees.
	d, _ := s.rangeDesc(span)
	d = proto.Clone(d).(*pb.RangeDescriptor)
	d.Replicas = []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "d"}}
	s.fsm.st.putRange(d)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := s.operatorMove(ctx, &pb.MoveRequest{RangeId: anchor, ToServerId: "d", FromServerId: "a"})
	if !errors.Is(err, ErrBadTarget) || !strings.Contains(err.Error(), "d already holds a replica of range") {
		t.Errorf("whole move to a server holding a range of the group: %v, want refused", err)
	}
}

// TestGroupMoverOf: a whole move is asked through the group's namesake,
// whichever range the operator named, or its range of lowest id when the
// map no longer holds the namesake.
func TestGroupMoverOf(t *testing.T) {
	s, anchor, span, plain, inGroup := anchorGroupServer(t)
	for _, c := range []struct {
		id, want uint64
	}{{anchor, anchor}, {span, anchor}, {plain, plain}, {inGroup, plain}} {
		d, _ := s.rangeDesc(c.id)
		if got := s.groupMoverOf(d); got != c.want {
			t.Errorf("groupMoverOf(%d) = %d, want %d", c.id, got, c.want)
		}
	}
	s.fsm.st.dropRange(plain)
	d, _ := s.rangeDesc(inGroup)
	if got := s.groupMoverOf(d); got != inGroup {
		t.Errorf("namesake gone: groupMoverOf(%d) = %d, want %d", inGroup, got, inGroup)
	}
}

// TestGroupReplacedInPlace: a whole move from a server to itself replaces
// the group's broken replica there; one range's broken report speaks for
// the group (the partition server breaks the group's replica whole, and a
// range its copy does not know is reported missing, not broken), so the
// other ranges' own reports need not say broken. Without any broken
// report it is refused (the server holds the group), and a frozen range
// still refuses it. Before session 35 a group was never replaced in place
// whole ("not replaced in place").
func TestGroupReplacedInPlace(t *testing.T) {
	s, _, _, plain, inGroup := anchorGroupServer(t)
	d, _ := s.rangeDesc(plain)
	peers := []uint64{inGroup}
	if err := s.groupMoveRefusal(d, peers, "c", "c"); !errors.Is(err, ErrBadTarget) {
		t.Errorf("in place with no broken report: %v, want ErrBadTarget", err)
	}
	s.reports.broken["c"] = map[uint64]bool{inGroup: true}
	if err := s.groupMoveRefusal(d, peers, "c", "c"); err != nil {
		t.Errorf("in place, the group's replica on c reported broken through range %d: %v", inGroup, err)
	}
	if err := s.groupMoveRefusal(d, peers, "b", "b"); !errors.Is(err, ErrBadTarget) {
		t.Errorf("in place on b, whose replica is not broken: %v, want ErrBadTarget", err)
	}
	s.reports.frozen = map[uint64]uint64{plain: 7}
	if err := s.groupMoveRefusal(d, peers, "c", "c"); !errors.Is(err, ErrBusy) {
		t.Errorf("in place with the namesake frozen: %v, want ErrBusy", err)
	}
}
