package master

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/connpool"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// freezeScript is a fake partition server's answer to FreezeRange.
type freezeScript struct {
	pb.UnimplementedPartitionServiceServer
	mu     sync.Mutex
	answer func() error
	asked  int
	marked bool // a request carried table_deleted
}

func (f *freezeScript) FreezeRange(_ context.Context, req *pb.FreezeRangeRequest) (*pb.FreezeRangeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	f.marked = f.marked || req.GetTableDeleted()
	if err := f.answer(); err != nil {
		return nil, err
	}
	return &pb.FreezeRangeResponse{FreezeIndex: 7}, nil
}

func notLeader(leader string) func() error {
	return func() error {
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, "not the leader", map[string]string{rpcerr.MetaLeader: leader})
	}
}

func notHosted() error {
	return rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "not hosted", nil)
}

func unreachable() error { return status.Error(codes.Unavailable, "connection refused") }

// TestFreezeDeletedRange: DeleteTable's freeze of a deleted table's range
// follows the leader hints to the leader and marks the freeze
// table_deleted; counts the range gone once a majority of its replicas say
// they host none (the servers drop a deleted table's replicas on their
// own; with one down, the other two may be gone before the freeze
// commits); keeps trying while replicas that may be a majority do not
// answer; and
// gives up at once on a server from before FreezeRange (it serves on until
// its replicas are deleted, as before), as on a server from before
// table_deleted that refuses it as a merge's freeze.
func TestFreezeDeletedRange(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers map[string]func() error
		want    error // nil, errFreezeUnsupported, or context.DeadlineExceeded
		frozeOn string
		// starting: CreateTable is creating the replicas (startRange)
		// until the freeze has waited a while: none found yet is no
		// proof that none will serve.
		starting bool
	}{
		{"the leader freezes it", map[string]func() error{"a": notLeader("c"), "b": notLeader("c"), "c": func() error { return nil }}, nil, "c", false},
		{"every replica deleted", map[string]func() error{"a": notHosted, "b": notHosted, "c": notHosted}, nil, "", false},
		{"a majority deleted, the third down", map[string]func() error{"a": notHosted, "b": notHosted, "c": unreachable}, nil, "", false},
		{"a replica that may host it does not answer", map[string]func() error{"a": notHosted, "b": unreachable, "c": unreachable}, context.DeadlineExceeded, "", false},
		{"a start in flight", map[string]func() error{"a": notHosted, "b": notHosted, "c": notHosted}, nil, "", true},
		{"an old server", map[string]func() error{"a": func() error { return status.Error(codes.Unimplemented, "unknown method") }, "b": unreachable, "c": unreachable}, errFreezeUnsupported, "", false},
		{"a server from before table_deleted, a voter down", map[string]func() error{"a": func() error {
			return rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonNotReady, "voter unreached", nil)
		}, "b": unreachable, "c": unreachable}, errFreezeUnsupported, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{cfg: DefaultConfig(), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: 1,
				pool: connpool.New(grpc.WithTransportCredentials(insecure.NewCredentials()))}
			defer s.pool.Close()
			s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
			apply := applier(t, s.fsm)
			fakes := map[string]*freezeScript{}
			for _, id := range []string{"a", "b", "c"} {
				fakes[id] = &freezeScript{answer: tc.answers[id]}
				s.pool.RegisterLocal("local-"+id, fakes[id])
				apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "local-" + id}})
			}
			r := &pb.RangeDescriptor{RangeId: 4, TableId: 1, Generation: 1, Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if tc.starting {
				end := s.starting.begin(r.GetRangeId())
				got := make(chan error, 1)
				go func() { got <- s.freezeDeletedRange(ctx, r) }()
				select {
				case err := <-got:
					t.Fatalf("freeze returned %v while the range's start runs", err)
				case <-time.After(100 * time.Millisecond):
				}
				end()
				if err := <-got; err != nil {
					t.Fatalf("freeze after the start = %v", err)
				}
				return
			}
			err := s.freezeDeletedRange(ctx, r)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("freeze = %v, want %v", err, tc.want)
			}
			for id, f := range fakes {
				if f.asked > 0 && !f.marked {
					t.Errorf("%s was asked for a merge's freeze, not a deleted table's", id)
				}
			}
			if tc.frozeOn != "" && fakes[tc.frozeOn].asked != 1 {
				t.Errorf("the leader %s was asked %d times", tc.frozeOn, fakes[tc.frozeOn].asked)
			}
		})
	}
}

