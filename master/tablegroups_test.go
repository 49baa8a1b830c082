package master

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// applyCreate applies a CREATE_TABLE command as the FSM would.
func applyCreate(t *testing.T, s *state, c *pb.CreateTableCommand) *applyResult {
	t.Helper()
	payload, err := proto.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return handlers[pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE](s, payload)
}

// TestCreateTableInHomeGroup: an anchor is named by the apply and is its
// own group; a create naming a live anchor's group takes the anchor's
// replicas from the map (generation 1, group_id set) and is no range a
// server may bootstrap; a create naming an anchor that went, or a range
// that is no anchor, falls back to the command's replicas, as every
// master applies it alike.
func TestCreateTableInHomeGroup(t *testing.T) {
	groupReps := []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}
	ownReps := []*pb.Replica{{ServerId: "ps4"}, {ServerId: "ps5"}, {ServerId: "ps6"}}
	tests := []struct {
		name      string
		prepare   func(s *state, anchor, plain uint64) uint64 // the command's group_id
		wantGroup bool
	}{
		{"the anchor is live", func(s *state, anchor, _ uint64) uint64 { return anchor }, true},
		{"the anchor's table was deleted", func(s *state, anchor, _ uint64) uint64 {
			deleteTable(s, s.ranges[anchor].GetTable())
			return anchor
		}, false},
		{"the group names a user table's range", func(s *state, _, plain uint64) uint64 { return plain }, false},
		{"the group names no range", func(s *state, _, _ uint64) uint64 { return 999 }, false},
		{"no group", func(s *state, _, _ uint64) uint64 { return 0 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fsm{st: newState()}
			s := f.st
			res := applyCreate(t, s, &pb.CreateTableCommand{Anchor: true, Name: "ignored", Replicas: groupReps})
			if res.err != nil {
				t.Fatal(res.err)
			}
			anchor := res.ranges[0]
			if want := "_groups/" + itoa(anchor.GetRangeId()); anchor.GetTable() != want || res.table.GetName() != want {
				t.Fatalf("anchor named %q (table %q), want %q", anchor.GetTable(), res.table.GetName(), want)
			}
			if anchor.GetGroupId() != anchor.GetRangeId() || !isAnchor(anchor) || !mayBootstrap(anchor, false) {
				t.Fatalf("anchor %v: group_id %d, want its own id, bootstrapped as any new range", anchor, anchor.GetGroupId())
			}
			plain := applyCreate(t, s, &pb.CreateTableCommand{Name: "plain", Replicas: ownReps}).ranges[0]
			group := tt.prepare(s, anchor.GetRangeId(), plain.GetRangeId())
			res = applyCreate(t, s, &pb.CreateTableCommand{Name: "t", Replicas: ownReps, GroupId: group})
			if res.err != nil {
				t.Fatal(res.err)
			}
			r := s.ranges[res.ranges[0].GetRangeId()]
			if r.GetGeneration() != 1 {
				t.Fatalf("generation %d, want 1", r.GetGeneration())
			}
			unstarted := slices.Contains(f.assignments(replicaIDs(r)[0], 0).GetUnstartedRangeIds(), r.GetRangeId())
			if tt.wantGroup {
				if r.GetGroupId() != anchor.GetRangeId() || !slices.Equal(replicaIDs(r), replicaIDs(anchor)) {
					t.Fatalf("range %v: want group %d on the anchor's replicas", r, anchor.GetRangeId())
				}
				if unstarted || slices.Contains(s.unstarted(), r.GetRangeId()) || !pendingAdd(r) {
					t.Fatal("a span recorded in a home group is listed for a bootstrap, or not pending its add")
				}
				return
			}
			if r.GetGroupId() != 0 || !slices.Equal(replicaIDs(r), replicaIDs(plain)) {
				t.Fatalf("range %v: want a group of its own on the command's replicas", r)
			}
			if !unstarted || pendingAdd(r) {
				t.Fatal("a range of its own group is not listed unstarted, or is pending an add")
			}
		})
	}
}

func itoa(n uint64) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}

