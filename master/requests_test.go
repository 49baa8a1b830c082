package master

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// applyTableCmd applies one table command to s as the FSM would: op
// "create" (as a master of this build proposes it), "create-old" (an
// older build's entry, without refuse_deleted_since; "create" sets it to
// 1, a proposer whose check ran before any table: every pending deleted
// table of the name counts), "delete" (as
// answered: its ranges' freeze confirmed too), "delete-unfrozen" (its
// ranges not confirmed frozen yet: the name's deleted table pending), or
// "frozen" (the name's pending deleted tables confirmed frozen).
func applyTableCmd(t *testing.T, s *state, op, name, id string) *applyResult {
	t.Helper()
	apply := func(kind pb.MasterCommandKind, m proto.Message) *applyResult {
		payload, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return handlers[kind](s, payload)
	}
	reps := []*pb.Replica{{ServerId: "a"}}
	const frozen = pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETED_RANGES_FROZEN
	switch op {
	case "create", "create-old":
		return apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE,
			&pb.CreateTableCommand{Name: name, RequestId: []byte(id), Replicas: reps, RefuseDeletedSince: refuseSince(op)})
	case "delete", "delete-unfrozen":
		res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, &pb.DeleteTableCommand{Name: name, RequestId: []byte(id)})
		if op == "delete" && res.err == nil {
			apply(frozen, &pb.DeletedRangesFrozenCommand{TableId: res.table.GetTableId()})
		}
		return res
	case "frozen":
		for tid, d := range s.deletedPending {
			if strings.EqualFold(d.GetName(), name) {
				apply(frozen, &pb.DeletedRangesFrozenCommand{TableId: tid})
			}
		}
		return &applyResult{}
	}
	t.Fatalf("unknown op %q", op)
	return nil
}

func refuseSince(op string) uint64 {
	if op == "create" {
		return 1
	}
	return 0
}

// TestTableRequestIDs scripts retries of table commands: a retry with the
// request's id answers the first outcome (also after a snapshot); another
// id, or none, is a new request.
func TestTableRequestIDs(t *testing.T) {
	type step struct {
		op, name, id string
		want         error // nil: success
		wantTableID  uint64
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"retried create answers success", []step{
			{"create", "t1", "r1", nil, 1},
			{"create", "t1", "r1", nil, 1},
			{"create", "T1", "r1", nil, 1}, // names are case-insensitive
		}},
		{"another request gets 409", []step{
			{"create", "t1", "r1", nil, 1},
			{"create", "t1", "r2", ErrTableExists, 0},
			{"create", "t1", "", ErrTableExists, 0},
		}},
		{"a retried failure fails the same", []step{
			{"create", "t1", "r1", nil, 1},
			{"create", "t1", "r2", ErrTableExists, 0},
			{"delete", "t1", "r3", nil, 1},
			{"create", "t1", "r2", ErrTableExists, 0},
		}},
		{"retried delete answers success", []step{
			{"create", "t1", "r1", nil, 1},
			{"delete", "t1", "r2", nil, 1},
			{"delete", "t1", "r2", nil, 1},
			{"delete", "t1", "r3", ErrTableNotFound, 0},
		}},
		{"an id reused for another table is a new request", []step{
			{"create", "t1", "r1", nil, 1},
			{"create", "t2", "r1", nil, 2},
			{"delete", "t1", "r1", nil, 1},
		}},
		{"a retried create after the table was deleted still answers success", []step{
			{"create", "t1", "r1", nil, 1},
			{"delete", "t1", "r2", nil, 1},
			{"create", "t1", "r1", nil, 1},
			{"create", "t1", "r3", nil, 2},
		}},
		// The apply decides (not only the proposer's check, before a
		// create and delete of the name by another client committed).
		{"a create while the name's deleted table is pending a freeze is refused, and its retry", []step{
			{"create", "t1", "r1", nil, 1},
			{"delete-unfrozen", "t1", "r2", nil, 1},
			{"create", "t1", "r3", ErrTableBeingDeleted, 0},
			{"create", "T1", "r3", ErrTableBeingDeleted, 0},
			{"create", "t2", "r4", nil, 2}, // another name; the refusal took no id
			{"frozen", "t1", "", nil, 0},
			{"create", "t1", "r3", ErrTableBeingDeleted, 0}, // the record answers
			{"create", "t1", "r5", nil, 3},
		}},
		{"an older build's create entry applies as it did", []step{
			{"create", "t1", "r1", nil, 1},
			{"delete-unfrozen", "t1", "r2", nil, 1},
			{"create-old", "t1", "r3", nil, 2},
			{"create", "t1", "r4", ErrTableExists, 0}, // exists before pending
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newState()
			for i, st := range tc.steps {
				// Every step also runs on a state restored from a snapshot
				// of the one before: records are replicated state.
				r := stateFromSnapshot(s.snapshot())
				for _, s := range []*state{s, r} {
					res := applyTableCmd(t, s, st.op, st.name, st.id)
					if !errors.Is(res.err, st.want) || (st.want == nil) != (res.err == nil) {
						t.Fatalf("step %d %v: err %v, want %v", i, st, res.err, st.want)
					}
					if res.err == nil && res.table.GetTableId() != st.wantTableID {
						t.Fatalf("step %d %v: table id %d, want %d", i, st, res.table.GetTableId(), st.wantTableID)
					}
				}
			}
		})
	}
}

