package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/edm"
	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	"tablestore/partitionserver/lifecycle"
	pb "tablestore/proto/tablestorepb"
)

// Tests of AddSpan (docs/range-groups.md, stage 7, step 3): a new table's
// first range added to an existing Raft group on three servers.

// eventually polls cond until it holds, failing after 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
	}
}

// trio is three partition servers, a, b and c, without a master (their
// heartbeats fail, which changes nothing here), serving group 5: range 5
// of table 7, led by a.
type trio struct {
	t       *testing.T
	servers map[string]*Server
	addrs   map[string]string
}

var trioIDs = []string{"a", "b", "c"}

func trioServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return started(t, s)
}

func newTrio(t *testing.T) *trio { return newTrioWith(t, nil) }

// newTrioWith is newTrio with each server's configuration changed by
// configure (nil: none).
func newTrioWith(t *testing.T, configure func(*Config)) *trio {
	t.Helper()
	tr := &trio{t: t, servers: map[string]*Server{}, addrs: map[string]string{}}
	for _, id := range trioIDs {
		cfg := DefaultConfig()
		cfg.ID = id
		cfg.DataDir = filepath.Join(t.TempDir(), id)
		cfg.GRPCAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Masters = []string{"127.0.0.1:1"}
		cfg.QuiesceAfter = 0
		if configure != nil {
			configure(&cfg)
		}
		s := trioServer(t, cfg)
		tr.servers[id], tr.addrs[id] = s, s.RaftAddr()
	}
	desc := &pb.RangeDescriptor{RangeId: 5, Table: "t", TableId: 7, Generation: 1,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
	for _, id := range trioIDs {
		if err := tr.servers[id].createReplica(desc, true, id == "a", tr.addrs, joinFloor{}); err != nil {
			t.Fatal(err)
		}
	}
	tr.leader()
	return tr
}

// leader waits for a leader of group 5 and returns its server's service
// and member.
func (tr *trio) leader() (*service, *member) {
	tr.t.Helper()
	var v *service
	var rep *member
	eventually(tr.t, "group 5 elects a leader", func() bool {
		for _, s := range tr.servers {
			if s == nil {
				continue
			}
			if sl := s.groupSlot(5); sl != nil {
				if m := sl.open(); m != nil && m.isLeader() {
					v, rep = &service{s: s}, m
					return true
				}
			}
		}
		return false
	})
	return v, rep
}

// stop closes server id as a crash would leave it (no hand-off).
func (tr *trio) stop(id string) Config {
	tr.t.Helper()
	s := tr.servers[id]
	cfg := s.cfg
	cfg.RaftAddr = s.RaftAddr() // the others know it
	s.crashing.Store(true)
	if err := s.Close(); err != nil {
		tr.t.Fatal(err)
	}
	tr.servers[id] = nil
	return cfg
}

func (tr *trio) restart(id string, cfg Config) *Server {
	tr.t.Helper()
	s := trioServer(tr.t, cfg)
	for id, a := range tr.addrs {
		s.addrs.set(id, a)
	}
	tr.servers[id] = s
	return s
}

// write inserts pk/r into range id at generation gen through v, retrying
// while the range elects.
func write(t *testing.T, v *service, id, gen uint64, pk string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := v.Write(ctx, &pb.WriteRequest{RangeId: id, Generation: gen, RequestId: []byte(fmt.Sprintf("%d/%s", id, pk)), Ops: []*pb.EntityOp{{
			Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: pk, RowKey: "r",
			Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: pk, RowKey: "r"})}}})
		if err == nil {
			return
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			t.Fatalf("write %s to range %d: %v", pk, id, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// holds reports whether s serves range id as a span of group 5 with the
// rows pks in its file.
func holds(s *Server, id uint64, pks ...string) bool {
	sl := s.slotOf(id)
	if sl == nil || sl.id != 5 {
		return false
	}
	sp := sl.span(id)
	if sp == nil || rangegroup.GroupOf(sp.Descriptor()) != 5 {
		return false
	}
	for _, pk := range pks {
		if _, err := sp.Get(pk, "r"); err != nil {
			return false
		}
	}
	return true
}

// newTableRange is table tableID's first range, id, as the master would
// ask to add it to group 5: generation 1 and a guess at the replicas.
func newTableRange(id, tableID uint64) *pb.RangeDescriptor {
	return &pb.RangeDescriptor{RangeId: id, GroupId: 5, Table: fmt.Sprintf("t%d", tableID), TableId: tableID, Generation: 1,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "x"}}}
}

