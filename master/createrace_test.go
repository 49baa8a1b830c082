package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/failpoint"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// raceServer is a fake partition server: it creates replicas (the
// campaigning one leads at once), freezes and deletes them, counts the
// replicas it was asked to create and keeps the deletes it was sent.
type raceServer struct {
	pb.UnimplementedPartitionServiceServer
	id      string
	mu      sync.Mutex
	created int
	deletes []*pb.DeleteReplicaRequest
}

func (f *raceServer) CreateReplica(_ context.Context, req *pb.CreateReplicaRequest) (*pb.CreateReplicaResponse, error) {
	f.mu.Lock()
	f.created++
	f.mu.Unlock()
	if req.GetCampaign() {
		return &pb.CreateReplicaResponse{LeaderServerId: f.id}, nil
	}
	return &pb.CreateReplicaResponse{}, nil
}

func (f *raceServer) FreezeRange(context.Context, *pb.FreezeRangeRequest) (*pb.FreezeRangeResponse, error) {
	return &pb.FreezeRangeResponse{FreezeIndex: 7}, nil
}

func (f *raceServer) DeleteReplica(_ context.Context, req *pb.DeleteReplicaRequest) (*pb.DeleteReplicaResponse, error) {
	f.mu.Lock()
	f.deletes = append(f.deletes, req)
	f.mu.Unlock()
	return &pb.DeleteReplicaResponse{}, nil
}

// raceMaster is a leading solo master with three fake partition servers
// a, b, c, heard from.
func raceMaster(t *testing.T) (*Server, []*raceServer) {
	t.Helper()
	_, s := startSoloMaster(t)
	t.Cleanup(func() { s.Close() })
	waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
	var fakes []*raceServer
	for _, id := range []string{"a", "b", "c"} {
		f := &raceServer{id: id}
		s.pool.RegisterLocal("local-"+id, f)
		fakes = append(fakes, f)
		if _, err := (&service{s: s}).Heartbeat(context.Background(), &pb.HeartbeatRequest{
			Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "local-" + id, RaftAddr: "127.0.0.1:1"}, Full: true,
		}); err != nil {
			t.Fatal(err)
		}
	}
	return s, fakes
}

// replicasCreated is how many replicas the fakes were asked to create.
func replicasCreated(fakes []*raceServer) int {
	n := 0
	for _, f := range fakes {
		f.mu.Lock()
		n += f.created
		f.mu.Unlock()
	}
	return n
}

// eventsEmitted is how many events of kind this process emitted.
func eventsEmitted(t *testing.T, kind pb.EventKind) float64 {
	t.Helper()
	var m dto.Metric
	if err := eventsTotal.WithLabelValues(kind.String()).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// mustApply proposes one command on s and fails the test on an error.
func mustApply(t *testing.T, s *Server, kind pb.MasterCommandKind, m proto.Message) *applyResult {
	t.Helper()
	res, err := s.apply(kind, m)
	if err != nil {
		t.Fatalf("%v: %v", kind, err)
	}
	return res
}

// createRaceCase is one command sequence that commits between a
// CreateTable's name check and its own commit.
type createRaceCase struct {
	name    string
	between func(t *testing.T, s *Server, table string, reps []*pb.Replica)
	// wantReason: the create's answer ("": created); the same request's
	// retry answers the same.
	wantReason string
	// wantCreates: replicas the create asked for (none when refused,
	// none when the same request's other attempt created and started the
	// range).
	wantCreates int
	wantEvents  float64 // TABLE_CREATED events the create emitted
}

var createRaceCases = []createRaceCase{
	{"another create and a delete of the name commit first", func(t *testing.T, s *Server, table string, reps []*pb.Replica) {
		// Client B creates and deletes the name while client A's create
		// is between its check (the name free) and its commit: A's table
		// must not be created while B's ranges may still serve.
		mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: table, Replicas: reps, RequestId: []byte("other")})
		mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, &pb.DeleteTableCommand{Name: table, RequestId: []byte("del")})
	}, rpcerr.ReasonTableBeingDeleted, 0, 0},
	{"another create of the name commits first", func(t *testing.T, s *Server, table string, reps []*pb.Replica) {
		mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: table, Replicas: reps, RequestId: []byte("other")})
	}, rpcerr.ReasonTableAlreadyExists, 0, 0},
	{"the same request's other attempt commits and starts the range first", func(t *testing.T, s *Server, table string, reps []*pb.Replica) {
		res := mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: table, Replicas: reps, RequestId: []byte("req-" + table)})
		mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_MARK_RANGES_STARTED, &pb.MarkRangesStartedCommand{RangeIds: []uint64{res.ranges[0].GetRangeId()}})
	}, "", 0, 0},
}

