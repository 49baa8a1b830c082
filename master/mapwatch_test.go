package master

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// mapView is what a receiver holds after the first whole map and the
// deltas: the test's model of a front-end's map.
type mapView struct {
	tables  map[string]uint64 // lower-case name -> table id
	ranges  map[uint64]string // range id -> descriptor text
	leaders map[uint64]string
}

func viewOf(m *pb.PartitionMap) *mapView {
	v := &mapView{tables: map[string]uint64{}, ranges: map[uint64]string{}, leaders: map[uint64]string{}}
	v.apply(m)
	return v
}

func (v *mapView) apply(m *pb.PartitionMap) {
	for _, k := range m.GetRemovedTables() {
		delete(v.tables, k)
	}
	for _, t := range m.GetTables() {
		v.tables[strings.ToLower(t.GetName())] = t.GetTableId()
	}
	for _, id := range m.GetRemovedRanges() {
		delete(v.ranges, id)
	}
	for _, r := range m.GetRanges() {
		v.ranges[r.GetRangeId()] = fmt.Sprintf("%d[%s,%s)g%d", r.GetTableId(), r.GetStart(), r.GetEnd(), r.GetGeneration())
	}
	for _, id := range m.GetRemovedLeaders() {
		delete(v.leaders, id)
	}
	for id, l := range m.GetLeaders() {
		v.leaders[id] = l
	}
}

func (v *mapView) String() string {
	return fmt.Sprintf("tables %v\nranges %v\nleaders %v", v.tables, v.ranges, v.leaders)
}

// TestMapDeltas applies random table creates and deletes, range splits and
// leader changes, and checks after each batch that the whole map plus the
// deltas a watcher was sent equal the whole map built afresh, and that a
// delta carries only what changed.
func TestMapDeltas(t *testing.T) {
	s := &Server{cfg: DefaultConfig(), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: 7}
	s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
	apply := applier(t, s.fsm)
	rng := rand.New(rand.NewPCG(1, 2))
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: "a"}})

	w := s.addWatcher()
	first, _ := s.partitionMap()
	view := viewOf(first)
	live := []string{}
	for batch := 0; batch < 60; batch++ {
		touched := 0
		for op := 0; op < 1+rng.IntN(5); op++ {
			switch n := rng.IntN(10); {
			case n < 4 || len(live) == 0:
				name := fmt.Sprintf("T%d", rng.IntN(40))
				if res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: name, Replicas: reps}); res.err == nil {
					live = append(live, name)
					touched++
				}
			case n < 6:
				i := rng.IntN(len(live))
				apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, &pb.DeleteTableCommand{Name: live[i]})
				live = append(live[:i], live[i+1:]...)
				touched++
			case n < 8:
				// Split one range of a live table in two.
				var d *pb.RangeDescriptor
				s.fsm.read(func(st *state) {
					for _, r := range st.ranges {
						if r.GetEnd() == "" && (d == nil || r.GetRangeId() < d.GetRangeId()) {
							d = r
						}
					}
				})
				if d == nil {
					continue
				}
				at := fmt.Sprintf("%s%c", d.GetStart(), 'a'+rng.IntN(26))
				id := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_ALLOCATE_RANGE_ID, &pb.AllocateRangeIDCommand{}).rangeID
				left := proto.Clone(d).(*pb.RangeDescriptor)
				left.End, left.Generation = at, d.GetGeneration()+1
				right := proto.Clone(d).(*pb.RangeDescriptor)
				right.RangeId, right.Start, right.Generation = id, at, d.GetGeneration()+1
				apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{left, right}})
				touched++
			default:
				// A leader change reported by a heartbeat.
				var ids []uint64
				s.fsm.read(func(st *state) {
					for id := range st.ranges {
						ids = append(ids, id)
					}
				})
				if len(ids) == 0 {
					continue
				}
				id := ids[rng.IntN(len(ids))]
				if s.reports.setLeader(id, reps[rng.IntN(3)].GetServerId()) {
					s.bump()
				}
			}
		}
		cs, leaders, soft, full, version := s.take(w)
		if full {
			t.Fatalf("batch %d: a whole map was asked for without a restore", batch)
		}
		if touched > 0 && len(cs.tables)+len(cs.ranges) == 0 {
			t.Fatalf("batch %d: %d changes, none pending", batch, touched)
		}
		_ = soft
		d := s.partitionDelta(cs, leaders, version)
		if !d.GetDelta() || d.GetEpoch() != 7 || len(d.GetLoads()) != 0 {
			t.Fatalf("batch %d: not a delta: %v", batch, d)
		}
		if n := len(d.GetTables()) + len(d.GetRemovedTables()); n > 5 {
			t.Fatalf("batch %d: delta names %d tables for at most 5 changes", batch, n)
		}
		view.apply(d)
		s.fsm.read(func(st *state) { checkIndexes(t, st) })
		whole, _ := s.partitionMap()
		if want := viewOf(whole); view.String() != want.String() {
			t.Fatalf("batch %d: map from deltas\n%v\nwhole map\n%v", batch, view, want)
		}
	}

	// A restore may change anything: the watcher is sent a whole map.
	snap, err := s.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if err := s.fsm.Restore(sink); err != nil {
		t.Fatal(err)
	}
	if _, _, _, full, _ := s.take(w); !full {
		t.Fatal("no whole map asked for after a restore")
	}
}