// TestAddSpan: a span added to group 5 while follower c is down is served
// by the leader at once (writes, reads, reports), reaches b by the log,
// and c by the log after a restart; a second span added while c is down
// again, with the leader's log compacted past it, reaches c by a
// snapshot. A retry answers the span; an assignment of the span that
// arrives before the entry never creates it (neither bootstrapped nor
// stored); a restart of the leader serves both spans again.
func TestAddSpan(t *testing.T) {
	tr := newTrio(t)
	v, rep := tr.leader()
	write(t, v, 5, 1, "p")
	// b stays up, c goes down: two followers.
	var followers []string
	for _, id := range trioIDs {
		if tr.servers[id] != v.s {
			followers = append(followers, id)
		}
	}
	b, cID := tr.servers[followers[0]], followers[1]
	cCfg := tr.stop(cID)

	// The master's assignment of range 20 (generation 1, group 5) reaches
	// b before the entry: nothing is created.
	if a, _ := b.assignment(newTableRange(20, 8)); lifecycle.Assigned(a) != lifecycle.AwaitGroup || !a.GroupHosted {
		t.Errorf("placement of a span of group 5 before its entry: %v (%+v), want await-group", lifecycle.Assigned(a), a)
	}
	rp := &reportState{assigned: []*pb.RangeDescriptor{newTableRange(20, 8)}, raftAddrs: tr.addrs}
	if !b.reconcile(rp, nil) {
		t.Error("reconcile left no work for the span it awaits")
	}
	if err := b.createReplica(newTableRange(20, 8), true, false, tr.addrs, joinFloor{}); !errors.Is(err, ErrSpanOfAnotherGroup) {
		t.Errorf("bootstrap of a span of group 5: %v", err)
	}
	if err := b.createReplica(newTableRange(20, 8), false, false, tr.addrs, joinFloor{}); err != nil {
		t.Errorf("join of a span of group 5, hosted here: %v", err)
	}
	if ok, err := b.store.HasRange(20); ok || err != nil || b.hosts(20) || len(b.slotList()) != 1 {
		t.Fatalf("before the entry: range 20 stored %v (%v), hosted %v, %d slots", ok, err, b.hosts(20), len(b.slotList()))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := v.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: 5, Range: newTableRange(20, 8), Floor: 20})
	if err != nil {
		t.Fatal(err)
	}
	want := rep.group.Spans()[0].Descriptor().GetReplicas()
	if d := resp.GetRange(); d.GetRangeId() != 20 || d.GetGroupId() != 5 || d.GetGeneration() != 2 || d.GetTableId() != 8 || len(d.GetReplicas()) != 3 || d.GetReplicas()[2].GetServerId() != want[2].GetServerId() {
		t.Fatalf("added: %v", d)
	}
	if sl := v.s.slotOf(20); sl == nil || sl != v.s.groupSlot(5) || len(v.s.slotList()) != 1 {
		t.Fatalf("after the add: range 20 in %v, %d slots", sl, len(v.s.slotList()))
	}
	// Writes of both tables are entries of the group's one log.
	before := rep.raft.LastIndex()
	write(t, v, 20, 2, "p")
	write(t, v, 20, 2, "q")
	write(t, v, 5, 1, "q")
	if n := commandsAfter(t, rep, before); n < 3 {
		t.Fatalf("three writes took %d command entries of group 5's log", n)
	}
	if _, err := v.Get(ctx, &pb.GetRequest{RangeId: 20, PartitionKey: "q", RowKey: "r"}); err != nil {
		t.Fatalf("read from the added span: %v", err)
	}
	counts := map[uint64]uint64{}
	for _, rs := range v.s.statuses() {
		counts[rs.GetRangeId()] = rs.GetLoad().GetEntityCount()
		if rs.GetRangeId() == 20 && rangegroup.GroupOf(rs.GetRange()) != 5 {
			t.Errorf("range 20 reported in group %d", rangegroup.GroupOf(rs.GetRange()))
		}
	}
	if len(counts) != 2 || counts[5] != 2 || counts[20] != 2 {
		t.Fatalf("reports after the add: %v", counts)
	}
	// A retry (the answer lost) answers the span.
	if again, err := v.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: 5, Range: newTableRange(20, 8), Floor: 20}); err != nil || again.GetRange().GetGeneration() != 2 || again.GetRange().GetGroupId() != 5 {
		t.Fatalf("retry: %v, %v", again, err)
	}
	// The follower that was up applies the entry and serves the span
	// through the group it hosts: the reconcile now keeps it.
	eventually(t, "b holds range 20", func() bool { return holds(b, 20, "p", "q") })
	if len(b.slotList()) != 1 {
		t.Fatalf("b has %d slots", len(b.slotList()))
	}
	if pending := b.reconcile(rp, nil); pending {
		t.Error("reconcile still awaits the span b hosts")
	}

	// c, down across the add, catches up by the log.
	c := tr.restart(cID, cCfg)
	eventually(t, "c holds range 20 after the log", func() bool { return holds(c, 20, "p", "q") })

	// Down again: a second table's span is added and written, and the
	// leader's log compacted past it; c catches up by a snapshot.
	cCfg = tr.stop(cID)
	resp, err = v.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: 5, Range: newTableRange(21, 9), Floor: 21})
	if err != nil {
		t.Fatal(err)
	}
	added := rep.raft.AppliedIndex()
	write(t, v, 21, 2, "s")
	if err := rep.compact(); err != nil {
		t.Fatal(err)
	}
	if first, _ := rep.logStore.FirstIndex(); first <= added {
		t.Fatalf("the leader's log starts at %d, the add was entry %d", first, added)
	}
	c = tr.restart(cID, cCfg)
	eventually(t, "c holds range 21 after a snapshot", func() bool { return holds(c, 21, "s") && holds(c, 20, "p", "q") })
	if metas, err := c.groupSlot(5).open().snaps.List(); err != nil || len(metas) == 0 {
		t.Errorf("c's snapshots %v (%v): caught up without one", metas, err)
	}

	// A restart of the leader: the group serves both tables' spans from
	// whichever server leads it next.
	var leaderID string
	for id, s := range tr.servers {
		if s == v.s {
			leaderID = id
		}
	}
	lCfg := tr.stop(leaderID)
	v, _ = tr.leader()
	write(t, v, 20, 2, "u")
	tr.restart(leaderID, lCfg)
	for _, s := range tr.servers {
		eventually(t, fmt.Sprintf("%s holds both spans", s.id), func() bool { return holds(s, 20, "p", "q", "u") && holds(s, 21, "s") })
	}
}

