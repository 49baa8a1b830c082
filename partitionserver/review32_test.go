package partitionserver

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/edm"
	pb "tablestore/proto/tablestorepb"
)

// TestReviewDeleteOfMergedNamesakeKeepsItsGroup (review, session 32): a
// group keeps its name after its namesake span is merged away (a
// cross-group merge takes the namesake alone; range-groups.md stage 5,
// reliability.md 44). A delete that then names the namesake's range id
// (the retired-range delete of the reconcile, racing the merge's apply
// here; a late DeleteReplica) finds no slot serving that range, and takes
// the "leftovers of an interrupted delete" path: it must not drop the log
// and snapshot directory of the live group that bears the same id.
func TestReviewDeleteOfMergedNamesakeKeepsItsGroup(t *testing.T) {
	s, v := groupWithoutNamesake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if sl := s.slotOf(22); sl == nil || sl.id != 21 {
		t.Fatalf("range 22 served by %v, want group 21", sl)
	}
	before, _ := s.logs.Log(21).LastIndex()
	// The master's retire after the merge (master/ops.go retire: a
	// DeleteReplica naming the merged range only, sent to every server of
	// it); the reconcile's retired-range delete takes the same path.
	err := s.deleteRemoved(21, 0, 0, 0)
	last, _ := s.logs.Log(21).LastIndex()
	if !slices.Contains(s.logs.Groups(), 21) || last < before || !exists(replicaDir(s.cfg.DataDir, 21)) {
		t.Errorf("delete of merged range 21 (err %v) while group 21 serves range 22: group 21's log listed %v, last index %d (was %d), its directory there %v",
			err, slices.Contains(s.logs.Groups(), 21), last, before, exists(replicaDir(s.cfg.DataDir, 21)))
	}
	// What it costs: a write to range 22 acknowledged after the delete,
	// then a restart of the server.
	op := &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "q", RowKey: "after",
		Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: "q", RowKey: "after"})}
	if _, err := v.Write(ctx, &pb.WriteRequest{RangeId: 22, Generation: 2, Ops: []*pb.EntityOp{op}}); err != nil {
		t.Logf("write to range 22 after the delete: %v", err)
		return
	}
	s.Close()
	again, err := New(s.cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	started(t, again)
	v2 := &service{s: again}
	gctx, gcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer gcancel()
	_, gerr := v2.Get(gctx, &pb.GetRequest{RangeId: 22, PartitionKey: "q", RowKey: "after"})
	for status.Code(gerr) == codes.Unavailable && gctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
		_, gerr = v2.Get(gctx, &pb.GetRequest{RangeId: 22, PartitionKey: "q", RowKey: "after"})
	}
	last2, _ := again.logs.Log(21).LastIndex()
	if gerr != nil {
		t.Errorf("acknowledged write to range 22 after the restart: %v (group 21's last index now %d)", gerr, last2)
	}
	// A second write after the restart: its entry index lies below the
	// group's applied index in the state file when the log restarted.
	if _, err := v2.Write(gctx, &pb.WriteRequest{RangeId: 22, Generation: 2, Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "q", RowKey: "restart",
		Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: "q", RowKey: "restart"})}}}); err != nil {
		t.Errorf("write to range 22 after the restart: %v (group 21's last index %d, applied in the file %d)", err, last2, again.slotOf(22).group.AppliedIndex())
	}
}

// TestReviewRestartKeepsTheLogOfAGroupWithoutItsNamesake (review, session
// 32): a group whose namesake span was merged away serves its other spans
// under the namesake's id; no stored record bears that id. A restart must
// keep the group's Raft log (dropOrphanLogs keys "known" by range ids).
func TestReviewRestartKeepsTheLogOfAGroupWithoutItsNamesake(t *testing.T) {
	s, v := groupWithoutNamesake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	op := &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "q", RowKey: "before",
		Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: "q", RowKey: "before"})}
	if _, err := v.Write(ctx, &pb.WriteRequest{RangeId: 22, Generation: 2, Ops: []*pb.EntityOp{op}}); err != nil {
		t.Fatal(err)
	}
	before, _ := s.logs.Log(21).LastIndex()
	term, _ := s.logs.Log(21).GetUint64([]byte("CurrentTerm"))
	s.Close()
	again, err := New(s.cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	started(t, again)
	last, _ := again.logs.Log(21).LastIndex()
	term2, _ := again.logs.Log(21).GetUint64([]byte("CurrentTerm"))
	if last < before || term2 < term {
		t.Errorf("group 21 (serving range 22) after a restart: last index %d, was %d; term %d, was %d", last, before, term2, term)
	}
	v2 := &service{s: again}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	after := &pb.WriteRequest{RangeId: 22, Generation: 2, Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "q", RowKey: "after",
		Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: "q", RowKey: "after"})}}}
	_, err = v2.Write(wctx, after)
	for status.Code(err) == codes.Unavailable && wctx.Err() == nil {
		// The group elects again after the restart.
		time.Sleep(5 * time.Millisecond)
		_, err = v2.Write(wctx, after)
	}
	if err != nil {
		t.Errorf("write to range 22 after the restart: %v", err)
	}
}