// TestReservedTableNames: no user table command names an anchor, on the
// service and in the apply.
func TestReservedTableNames(t *testing.T) {
	v := &service{s: &Server{}}
	ctx := context.Background()
	calls := map[string]func(name string) error{
		"CreateTable": func(n string) error { _, err := v.CreateTable(ctx, &pb.CreateTableRequest{Name: n}); return err },
		"DeleteTable": func(n string) error { _, err := v.DeleteTable(ctx, &pb.DeleteTableRequest{Name: n}); return err },
		"SetTableACL": func(n string) error { _, err := v.SetTableACL(ctx, &pb.SetTableACLRequest{Name: n}); return err },
	}
	for call, fn := range calls {
		for _, name := range []string{"_groups/7", "_GROUPS/x", "_groups/"} {
			if err := fn(name); status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s(%q) = %v, want InvalidArgument", call, name, err)
			}
		}
	}
	s := newState()
	if res := applyCreate(t, s, &pb.CreateTableCommand{Name: "_Groups/9", Replicas: []*pb.Replica{{ServerId: "ps1"}}}); !errors.Is(res.err, ErrReservedName) {
		t.Fatalf("apply of a reserved name: %v, want ErrReservedName", res.err)
	}
	if len(s.tables) != 0 || s.nextRangeID != newState().nextRangeID {
		t.Fatal("a refused create changed the map")
	}
	for _, ok := range []string{"groups", "_groupsx", "a_groups/1"} {
		if reservedName(ok) {
			t.Errorf("%q reserved", ok)
		}
	}
}