// TestAddSpanRefusals: an add of a range already a span of the group
// (born by a split in it), of a range naming another group, or through a
// server that does not lead the group is refused, and nothing is stored.
func TestAddSpanRefusals(t *testing.T) {
	m := &heartbeatMaster{}
	s := started(t, newAgainstMaster(t, m, nil))
	_, v := leadingRangeWithWrites(t, s, 21, 1, 1)
	splitInGroup(t, v, 21, "m", 22)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	other := &pb.RangeDescriptor{RangeId: 30, GroupId: 99, TableId: 8}
	for _, tc := range []struct {
		name string
		req  *pb.AddSpanRequest
		want codes.Code
	}{
		{"no range", &pb.AddSpanRequest{GroupRangeId: 21}, codes.InvalidArgument},
		{"a span split in the group", &pb.AddSpanRequest{GroupRangeId: 21, Range: &pb.RangeDescriptor{RangeId: 22, TableId: 8}, Floor: 22}, codes.FailedPrecondition},
		{"the group's name", &pb.AddSpanRequest{GroupRangeId: 21, Range: &pb.RangeDescriptor{RangeId: 21, TableId: 8}, Floor: 21}, codes.FailedPrecondition},
		{"another group's range", &pb.AddSpanRequest{GroupRangeId: 21, Range: other, Floor: 30}, codes.InvalidArgument},
		{"no such group here", &pb.AddSpanRequest{GroupRangeId: 77, Range: &pb.RangeDescriptor{RangeId: 31, TableId: 8}, Floor: 31}, codes.NotFound},
	} {
		resp, err := v.AddSpan(ctx, tc.req)
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, resp, err, tc.want)
		}
	}
	// The group holds two spans (21, 22): a cap of 2 refuses a third,
	// GROUP_FULL at the RPC boundary (the master falls back on it).
	if resp, err := v.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: 21, Range: &pb.RangeDescriptor{RangeId: 32, TableId: 8}, Floor: 32, MaxSpans: 2}); status.Code(err) != codes.FailedPrecondition || !rpcerr.Is(err, rpcerr.ReasonGroupFull) {
		t.Errorf("an add to a full group: %v, %v; want FailedPrecondition, GROUP_FULL", resp, err)
	}
	// Ranges 21 and 22 unchanged.
	for _, id := range []uint64{21, 22} {
		if d := s.slotOf(id).span(id).Descriptor(); d.GetTableId() != 7 || d.GetGeneration() != 2 {
			t.Errorf("range %d after the refused adds: %v", id, d)
		}
	}
	for _, id := range []uint64{30, 31, 32} {
		if ok, _ := s.store.HasRange(id); ok || s.hosts(id) {
			t.Errorf("range %d stored by a refused add", id)
		}
	}
	// The failpoints: before the proposal nothing applies; after the
	// apply the add stands and a retry answers it.
	failpoint.Enable("partitionserver/add-span/before-propose", func() error { return errors.New("crash before propose") })
	_, err := v.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: 21, Range: &pb.RangeDescriptor{RangeId: 40, TableId: 8}, Floor: 40})
	failpoint.Disable("partitionserver/add-span/before-propose")
	if err == nil || s.hosts(40) {
		t.Fatalf("before-propose: %v, hosted %v", err, s.hosts(40))
	}
	failpoint.Enable("partitionserver/add-span/after-apply", func() error { return errors.New("crash after apply") })
	_, err = v.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: 21, Range: &pb.RangeDescriptor{RangeId: 40, TableId: 8}, Floor: 40})
	failpoint.Disable("partitionserver/add-span/after-apply")
	if err == nil || !s.hosts(40) {
		t.Fatalf("after-apply: %v, hosted %v", err, s.hosts(40))
	}
	if resp, err := v.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: 22, Range: &pb.RangeDescriptor{RangeId: 40, TableId: 8}, Floor: 40}); err != nil || resp.GetRange().GetGroupId() != 21 {
		t.Fatalf("retry after the failpoint, through another span of the group: %v, %v", resp, err)
	}
}