// TestCreateRacingTableCommands: commands of the same name that commit
// between CreateTable's name check and its own commit. Before, the check
// alone refused a name whose deleted table was pending a freeze, so a
// create and delete of the name by another client in that window let the
// create through (a new table while the old one's ranges may serve a
// front-end whose map is behind); and an attempt whose command the FSM
// answered from the record of the same request's other attempt started
// the range again by bootstrapping it (a started range's lost replica
// must be re-created with a join floor) and emitted TABLE_CREATED twice.
// A refused create leaves nothing (no ids, no replicas) and its retry is
// answered the same, also once the name is free again.
func TestCreateRacingTableCommands(t *testing.T) {
	s, fakes := raceMaster(t)
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	const point = "master/create-table/before-commit"
	for i, tc := range createRaceCases {
		t.Run(tc.name, func(t *testing.T) {
			table := fmt.Sprintf("race%d", i)
			var nextTable, nextRange uint64
			var creates int
			failpoint.Enable(point, func() error {
				tc.between(t, s, table, reps)
				s.fsm.read(func(st *state) { nextTable, nextRange = st.nextTableID, st.nextRangeID })
				creates = replicasCreated(fakes)
				return nil
			})
			events := eventsEmitted(t, pb.EventKind_EVENT_KIND_TABLE_CREATED)
			req := &pb.CreateTableRequest{Name: table, RequestId: []byte("req-" + table)}
			_, err := (&service{s: s}).CreateTable(context.Background(), req)
			failpoint.Disable(point)
			if got := rpcerr.Parse(err).Reason; got != tc.wantReason || (tc.wantReason == "") != (err == nil) {
				t.Fatalf("create = %v (reason %q), want reason %q", err, got, tc.wantReason)
			}
			if got := replicasCreated(fakes) - creates; got != tc.wantCreates {
				t.Errorf("the create asked for %d replicas, want %d", got, tc.wantCreates)
			}
			if got := eventsEmitted(t, pb.EventKind_EVENT_KIND_TABLE_CREATED) - events; got != tc.wantEvents {
				t.Errorf("the create emitted %v TABLE_CREATED events, want %v", got, tc.wantEvents)
			}
			if tc.wantReason != "" {
				s.fsm.read(func(st *state) {
					if st.nextTableID != nextTable || st.nextRangeID != nextRange {
						t.Errorf("the refused create consumed ids: next table %d→%d, range %d→%d", nextTable, st.nextTableID, nextRange, st.nextRangeID)
					}
				})
			}
			retryAnswersSame(t, s, req, tc.wantReason)
		})
	}
}

// retryAnswersSame retries req once the name's deleted tables are
// confirmed frozen (a front-end's retry under the id it made answers the
// first outcome whatever happened since) and checks the answer.
func retryAnswersSame(t *testing.T, s *Server, req *pb.CreateTableRequest, wantReason string) {
	t.Helper()
	var pending []uint64
	s.fsm.read(func(st *state) {
		for id, d := range st.deletedPending {
			if d.GetName() == req.GetName() {
				pending = append(pending, id)
			}
		}
	})
	for _, id := range pending {
		mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETED_RANGES_FROZEN, &pb.DeletedRangesFrozenCommand{TableId: id})
	}
	_, err := (&service{s: s}).CreateTable(context.Background(), req)
	if got := rpcerr.Parse(err).Reason; got != wantReason || (wantReason == "") != (err == nil) {
		t.Fatalf("retried create = %v (reason %q), want reason %q", err, got, wantReason)
	}
}

