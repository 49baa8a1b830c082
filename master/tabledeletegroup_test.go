package master

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"tablestore/internal/connpool"
	"tablestore/internal/failpoint"
	"tablestore/internal/rpcerr"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// Tests of deleting one table of a Raft group that several tables share
// (docs/range-groups.md, stage 7, step 5).

// TestDeletedLeaving: which ranges leave a deleted table's range's group
// before its freeze.
func TestDeletedLeaving(t *testing.T) {
	born := &pb.RangeDescriptor{RangeId: 20, GroupId: 5}
	namesake := &pb.RangeDescriptor{RangeId: 5, GroupId: 5}
	own := &pb.RangeDescriptor{RangeId: 7}
	for _, tc := range []struct {
		name   string
		r      *pb.RangeDescriptor
		peers  []uint64
		shared uint64
		want   []uint64
	}{
		{"a range alone in its group", own, nil, 0, nil},
		{"a group of one table's ranges (all deleted)", born, nil, 0, nil},
		{"born in a group another table shares", born, []uint64{5, 21}, 0, []uint64{20}},
		{"the map knows no other range, a server said shared", born, nil, 5, []uint64{20}},
		{"the namesake: the live ranges leave", namesake, []uint64{20, 21}, 0, []uint64{20, 21}},
		{"the namesake, alone by the map, shared by a server's word", namesake, nil, 5, nil},
		{"its own group by the map, born in group 5 by a server's word", own, nil, 5, []uint64{7}},
		{"its own group by the map and by a server's word", own, nil, 7, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deletedLeaving(tc.r, tc.peers, tc.shared); !slices.Equal(got, tc.want) {
				t.Errorf("leaving %v, want %v", got, tc.want)
			}
		})
	}
}

// sharedGroupFake is a partition server of a group that serves range 2
// of a deleted table beside another table's range: it refuses the
// freeze of range 2 as a server of this build does (NOT_READY,
// MetaSharedGroup) until range 2 left the group (DetachRange on the
// leader, a). alone: range 2 is alone in its group from the start.
type sharedGroupFake struct {
	pb.UnimplementedPartitionServiceServer
	id string
	g  *sharedGroupState
}

type sharedGroupState struct {
	mu       sync.Mutex
	alone    bool
	log      []string // "detach@a", "freeze@a", "refused@b"...
	detached *pb.RangeDescriptor
}

func (f *sharedGroupFake) DetachRange(_ context.Context, req *pb.DetachRangeRequest) (*pb.DetachRangeResponse, error) {
	f.g.mu.Lock()
	defer f.g.mu.Unlock()
	if f.id != "a" {
		return nil, notLeader("a")()
	}
	f.g.log = append(f.g.log, "detach@"+f.id)
	f.g.alone = true
	f.g.detached = &pb.RangeDescriptor{RangeId: req.GetRangeId(), TableId: 2, Generation: 3,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
	return &pb.DetachRangeResponse{Range: f.g.detached}, nil
}

func (f *sharedGroupFake) FreezeRange(_ context.Context, req *pb.FreezeRangeRequest) (*pb.FreezeRangeResponse, error) {
	f.g.mu.Lock()
	defer f.g.mu.Unlock()
	if f.id != "a" {
		return nil, notLeader("a")()
	}
	if !req.GetTableDeleted() {
		return nil, errors.New("a merge's freeze")
	}
	if !f.g.alone {
		f.g.log = append(f.g.log, "refused@"+f.id)
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonNotReady, "shares Raft group 1", map[string]string{rpcerr.MetaSharedGroup: "1"})
	}
	f.g.log = append(f.g.log, "freeze@"+f.id)
	return &pb.FreezeRangeResponse{FreezeIndex: 9}, nil
}

func (g *sharedGroupState) events() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.log)
}

