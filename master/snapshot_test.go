package master

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// applyCmd applies one command to s as the FSM would and fails the test
// on an error result.
func applyCmd(t *testing.T, s *state, kind pb.MasterCommandKind, m proto.Message) *applyResult {
	t.Helper()
	payload, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	res := handlers[kind](s, payload)
	if res.err != nil {
		t.Fatalf("%v: %v", kind, res.err)
	}
	return res
}

// snapshotted is s through a snapshot, its bytes and a restore, as a
// follower that installs it gets it.
func snapshotted(t *testing.T, s *state) *state {
	t.Helper()
	b, err := proto.Marshal(s.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var m pb.MasterSnapshot
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return stateFromSnapshot(&m)
}

// stateDiff names the fields of the replicated state that differ (messages
// compared with proto.Equal, nil and empty alike).
func stateDiff(a, b *state) []string {
	var out []string
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	for i := 0; i < va.NumField(); i++ {
		name := va.Type().Field(i).Name
		if name == "changes" {
			continue // not replicated
		}
		if !equalValue(exported(va.Field(i)), exported(vb.Field(i))) {
			out = append(out, name)
		}
	}
	return out
}

// exported makes an unexported field's value readable (Interface).
func exported(f reflect.Value) reflect.Value {
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

var messageType = reflect.TypeOf((*proto.Message)(nil)).Elem()

func equalValue(a, b reflect.Value) bool {
	if a.Type().Implements(messageType) {
		return proto.Equal(a.Interface().(proto.Message), b.Interface().(proto.Message))
	}
	switch a.Kind() {
	case reflect.Slice:
		if a.Type().Elem().Kind() == reflect.Uint8 {
			return bytes.Equal(a.Bytes(), b.Bytes())
		}
		if a.Len() != b.Len() {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !equalValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() || !equalValue(a.MapIndex(k), bv) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// TestSnapshotRestoresEveryField drives the state through every command
// kind, then checks that a restored snapshot holds every field the live
// state keeps (a field added to state and forgotten by snapshot or
// stateFromSnapshot fails here), and that both answer the next commands
// alike.
func TestSnapshotRestoresEveryField(t *testing.T) {
	const (
		regServer   = pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER
		createTable = pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE
		deleteTable = pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE
		setACL      = pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_TABLE_ACL
		setProps    = pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVICE_PROPERTIES
		acctProps   = pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNT_SERVICE_PROPERTIES
		update      = pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES
		allocate    = pb.MasterCommandKind_MASTER_COMMAND_KIND_ALLOCATE_RANGE_ID
		event       = pb.MasterCommandKind_MASTER_COMMAND_KIND_APPEND_EVENT
		removeRange = pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_RANGE
		drain       = pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVER_DRAINING
		removeSrv   = pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_SERVER
		accounts    = pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNTS
		decision    = pb.MasterCommandKind_MASTER_COMMAND_KIND_MERGE_DECISION
		started     = pb.MasterCommandKind_MASTER_COMMAND_KIND_MARK_RANGES_STARTED
		frozen      = pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETED_RANGES_FROZEN
	)
	used := map[pb.MasterCommandKind]bool{}
	s := newState()
	do := func(kind pb.MasterCommandKind, m proto.Message) *applyResult {
		t.Helper()
		used[kind] = true
		return applyCmd(t, s, kind, m)
	}
	reps := func(ids ...string) []*pb.Replica {
		var out []*pb.Replica
		for _, id := range ids {
			out = append(out, &pb.Replica{ServerId: id})
		}
		return out
	}
	for _, id := range []string{"ps1", "ps2", "ps3", "ps4"} {
		do(regServer, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id, GrpcAddr: id + ":1", RaftAddr: id + ":2"}})
	}
	do(drain, &pb.SetServerDrainingCommand{ServerId: "ps3", Draining: true})
	do(removeSrv, &pb.RemoveServerCommand{ServerId: "ps4"})
	var first *pb.RangeDescriptor
	for i := 0; i < 4; i++ {
		res := do(createTable, &pb.CreateTableCommand{Name: fmt.Sprintf("T%d", i), RequestId: []byte(fmt.Sprint("req", i)),
			CreatedUnixNano: int64(i + 1), Replicas: reps("ps1", "ps2", "ps3")})
		if i == 0 {
			first = res.ranges[0]
		}
	}
	do(deleteTable, &pb.DeleteTableCommand{Name: "t3", RequestId: []byte("del3")})
	// T2's ranges are confirmed frozen, T3's stay pending.
	t2 := do(deleteTable, &pb.DeleteTableCommand{Name: "t2", RequestId: []byte("del2")}).table.GetTableId()
	do(frozen, &pb.DeletedRangesFrozenCommand{TableId: t2})
	do(setACL, &pb.SetTableACLCommand{Name: "t1", Acl: []*pb.SignedIdentifier{{Id: "policy1"}}})
	do(setProps, &pb.SetServicePropertiesCommand{Properties: []byte("<StorageServiceProperties/>")})
	do(acctProps, &pb.SetServicePropertiesCommand{Account: "acct", Properties: []byte("<StorageServiceProperties><Cors/></StorageServiceProperties>")})
	do(accounts, &pb.SetAccountsCommand{Accounts: []*pb.StorageAccount{{Name: "acct", Keys: [][]byte{[]byte("k1"), []byte("k2")}}}})
	do(started, &pb.MarkRangesStartedCommand{RangeIds: []uint64{first.GetRangeId(), 2}})
	// Split T0's range at "m", then merge the halves back.
	right := do(allocate, &pb.AllocateRangeIDCommand{}).rangeID
	left := &pb.RangeDescriptor{RangeId: first.GetRangeId(), Table: "T0", TableId: first.GetTableId(), End: "m", Generation: 2, Replicas: reps("ps1", "ps2", "ps3")}
	do(update, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{left,
		{RangeId: right, Table: "T0", TableId: first.GetTableId(), Start: "m", Generation: 2, Replicas: reps("ps1", "ps2", "ps3")}}})
	do(decision, &pb.MergeDecisionCommand{Decision: &pb.MergeDecision{RightRangeId: right, FreezeIndex: 7, Outcome: pb.MergeOutcome_MERGE_OUTCOME_ABORT}})
	// T1's range also splits and keeps its right half's decision.
	right2 := do(allocate, &pb.AllocateRangeIDCommand{}).rangeID
	do(update, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{
		{RangeId: 2, Table: "T1", TableId: 2, End: "k", Generation: 2, Replicas: reps("ps1", "ps2", "ps3")},
		{RangeId: right2, Table: "T1", TableId: 2, Start: "k", Generation: 2, Replicas: reps("ps1", "ps2", "ps3")}}})
	do(decision, &pb.MergeDecisionCommand{Decision: &pb.MergeDecision{RightRangeId: right2, FreezeIndex: 9, Outcome: pb.MergeOutcome_MERGE_OUTCOME_COMMIT}})
	merged := proto.Clone(left).(*pb.RangeDescriptor)
	merged.End, merged.Generation = "", 3
	do(removeRange, &pb.RemoveRangeCommand{RangeId: right, AbsorbedBy: merged})
	for i := 0; i < 3; i++ {
		do(event, &pb.AppendEventCommand{Event: &pb.Event{Kind: pb.EventKind_EVENT_KIND_SPLIT, Message: fmt.Sprint("e", i), Figures: map[string]float64{"x": float64(i)}}})
	}
	for kind := range handlers {
		if !used[kind] {
			t.Errorf("command kind %v not driven: add it to this test", kind)
		}
	}

	r := snapshotted(t, s)
	if diff := stateDiff(s, r); len(diff) > 0 {
		t.Fatalf("restored snapshot differs in %v", diff)
	}
	if len(r.deletedPending) != 1 || !r.deletePendingName("T3", 0) {
		t.Fatalf("restored pending freezes = %v, want T3's only", r.deletedPending)
	}
	// Both answer the same next commands alike: a retried request, a new
	// table (ids), an event (sequence), an allocated range id.
	for _, st := range []*state{s, r} {
		applyCmd(t, st, createTable, &pb.CreateTableCommand{Name: "T0", RequestId: []byte("req0"), Replicas: reps("ps1")})
		applyCmd(t, st, createTable, &pb.CreateTableCommand{Name: "T9", RequestId: []byte("req9"), Replicas: reps("ps1")})
		applyCmd(t, st, event, &pb.AppendEventCommand{Event: &pb.Event{Message: "next"}})
		applyCmd(t, st, allocate, &pb.AllocateRangeIDCommand{})
	}
	if diff := stateDiff(s, r); len(diff) > 0 {
		t.Fatalf("after the same commands, the restored state differs in %v", diff)
	}
}