// TestTableRequestsBounded checks that the records stay within maxRequests,
// forgetting the oldest first.
func TestTableRequestsBounded(t *testing.T) {
	s := newState()
	for i := 0; i < maxRequests+10; i++ {
		if res := applyTableCmd(t, s, "create", fmt.Sprintf("t%d", i), fmt.Sprintf("r%d", i)); res.err != nil {
			t.Fatal(res.err)
		}
	}
	if len(s.requests) != maxRequests || len(s.byID) != maxRequests {
		t.Fatalf("%d records, %d indexed; want %d", len(s.requests), len(s.byID), maxRequests)
	}
	kind := pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE
	if _, ok := s.request([]byte("r0"), kind, "t0"); ok {
		t.Fatal("the oldest record was kept")
	}
	if _, ok := s.request([]byte(fmt.Sprint("r", maxRequests+9)), kind, fmt.Sprint("t", maxRequests+9)); !ok {
		t.Fatal("the newest record was dropped")
	}
}

// TestReusedRequestIDIsANewRequest scripts a client that sends one request
// id for many requests (x-ms-client-request-id is a logging id to Azure):
// a record answers a request only while its outcome still holds
// (state.requestToApply); otherwise the request runs as a new one, under an
// id derived from the record, and its own retries are answered from its
// own record. Before, a create, delete, create under one id answered the
// second create from the first's record (201) and created nothing.
func TestReusedRequestIDIsANewRequest(t *testing.T) {
	type step struct {
		op, name, id string
		want         error // nil: success
		wantTableID  uint64
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"create, delete, create, delete, create under one id", []step{
			{"create", "t1", "job", nil, 1},
			{"create", "t1", "job", nil, 1}, // a retry
			{"delete", "t1", "job", nil, 1},
			{"delete", "t1", "job", nil, 1}, // a retry
			{"create", "t1", "job", nil, 2},
			{"create", "t1", "job", nil, 2}, // a retry of the second
			{"delete", "t1", "job", nil, 2},
			{"create", "T1", "job", nil, 3},
			{"create", "t1", "job", nil, 3},
		}},
		{"a failure is not answered once its cause is gone", []step{
			{"create", "t1", "a", nil, 1},
			{"create", "t1", "job", ErrTableExists, 0},
			{"create", "t1", "job", ErrTableExists, 0},
			{"delete", "t1", "a", nil, 1},
			{"create", "t1", "job", nil, 2},
			{"create", "t1", "job", nil, 2},
		}},
		{"a delete's 404 is not answered once the table is back", []step{
			{"delete", "t1", "job", ErrTableNotFound, 0},
			{"create", "t1", "a", nil, 1},
			{"delete", "t1", "job", nil, 1},
			{"delete", "t1", "job", nil, 1},
		}},
		{"an id the front-end made answers its record whatever happened since", []step{
			{"create", "t1", "made:m1", nil, 1},
			{"delete", "t1", "a", nil, 1},
			{"create", "t1", "made:m1", nil, 1},
			{"delete", "t1", "made:m2", ErrTableNotFound, 0},
			{"create", "t1", "b", nil, 2},
			{"delete", "t1", "made:m2", ErrTableNotFound, 0},
		}},
		{"a TableBeingDeleted is not answered once the freeze is confirmed", []step{
			{"create", "t1", "a", nil, 1},
			{"delete-unfrozen", "t1", "b", nil, 1},
			{"create", "t1", "job", ErrTableBeingDeleted, 0},
			{"create", "t1", "job", ErrTableBeingDeleted, 0},
			{"frozen", "t1", "", nil, 0},
			{"create", "t1", "job", nil, 2},
			{"create", "t1", "job", nil, 2},
		}},
		{"a TableBeingDeleted is not answered once the name is taken", []step{
			{"create", "t1", "a", nil, 1},
			{"delete-unfrozen", "t1", "b", nil, 1},
			{"create", "t1", "job", ErrTableBeingDeleted, 0},
			{"create-old", "t1", "c", nil, 2}, // an older build's entry
			{"create", "t1", "job", ErrTableExists, 0},
		}},
		{"a TableBeingDeleted under an id the front-end made answers its record", []step{
			{"create", "t1", "a", nil, 1},
			{"delete-unfrozen", "t1", "b", nil, 1},
			{"create", "t1", "made:m1", ErrTableBeingDeleted, 0},
			{"frozen", "t1", "", nil, 0},
			{"create", "t1", "made:m1", ErrTableBeingDeleted, 0},
			{"create", "t1", "c", nil, 2},
		}},
		{"a retry still answers while nothing changed the table", []step{
			{"create", "t1", "r1", nil, 1},
			{"create", "t2", "r2", nil, 2},
			{"delete", "t2", "r3", nil, 2},
			{"create", "t1", "r1", nil, 1},
			{"delete", "t2", "r3", nil, 2},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newState()
			for i, st := range tc.steps {
				kind := pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE
				if strings.HasPrefix(st.op, "delete") {
					kind = pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE
				}
				// As master.CreateTable and DeleteTable do.
				// An id "made:…" is one the front-end made (the client
				// sent none).
				raw, made := strings.CutPrefix(st.id, "made:")
				id, rec := s.requestToApply([]byte(raw), !made, kind, st.name)
				var res *applyResult
				if rec != nil {
					res = replay(rec)
				} else {
					res = applyTableCmd(t, s, st.op, st.name, string(id))
				}
				if !errors.Is(res.err, st.want) || (st.want == nil) != (res.err == nil) {
					t.Fatalf("step %d %v: err %v, want %v", i, st, res.err, st.want)
				}
				if res.err == nil && res.table.GetTableId() != st.wantTableID {
					t.Fatalf("step %d %v: table id %d, want %d", i, st, res.table.GetTableId(), st.wantTableID)
				}
			}
		})
	}
}