// TestMayBootstrapGroupSpans: a range of generation 1 recorded in another
// range's group is never bootstrapped; an anchor (its own group) is.
func TestMayBootstrapGroupSpans(t *testing.T) {
	tests := []struct {
		name    string
		d       *pb.RangeDescriptor
		started bool
		want    bool
	}{
		{"own group, group_id 0", &pb.RangeDescriptor{RangeId: 5, Generation: 1}, false, true},
		{"anchor, group_id its own", &pb.RangeDescriptor{RangeId: 5, GroupId: 5, Generation: 1}, false, true},
		{"span recorded in group 3", &pb.RangeDescriptor{RangeId: 5, GroupId: 3, Generation: 1}, false, false},
		{"span recorded in group 3, marked", &pb.RangeDescriptor{RangeId: 5, GroupId: 3, Generation: 1}, true, false},
		{"span added (generation 2)", &pb.RangeDescriptor{RangeId: 5, GroupId: 3, Generation: 2}, false, false},
	}
	for _, tt := range tests {
		if got := mayBootstrap(tt.d, tt.started); got != tt.want {
			t.Errorf("%s: mayBootstrap = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestHomeGroup: the choice among anchor groups, pure over the snapshot.
func TestHomeGroup(t *testing.T) {
	servers := func(mod func(*scheduler.Server)) []scheduler.Server {
		var out []scheduler.Server
		for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
			sv := scheduler.Server{ID: id, Live: true}
			if mod != nil {
				mod(&sv)
			}
			out = append(out, sv)
		}
		return out
	}
	reps := func(ids ...string) []scheduler.Replica {
		var out []scheduler.Replica
		for _, id := range ids {
			out = append(out, scheduler.Replica{Server: id})
		}
		return out
	}
	anchor := func(id uint64, leader string, on ...string) *scheduler.Range {
		return &scheduler.Range{ID: id, Group: id, Table: "_groups/" + itoa(id), Leader: leader, Replicas: reps(on...)}
	}
	span := func(id, group uint64, leader string, load float64) *scheduler.Range {
		return &scheduler.Range{ID: id, Group: group, Table: "t" + itoa(id), Leader: leader, Load: &scheduler.Load{EntitiesPerSec: load}}
	}
	sized := func(id, group uint64, bytes uint64) *scheduler.Range {
		return &scheduler.Range{ID: id, Group: group, Table: "t" + itoa(id), Leader: "a", Load: &scheduler.Load{Bytes: bytes}}
	}
	plain := func(id uint64, leader string) *scheduler.Range {
		return &scheduler.Range{ID: id, Group: id, Table: "p" + itoa(id), Leader: leader}
	}
	g1 := func() *scheduler.Range { return anchor(1, "a", "a", "b", "c") }
	g2 := func() *scheduler.Range { return anchor(2, "d", "d", "e", "f") }
	tests := []struct {
		name     string
		servers  []scheduler.Server
		ranges   []*scheduler.Range
		noShare  string
		unstart  uint64
		maxSpans int
		want     uint64
	}{
		{"no anchor", servers(nil), []*scheduler.Range{plain(1, "a")}, "", 0, 64, 0},
		{"most spans: the fullest group with room", servers(nil), []*scheduler.Range{g1(), g2(), span(3, 1, "a", 0)}, "", 0, 64, 1},
		{"most spans, the other way round", servers(nil), []*scheduler.Range{g1(), g2(), span(3, 2, "d", 0)}, "", 0, 64, 2},
		{"full group skipped", servers(nil), []*scheduler.Range{g1(), span(3, 1, "a", 0)}, "", 0, 2, 0},
		{"hot span skips its group", servers(nil), []*scheduler.Range{g1(), g2(), span(3, 2, "d", 500), span(4, 1, "a", 0)}, "", 0, 64, 1},
		{"tie: the leader leading fewest groups", servers(nil), []*scheduler.Range{g1(), g2(), plain(3, "a")}, "", 0, 64, 2},
		{"tie and even: lowest id", servers(nil), []*scheduler.Range{g2(), g1()}, "", 0, 64, 1},
		{"a server down", servers(func(s *scheduler.Server) { s.Live = s.ID != "e" }), []*scheduler.Range{g1(), g2(), span(3, 1, "a", 0)}, "", 0, 64, 1},
		// A group short of a server still takes tables (with its leader
		// and a majority), after every group with all of its servers.
		{"short of a server: the only group", servers(func(s *scheduler.Server) { s.Live = s.ID != "e" }), []*scheduler.Range{g2()}, "", 0, 64, 2},
		{"short of a server: after a whole group, however full", servers(func(s *scheduler.Server) { s.Live = s.ID != "e" }),
			[]*scheduler.Range{g1(), g2(), span(3, 2, "d", 0), span(4, 2, "d", 0)}, "", 0, 64, 1},
		{"short of a server: the fuller of two", servers(func(s *scheduler.Server) { s.Live = s.ID != "e" && s.ID != "b" }),
			[]*scheduler.Range{g1(), g2(), span(3, 2, "d", 0)}, "", 0, 64, 2},
		{"short of a server: draining", servers(func(s *scheduler.Server) { s.Draining = s.ID == "e" }), []*scheduler.Range{g2()}, "", 0, 64, 2},
		{"short of a server: a replica missing", servers(nil),
			[]*scheduler.Range{{ID: 2, Group: 2, Table: "_groups/2", Leader: "d", Replicas: []scheduler.Replica{{Server: "d"}, {Server: "e", Missing: true}, {Server: "f"}}}}, "", 0, 64, 2},
		{"the leader's server down", servers(func(s *scheduler.Server) { s.Live = s.ID != "d" }), []*scheduler.Range{g2()}, "", 0, 64, 0},
		{"two of three servers down", servers(func(s *scheduler.Server) { s.Live = s.ID != "e" && s.ID != "f" }), []*scheduler.Range{g2()}, "", 0, 64, 0},
		{"a server unknown to the snapshot", servers(func(s *scheduler.Server) { s.ID += "x" }), []*scheduler.Range{g2()}, "", 0, 64, 0},
		{"a server draining", servers(func(s *scheduler.Server) { s.Draining = s.ID == "b" }), []*scheduler.Range{g1(), g2(), span(3, 2, "d", 0)}, "", 0, 64, 2},
		{"a server slow", servers(func(s *scheduler.Server) { s.Slow = s.ID == "d" }), []*scheduler.Range{g1(), g2()}, "", 0, 64, 1},
		{"a server full", servers(func(s *scheduler.Server) { s.Disk = scheduler.Disk{Capacity: 100, Available: 1, Reserve: 10} }), []*scheduler.Range{g1()}, "", 0, 64, 0},
		{"a server without table_groups", servers(nil), []*scheduler.Range{g1(), g2(), span(3, 2, "d", 0)}, "a", 0, 64, 2},
		{"anchor not started", servers(nil), []*scheduler.Range{g1(), g2(), span(3, 2, "d", 0)}, "", 1, 64, 2},
		{"anchor without a leader", servers(nil), []*scheduler.Range{anchor(1, "", "a", "b", "c")}, "", 0, 64, 0},
		{"cold spans each under merge-bytes, together at the group bound", servers(nil),
			[]*scheduler.Range{g1(), sized(3, 1, 30<<20), sized(4, 1, 30<<20), sized(5, 1, 30<<20), sized(6, 1, 30<<20),
				g2(), sized(7, 2, 1<<20)}, "", 0, 64, 2},
		{"cold spans each under merge-bytes, together under the group bound", servers(nil),
			[]*scheduler.Range{g1(), sized(3, 1, 30<<20), sized(4, 1, 30<<20), sized(5, 1, 30<<20),
				g2(), sized(7, 2, 1<<20)}, "", 0, 64, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := homeGroup(homeGroupInput{
				Snap:     &scheduler.Snapshot{Servers: tt.servers, Ranges: tt.ranges},
				CanShare: func(s string) bool { return s != tt.noShare }, MaxSpans: tt.maxSpans,
				MergeLoad: 100, MergeSize: 32 << 20, GroupBytes: 100 << 20, Started: func(id uint64) bool { return id != tt.unstart },
			})
			if got != tt.want {
				t.Fatalf("homeGroup = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestNeedAnchor: a spare anchor group is founded when the anchor groups
// with room have fewer free places than a new one brings (a group's worth
// ready ahead), not while one with that room waits for a server or its
// start (anchors would pile up every policy tick).
func TestNeedAnchor(t *testing.T) {
	anchor := &scheduler.Range{ID: 1, Group: 1, Table: "_groups/1", Replicas: []scheduler.Replica{{Server: "a"}}}
	spanOf := func(id uint64, load float64) *scheduler.Range {
		return &scheduler.Range{ID: id, Group: 1, Table: "t" + itoa(id), Load: &scheduler.Load{EntitiesPerSec: load}}
	}
	down := []scheduler.Server{{ID: "a"}}
	reported := func(r *scheduler.Range) *scheduler.Range {
		c := *r
		c.Load = &scheduler.Load{}
		return &c
	}
	tests := []struct {
		name       string
		ranges     []*scheduler.Range
		max        int
		want       bool
		mergeLoad0 bool // --merge-load 0 (else 100)
	}{
		{"no anchor", []*scheduler.Range{{ID: 2, Group: 2, Table: "t"}}, 64, true, false},
		{"an anchor with room, its server down and no leader", []*scheduler.Range{anchor}, 64, false, false},
		{"the anchor's group full", []*scheduler.Range{anchor, spanOf(2, 0)}, 2, true, false},
		{"the anchor's group hot", []*scheduler.Range{anchor, spanOf(2, 1000)}, 64, true, false},
		{"the anchor's group half full: the spare founded ahead", []*scheduler.Range{anchor, spanOf(2, 0)}, 4, true, false},
		{"an empty spare beside a group filling", []*scheduler.Range{anchor, spanOf(2, 0),
			{ID: 5, Group: 5, Table: "_groups/5", Replicas: []scheduler.Replica{{Server: "a"}}}}, 4, false, false},
		// --merge-load 0: no reported range is ever cold, so homeGroup
		// admits no table, but the spare reported at 0 entities/s must
		// still count as room, or every load report founds another.
		{"merge-load 0: the spare reported idle", []*scheduler.Range{reported(anchor)}, 64, false, true},
		{"merge-load 0: a table's span beside the anchor", []*scheduler.Range{reported(anchor), spanOf(2, 0)}, 64, true, true},
	}
	for _, tt := range tests {
		in := homeGroupInput{Snap: &scheduler.Snapshot{Servers: down, Ranges: tt.ranges}, CanShare: func(string) bool { return true },
			MaxSpans: tt.max, MergeLoad: 100, MergeSize: 1 << 20, Started: func(uint64) bool { return false }}
		if tt.mergeLoad0 {
			in.MergeLoad = 0
		}
		if got := needAnchor(in); got != tt.want {
			t.Errorf("%s: needAnchor = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestSpanAddsDue: resumeAddSpans' grace and one add at a time per range.
func TestSpanAddsDue(t *testing.T) {
	var a spanAdds
	t0 := time.Now()
	if got := a.due([]uint64{5, 6}, t0); len(got) != 0 {
		t.Fatalf("due at first sight = %v", got)
	}
	if got := a.due([]uint64{5, 6}, t0.Add(addSpanGrace/2)); len(got) != 0 {
		t.Fatalf("due within the grace = %v", got)
	}
	got := a.due([]uint64{5, 6}, t0.Add(addSpanGrace))
	slices.Sort(got)
	if !slices.Equal(got, []uint64{5, 6}) {
		t.Fatalf("due after the grace = %v, want [5 6]", got)
	}
	if got := a.due([]uint64{5, 6}, t0.Add(2*addSpanGrace)); len(got) != 0 {
		t.Fatalf("due while running = %v", got)
	}
	a.done(5)
	if got := a.due([]uint64{5}, t0.Add(2*addSpanGrace)); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("due after done = %v, want [5]", got)
	}
	a.done(5)
	a.done(6)
	// 6 left the pending set (added): forgotten, a new grace if it came back.
	if got := a.due([]uint64{6}, t0.Add(3*addSpanGrace)); len(got) != 0 {
		t.Fatalf("a range seen again after leaving the set is due at once: %v", got)
	}
}