// TestDeleteEventOncePerDelete: a delete's retries (answered from its
// request record) emit no TABLE_DELETED event of their own; before, every
// retry emitted one.
func TestDeleteEventOncePerDelete(t *testing.T) {
	s, _ := raceMaster(t)
	v := &service{s: s}
	mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "gone",
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}})
	before := eventsEmitted(t, pb.EventKind_EVENT_KIND_TABLE_DELETED)
	// The first attempt's answer is lost after its commit: it announced
	// the delete before (its retries, answered from the record, do not).
	failpoint.Enable("master/delete-table/after-commit", func() error { return errors.New("answer lost") })
	if _, err := v.DeleteTable(context.Background(), &pb.DeleteTableRequest{Name: "gone", RequestId: []byte("del-1")}); err == nil {
		t.Fatal("delete answered through the failpoint")
	}
	failpoint.Disable("master/delete-table/after-commit")
	for _, req := range []*pb.DeleteTableRequest{
		{Name: "gone", RequestId: []byte("del-1")},
		{Name: "gone", RequestId: []byte("del-1")},                        // the front-end's retry
		{Name: "GONE", RequestId: []byte("del-1"), ClientRequestId: true}, // a client's retry, the table still gone
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := v.DeleteTable(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("delete %v: %v", req, err)
		}
	}
	if got := eventsEmitted(t, pb.EventKind_EVENT_KIND_TABLE_DELETED) - before; got != 1 {
		t.Fatalf("%v TABLE_DELETED events for one delete and its retries, want 1", got)
	}
}

// TestCreateRefusalAlikeOnDivergentPendingLists: masters may hold
// different pending lists for tables deleted before the create's check (a
// master restored from an older build's snapshot, which keeps no list,
// lacks them). The create's apply must decide alike on both, or their
// table and range ids part ways; it counts only tables created after the
// proposer's check, which every master of this log applied alike.
func TestCreateRefusalAlikeOnDivergentPendingLists(t *testing.T) {
	logBuilt := newState()
	applyTableCmd(t, logBuilt, "create", "old", "r1")
	applyTableCmd(t, logBuilt, "delete-unfrozen", "old", "r2")
	restored := snapshotted(t, logBuilt)
	restored.deletedPending = map[uint64]*pb.DeletedTable{} // an older build's snapshot
	check := logBuilt.nextTableID                           // the proposer's check, after the delete
	for _, tc := range []struct {
		name       string
		since      uint64
		wantRefuse bool
	}{
		{"deleted before the check: both create", check, false},
		// The proposer checked before the table existed (the race):
		// every master lists it (created and deleted after the check
		// by entries both applied), so both refuse.
		{"deleted after the check: both refuse", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := snapshotted(t, logBuilt), snapshotted(t, logBuilt)
			if !tc.wantRefuse {
				b = snapshotted(t, restored)
			}
			cmd := &pb.CreateTableCommand{Name: "old", RequestId: []byte("r3"), Replicas: []*pb.Replica{{ServerId: "a"}}, RefuseDeletedSince: tc.since}
			payload, _ := proto.Marshal(cmd)
			kind := pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE
			ra, rb := handlers[kind](a, payload), handlers[kind](b, payload)
			if (ra.err != nil) != (rb.err != nil) || a.nextTableID != b.nextTableID || a.nextRangeID != b.nextRangeID {
				t.Fatalf("masters part ways: %v / %v, next table %d / %d, next range %d / %d", ra.err, rb.err, a.nextTableID, b.nextTableID, a.nextRangeID, b.nextRangeID)
			}
			if refused := errors.Is(ra.err, ErrTableBeingDeleted); refused != tc.wantRefuse {
				t.Fatalf("create refused = %v (%v), want %v", refused, ra.err, tc.wantRefuse)
			}
		})
	}
}

// TestCreateRetryStartedRangeFirst: a front-end's retry of a CreateTable
// still running here is answered from the first attempt's record and
// starts the range itself (startReplayed) when that attempt has not yet;
// the first attempt, going on after its commit, must not bootstrap the
// started range's replicas again.
func TestCreateRetryStartedRangeFirst(t *testing.T) {
	s, fakes := raceMaster(t)
	const point = "master/create-table/after-commit"
	req := &pb.CreateTableRequest{Name: "retried", RequestId: []byte("req-retried")}
	var retryErr error
	failpoint.Enable(point, func() error {
		_, retryErr = (&service{s: s}).CreateTable(context.Background(), req)
		return nil
	})
	_, err := (&service{s: s}).CreateTable(context.Background(), req)
	failpoint.Disable(point)
	if err != nil || retryErr != nil {
		t.Fatalf("create = %v, its retry = %v", err, retryErr)
	}
	if got := replicasCreated(fakes); got != 3 {
		t.Fatalf("the servers were asked for %d replicas, want 3 (one bootstrap)", got)
	}
}