// TestDeleteRecordKeepsRanges: a DeleteTable's retry, answered from the
// request record, carries the deleted table's ranges, which the answer
// freezes again (a retry of a delete whose freeze did not come in time);
// before, the record kept none and the retry was answered 204 at once.
func TestDeleteRecordKeepsRanges(t *testing.T) {
	f := &fsm{st: newState()}
	apply := applier(t, f)
	created := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: []*pb.Replica{{ServerId: "a"}}})
	if created.err != nil {
		t.Fatal(created.err)
	}
	del := &pb.DeleteTableCommand{Name: "t", RequestId: []byte("r1")}
	first := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, del)
	again := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, del)
	for _, res := range []*applyResult{first, again} {
		if res.err != nil || len(res.ranges) != 1 || res.ranges[0].GetRangeId() != created.ranges[0].GetRangeId() {
			t.Fatalf("delete = %+v, want the table's range", res)
		}
	}
}

// slowDeletes is a fake partition server that freezes at once and takes
// its time deleting a replica (a large range's data, or a server that
// stops answering after the freeze).
type slowDeletes struct {
	freezeScript
	release chan struct{}
}

func (f *slowDeletes) DeleteReplica(ctx context.Context, _ *pb.DeleteReplicaRequest) (*pb.DeleteReplicaResponse, error) {
	select {
	case <-f.release:
	case <-ctx.Done():
	}
	return &pb.DeleteReplicaResponse{}, nil
}

// deleteTestServer is a master with three fake partition servers a, b, c
// that freeze at once and hold DeleteReplica until release is closed.
func deleteTestServer(t *testing.T, release chan struct{}) (*Server, map[string]*slowDeletes) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: DefaultConfig(), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: 1,
		pool: connpool.New(grpc.WithTransportCredentials(insecure.NewCredentials())), ctx: ctx, logger: slog.New(slog.DiscardHandler)}
	t.Cleanup(func() {
		cancel()
		s.wg.Wait()
		s.pool.Close()
	})
	s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
	apply := applier(t, s.fsm)
	s.applyHook = func(kind pb.MasterCommandKind, m proto.Message) (*applyResult, error) {
		return apply(kind, m), nil
	}
	fakes := map[string]*slowDeletes{}
	for _, id := range []string{"a", "b", "c"} {
		fakes[id] = &slowDeletes{freezeScript: freezeScript{answer: func() error { return nil }}, release: release}
		s.pool.RegisterLocal("local-"+id, fakes[id])
		apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "local-" + id}})
	}
	return s, fakes
}