// TestReviewJoinFloorOfASpanInAGroupNamedByAnother (review, session 32):
// a range alone in a group named by its merged-away namesake (range 22 of
// group 21) is moved onto this server: the move's CreateReplica carries a
// join floor. createReplicaLocked records it in the shared log's group
// named by the range id (22), not the group the replica runs as (21). A
// crash between the store and the open (the case the early record is
// for), then the master's retried CreateReplica (raiseHostedFloor, by
// range id again), leaves group 21 without a floor.
func TestReviewJoinFloorOfASpanInAGroupNamedByAnother(t *testing.T) {
	m := &heartbeatMaster{}
	s := started(t, newAgainstMaster(t, m, nil))
	desc := &pb.RangeDescriptor{RangeId: 22, GroupId: 21, Table: "t", TableId: 7, Start: "m", Generation: 5,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}}}
	floor := joinFloor{term: 3, index: 7}
	// createReplicaLocked's first two steps, then a crash.
	if _, err := raiseFloor(s.logs.Log(desc.GetRangeId()), floor); err != nil {
		t.Fatal(err)
	}
	if err := s.store.CreateRange(desc, false); err != nil {
		t.Fatal(err)
	}
	s.Close()
	again, err := New(s.cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	started(t, again)
	if sl := again.slotOf(22); sl == nil || sl.id != 21 {
		t.Fatalf("range 22 after the restart served by %v, want group 21", sl)
	}
	// The master's retried CreateReplica.
	if err := again.createReplica(desc, false, false, nil, floor); err != nil {
		t.Fatal(err)
	}
	if f, err := storedFloor(again.logs.Log(21)); err != nil || f != floor {
		t.Errorf("join floor of group 21, which runs range 22's replica: %+v (%v), want %+v; group 22's: %+v", f, err, floor, func() joinFloor { f, _ := storedFloor(again.logs.Log(22)); return f }())
	}
}

// groupWithoutNamesake starts a server whose group 21 serves range 22 only:
// range 21 split in its group (22), then range 21 was merged away across
// groups as an older master's merge left it (the left group's entry
// deletes 21's record, and its hook, RangeMerged, leaves group 21 serving
// its other span).
func groupWithoutNamesake(t *testing.T) (*Server, *service) {
	t.Helper()
	s := started(t, newAgainstMaster(t, &heartbeatMaster{}, nil))
	_, v := leadingRangeWithWrites(t, s, 21, 1, 3)
	splitInGroup(t, v, 21, "m", 22)
	waitFor(t, func() bool { return s.slotOf(22) != nil })
	if err := s.store.DeleteRange(21, 0); err != nil {
		t.Fatal(err)
	}
	s.RangeMerged(20, 21)
	waitFor(t, func() bool { return s.slotOf(21) == nil })
	return s, v
}

// TestDeleteOfUnservedRecordInNamedGroup: a record of range 21 that no
// group serves here (a restore kept it outside the group's spans), while
// group 21 serves range 22: the master's delete of range 21 deletes that
// record, and only it (review 32s: it answered "deleted" and kept it).
func TestDeleteOfUnservedRecordInNamedGroup(t *testing.T) {
	s, _ := groupWithoutNamesake(t)
	stale := &pb.RangeDescriptor{RangeId: 21, Table: "t", TableId: 1, Start: "", End: "m", Generation: 1,
		Replicas: []*pb.Replica{{ServerId: s.id}}}
	if err := s.store.CreateRange(stale, false); err != nil {
		t.Fatal(err)
	}
	before, _ := s.logs.Log(21).LastIndex()
	if err := s.deleteRemoved(21, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if has, err := s.store.HasRange(21); err != nil || has {
		t.Errorf("range 21's unserved record after its delete: stored %v (%v)", has, err)
	}
	if last, _ := s.logs.Log(21).LastIndex(); last < before || s.slotOf(22) == nil || !exists(replicaDir(s.cfg.DataDir, 21)) {
		t.Errorf("group 21 after the delete: last index %d (was %d), range 22 served %v", last, before, s.slotOf(22) != nil)
	}
}

// TestRangeMergedAfterItsSpanLeftTheIndex: the left group's merge entry
// deletes the right range's record, and the right group's own batch may
// learn of it first (SpansChanged drops the span from the index) before
// the merge's hook runs. The hook then finds the right range's group by
// its name (a merge's right range is alone in the group it names) and
// stops it; without that, the group ran on with nothing to serve and its
// log and directory stayed.
func TestRangeMergedAfterItsSpanLeftTheIndex(t *testing.T) {
	s := started(t, newAgainstMaster(t, &heartbeatMaster{}, nil))
	leadingRangeWithWrites(t, s, 31, 1, 3)
	sl := s.groupSlot(31)
	if err := s.store.DeleteRange(31, 0); err != nil {
		t.Fatal(err)
	}
	s.dropSpans(sl, []uint64{31})
	if s.slotOf(31) != nil || s.groupSlot(31) == nil {
		t.Fatalf("set-up: range 31 indexed %v, group 31 hosted %v", s.slotOf(31) != nil, s.groupSlot(31) != nil)
	}
	s.RangeMerged(30, 31)
	waitFor(t, func() bool { return s.groupSlot(31) == nil })
	waitFor(t, func() bool { return !exists(replicaDir(s.cfg.DataDir, 31)) })
}