// tableGroupsMaster records whether a heartbeat announced table_groups.
type tableGroupsMaster struct {
	pb.UnimplementedMasterServiceServer
	said atomic.Bool
}

func (m *tableGroupsMaster) Heartbeat(_ context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	if req.GetTableGroups() {
		m.said.Store(true)
	}
	return &pb.HeartbeatResponse{}, nil
}

// TestHeartbeatAnnouncesTableGroups: the server tells the master it
// applies ADD_SPAN and serves AddSpan (HeartbeatRequest.table_groups): the
// master adds tables to a shared group only when every server of the
// group says so.
func TestHeartbeatAnnouncesTableGroups(t *testing.T) {
	m := &tableGroupsMaster{}
	started(t, newAgainstMaster(t, m, nil))
	eventually(t, "a heartbeat says table_groups", m.said.Load)
}

// TestAssignmentOfASpanOfAQuietGroup: a span of a group whose replica
// here is quiet is placed WakeGroup, with that group's slot to wake (a
// quiet replica would never apply the entry that creates the span); a
// span of a group not hosted here waits (AwaitGroup), and the group's own
// range is placed as before.
func TestAssignmentOfASpanOfAQuietGroup(t *testing.T) {
	s, sl, _ := quietServer(t) // group 1, quiet
	span := &pb.RangeDescriptor{RangeId: 30, GroupId: 1, TableId: 8, Generation: 1}
	a, wake := s.assignment(span)
	if p := lifecycle.Assigned(a); p != lifecycle.WakeGroup || wake != sl {
		t.Errorf("span of quiet group 1: %v, wakes %v; want wake-group, group 1's slot", p, wake)
	}
	elsewhere := &pb.RangeDescriptor{RangeId: 31, GroupId: 9, TableId: 8, Generation: 1}
	if a, wake := s.assignment(elsewhere); lifecycle.Assigned(a) != lifecycle.AwaitGroup || wake != nil {
		t.Errorf("span of group 9, not hosted: %v, wakes %v; want await-group", lifecycle.Assigned(a), wake)
	}
	own := &pb.RangeDescriptor{RangeId: 32, GroupId: 32, TableId: 8, Generation: 1}
	if a, _ := s.assignment(own); lifecycle.Assigned(a) != lifecycle.Bootstrap {
		t.Errorf("range 32 of its own group: %v, want bootstrap", lifecycle.Assigned(a))
	}
}