// TestDeleteAnsweredOnceFrozen: DeleteTable answers, and the name is free
// again, once the ranges froze, not once their replicas are deleted (best
// effort, which may take long: before, a server slow to delete made the
// delete answer 500 after 4 s and kept the name refused meanwhile).
func TestDeleteAnsweredOnceFrozen(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s, _ := deleteTestServer(t, release)
	r := &pb.RangeDescriptor{RangeId: 4, TableId: 1, Generation: 1, Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	markPending(s, "t", 1, r)
	if err := s.freezeDeleted(ctx, "t", 1, []*pb.RangeDescriptor{r}); err != nil {
		t.Fatalf("freezeDeleted = %v, want nil once the range froze", err)
	}
	if s.deleting.running(1) || s.pendingFreeze(1) {
		t.Fatal("the name is still refused after the freeze")
	}
}

// TestDeleteOfRecreatedTableFreezesItsOwnRanges: a delete of a table
// created again under a name whose first table's freezing is still in
// flight freezes its own ranges; before, deletions were keyed by name and
// the second joined the first, answering 204 with its ranges serving.
func TestDeleteOfRecreatedTableFreezesItsOwnRanges(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s, fakes := deleteTestServer(t, release)
	hold := make(chan struct{})
	fakes["a"].answer = func() error { <-hold; return nil } // the first table's freeze hangs on a
	for _, id := range []string{"b", "c"} {
		fakes[id].answer = func() error { return unreachable() }
	}
	old := &pb.RangeDescriptor{RangeId: 4, TableId: 1, Generation: 1, Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	markPending(s, "t", 1, old)
	if err := s.freezeDeleted(ctx, "t", 1, []*pb.RangeDescriptor{old}); err == nil {
		t.Fatal("the first delete answered with its freeze hanging")
	}
	// The second table's range, on servers that never freeze it.
	fresh := &pb.RangeDescriptor{RangeId: 9, TableId: 2, Generation: 1, Replicas: []*pb.Replica{{ServerId: "b"}, {ServerId: "c"}}}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	close(hold)
	markPending(s, "T", 2, fresh)
	if err := s.freezeDeleted(ctx2, "T", 2, []*pb.RangeDescriptor{fresh}); err == nil {
		t.Fatal("the re-created table's delete answered without freezing its range")
	}
}

// markPending puts table id in the replicated list of pending freezes, as
// its DELETE_TABLE command would have.
func markPending(s *Server, name string, id uint64, ranges ...*pb.RangeDescriptor) {
	s.fsm.mu.Lock()
	defer s.fsm.mu.Unlock()
	s.fsm.st.deletedPending[id] = &pb.DeletedTable{TableId: id, Name: name, Ranges: ranges}
}

// pendingFreeze reports whether table id is in the replicated list.
func (s *Server) pendingFreeze(id uint64) bool {
	var ok bool
	s.fsm.read(func(st *state) { _, ok = st.deletedPending[id] })
	return ok
}

// TestRetriedDeleteAfterConfirmation: a delete retried once its table's
// freezing was confirmed (the list no longer holds it) is answered at
// once, without freezing again; before, the retry froze anew and, with
// the ranges' replicas already deleted and a server down, answered 500
// for its whole budget.
func TestRetriedDeleteAfterConfirmation(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s, fakes := deleteTestServer(t, release)
	for _, f := range fakes {
		f.answer = func() error { return unreachable() }
	}
	r := &pb.RangeDescriptor{RangeId: 4, TableId: 1, Generation: 1, Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.freezeDeleted(ctx, "t", 1, []*pb.RangeDescriptor{r}); err != nil {
		t.Fatalf("retried delete after confirmation = %v, want nil", err)
	}
	if s.deleting.running(1) {
		t.Fatal("a confirmed table's ranges are being frozen again")
	}
}

// TestFreezeAsksReportedVoters: a range whose descriptor's replicas are
// mostly gone is not counted gone while the voters its leader last
// reported (a configuration the descriptor does not show) are not.
func TestFreezeAsksReportedVoters(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s, fakes := deleteTestServer(t, release)
	fakes["a"].answer = notHosted
	fakes["c"].answer = notHosted
	fakes["b"].answer = unreachable // B and D elect; no hint yet
	d := &slowDeletes{freezeScript: freezeScript{answer: unreachable}, release: release}
	s.pool.RegisterLocal("local-d", d)
	applier(t, s.fsm)(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: "d", GrpcAddr: "local-d"}})
	s.reports.mu.Lock()
	s.reports.voters[4] = voterReport{server: "a", generation: 2, voters: []string{"a", "b", "d"}, at: time.Now()}
	s.reports.mu.Unlock()
	r := &pb.RangeDescriptor{RangeId: 4, TableId: 1, Generation: 1, Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.freezeDeletedRange(ctx, r); err == nil {
		t.Fatal("range counted gone while the reported configuration's majority (b, d) may serve")
	}
	if d.asked == 0 {
		t.Fatal("the reported voter d was not asked")
	}
}