// sharedGroupServer is a master whose map holds table T1's range 1 and
// table T2's range 2 in Raft group 1 (grouped: else range 2 is its own
// group), T2 deleted; it returns the deleted range 2's descriptor.
func sharedGroupServer(t *testing.T, grouped bool, g *sharedGroupState) (*Server, *pb.RangeDescriptor) {
	t.Helper()
	s := &Server{cfg: DefaultConfig(), logger: slog.New(slog.DiscardHandler), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: 1,
		pool: connpool.New(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	t.Cleanup(s.pool.Close)
	s.ops = newRunner(context.Background(), 4, time.Minute, time.Minute, func(context.Context, scheduler.Op) error { return nil })
	s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
	apply := applier(t, s.fsm)
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	for _, id := range []string{"a", "b", "c"} {
		s.pool.RegisterLocal("local-"+id, &sharedGroupFake{id: id, g: g})
		apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "local-" + id}})
	}
	for _, name := range []string{"T1", "T2"} {
		apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: name, Replicas: reps})
	}
	if grouped {
		apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{
			{RangeId: 2, Table: "T2", TableId: 2, Generation: 2, GroupId: 1, Replicas: reps}}})
	}
	res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, &pb.DeleteTableCommand{Name: "T2"})
	if res.err != nil || len(res.ranges) != 1 || res.ranges[0].GetRangeId() != 2 {
		t.Fatalf("delete T2: %v, %v", res.ranges, res.err)
	}
	if grouped != (res.ranges[0].GetGroupId() == 1) {
		t.Fatalf("range 2 deleted as %v", res.ranges[0])
	}
	return s, res.ranges[0]
}

// TestFreezeDeletedRangeOfSharedGroup: the freeze of a deleted table's
// range whose group serves another table's range (the map says so, or
// only the server's refusal does) detaches it first, through its leader,
// with the other range claimed meanwhile and released after, and then
// freezes it; a range alone in its group is frozen with no detach; with
// the other range busy the freeze waits; the failpoint after the isolate
// stops it with the range detached and not frozen. Before, the server's
// NOT_READY refusal was taken for a server that cannot freeze, and the
// range was counted frozen while it served on.
func TestFreezeDeletedRangeOfSharedGroup(t *testing.T) {
	for _, tc := range []struct {
		name            string
		grouped, shared bool
		failpoint       bool
		busy            bool
		want            []string
	}{
		{"shared, the map says so", true, true, false, false, []string{"detach@a", "freeze@a"}},
		{"shared, only the server says so", false, true, false, false, []string{"refused@a", "detach@a", "freeze@a"}},
		{"alone in its group", false, false, false, false, []string{"freeze@a"}},
		{"the other range busy", true, true, false, true, nil},
		{"master/delete-table/after-isolate", true, true, true, false, []string{"detach@a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &sharedGroupState{alone: !tc.shared}
			s, r := sharedGroupServer(t, tc.grouped, g)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if tc.failpoint {
				failpoint.Enable("master/delete-table/after-isolate", nil)
				defer failpoint.Disable("master/delete-table/after-isolate")
			}
			if tc.busy {
				if err := s.ops.claim(1); err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				go func() { got <- s.freezeDeletedRange(ctx, r) }()
				for deadline := time.Now().Add(5 * time.Second); len(g.events()) < 2; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the freeze was not refused twice")
					}
				}
				if ev := g.events(); slices.Contains(ev, "detach@a") || slices.Contains(ev, "freeze@a") {
					t.Fatalf("with range 1 busy: %v", ev)
				}
				s.ops.release(1)
				if err := <-got; err != nil {
					t.Fatalf("freeze after range 1 was released: %v", err)
				}
				if ev := g.events(); !slices.Equal(ev[len(ev)-2:], []string{"detach@a", "freeze@a"}) {
					t.Fatalf("after range 1 was released: %v", ev)
				}
				return
			}
			err := s.freezeDeletedRange(ctx, r)
			if tc.failpoint != errors.Is(err, failpoint.ErrInjected) || !tc.failpoint && err != nil {
				t.Fatalf("freeze = %v", err)
			}
			if got := g.events(); !slices.Equal(got, tc.want) {
				t.Fatalf("asked %v, want %v", got, tc.want)
			}
			if err := s.ops.claim(1); err != nil {
				t.Errorf("range 1 still claimed: %v", err)
			}
			if _, ok := s.rangeDesc(2); ok {
				t.Error("the detach recorded the deleted range in the map")
			}
		})
	}
}