// checkIndexes compares the state's range indexes with a recount.
func checkIndexes(t *testing.T, st *state) {
	t.Helper()
	perTable, perServer, perGroup := map[uint64]int{}, map[string]int{}, map[uint64]int{}
	for id, r := range st.ranges {
		perTable[r.GetTableId()]++
		if _, ok := st.tableRanges[r.GetTableId()][id]; !ok {
			t.Fatalf("range %d missing from its table's index", id)
		}
		perGroup[rangegroup.GroupOf(r)]++
		if _, ok := st.groupSpans[rangegroup.GroupOf(r)][id]; !ok {
			t.Fatalf("range %d missing from its group's (%d) index", id, rangegroup.GroupOf(r))
		}
		for _, rep := range r.GetReplicas() {
			perServer[rep.GetServerId()]++
		}
	}
	for tid, ids := range st.tableRanges {
		if len(ids) != perTable[tid] {
			t.Fatalf("table %d: %d ranges indexed, %d held", tid, len(ids), perTable[tid])
		}
	}
	for g, ids := range st.groupSpans {
		if len(ids) != perGroup[g] {
			t.Fatalf("group %d: %d ranges indexed, %d held", g, len(ids), perGroup[g])
		}
	}
	if fmt.Sprint(perServer) != fmt.Sprint(st.replicaCount) {
		t.Fatalf("replica counts %v, recounted %v", st.replicaCount, perServer)
	}
}

// memSink is a raft.SnapshotSink in memory that reads back as the
// snapshot.
type memSink struct{ bytes.Buffer }

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }

// TestMapIndex: every map, delta and table answer names the state it was
// read from by the Raft index of the last command applied, which the
// front-ends compare across masters (router.applyTableAnswer): a second
// master that applied the same log, or restored a snapshot of it, names
// the same state alike, whatever its process's versions; a snapshot from
// before the index was kept names nothing (0) until the next command.
func TestMapIndex(t *testing.T) {
	newMaster := func(epoch uint64) *Server {
		s := &Server{cfg: DefaultConfig(), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: epoch}
		s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
		return s
	}
	a, b := newMaster(1), newMaster(2)
	applyA, applyB := applier(t, a.fsm), applier(t, b.fsm)
	reps := []*pb.Replica{{ServerId: "a"}}
	both := func(kind pb.MasterCommandKind, m proto.Message) {
		applyA(kind, m)
		applyB(kind, m)
	}
	both(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: "a"}})
	w := a.addWatcher()
	both(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "T", Replicas: reps})
	b.bump() // b's versions run ahead of a's: they do not compare
	both(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "U", Replicas: reps})

	whole, _ := a.partitionMap()
	cs, leaders, _, _, version := a.take(w)
	for what, got := range map[string]uint64{
		"a's whole map":        whole.GetIndex(),
		"a's delta":            a.partitionDelta(cs, leaders, version).GetIndex(),
		"a's answer about T":   a.tableDelta("t").GetIndex(),
		"b's answer about T":   b.tableDelta("T").GetIndex(),
		"b's answer about new": b.tableDelta("new").GetIndex(),
	} {
		if got != 3 {
			t.Errorf("%s at index %d, want 3 (the last command's)", what, got)
		}
	}

	// A third master restores a's snapshot: the same state, the same name.
	snap, err := a.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	c := newMaster(3)
	if err := c.fsm.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if m, _ := c.partitionMap(); m.GetIndex() != 3 {
		t.Fatalf("restored master's map at index %d, want 3", m.GetIndex())
	}

	// A snapshot from before the index: unknown, until the next command.
	var old pb.MasterSnapshot
	if err := proto.Unmarshal(sink.Bytes(), &old); err != nil {
		t.Fatal(err)
	}
	old.AppliedIndex = 0
	raw, err := proto.Marshal(&old)
	if err != nil {
		t.Fatal(err)
	}
	d := newMaster(4)
	if err := d.fsm.Restore(io.NopCloser(bytes.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	if got := d.tableDelta("T").GetIndex(); got != 0 {
		t.Fatalf("map restored from a snapshot without the index at index %d, want 0 (unknown)", got)
	}
	data, err := encodeCommand(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, &pb.DeleteTableCommand{Name: "U"})
	if err != nil {
		t.Fatal(err)
	}
	d.fsm.Apply(&raft.Log{Index: 4, Data: data})
	if got := d.tableDelta("U").GetIndex(); got != 4 {
		t.Fatalf("answer after the next command at index %d, want 4", got)
	}
}
