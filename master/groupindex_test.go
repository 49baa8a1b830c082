package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// groupIndex is the state's whole group -> ranges index as groupRanges
// answers it, for every group the index or want names.
func groupIndex(st *state, want map[uint64][]uint64) map[uint64][]uint64 {
	out := map[uint64][]uint64{}
	for g := range st.groupSpans {
		out[g] = st.groupRanges(g)
	}
	for g := range want {
		if ids := st.groupRanges(g); len(ids) > 0 {
			out[g] = ids
		}
	}
	return out
}

// TestGroupIndex: the map's group -> ranges index follows every command
// that changes the range map (create, split in group and out of it,
// merge, adoption of a newer descriptor that retires others, a range
// that changes group, delete), survives a snapshot and restore, and
// stays equal to a recount (checkIndexes).
func TestGroupIndex(t *testing.T) {
	const (
		createTable = pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE
		deleteTable = pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE
		update      = pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES
		removeRange = pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_RANGE
	)
	reps := []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}
	desc := func(id, table uint64, start, end string, gen, group uint64) *pb.RangeDescriptor {
		return &pb.RangeDescriptor{RangeId: id, Table: fmt.Sprint("T", table), TableId: table, Start: start, End: end,
			Generation: gen, GroupId: group, Replicas: reps}
	}
	ranges := func(ds ...*pb.RangeDescriptor) proto.Message { return &pb.UpdateRangesCommand{Ranges: ds} }
	steps := []struct {
		name string
		kind pb.MasterCommandKind
		cmd  proto.Message
		want map[uint64][]uint64
	}{
		{"create T1: range 1, its own group", createTable, &pb.CreateTableCommand{Name: "T1", Replicas: reps},
			map[uint64][]uint64{1: {1}}},
		{"create T2: range 2", createTable, &pb.CreateTableCommand{Name: "T2", Replicas: reps},
			map[uint64][]uint64{1: {1}, 2: {2}}},
		{"split range 1 in its group: range 10 joins group 1", update,
			ranges(desc(1, 1, "", "m", 2, 1), desc(10, 1, "m", "", 2, 1)),
			map[uint64][]uint64{1: {1, 10}, 2: {2}}},
		{"split range 10 out of the group: range 11, its own group", update,
			ranges(desc(10, 1, "m", "t", 3, 1), desc(11, 1, "t", "", 3, 0)),
			map[uint64][]uint64{1: {1, 10}, 2: {2}, 11: {11}}},
		{"merge range 11 into range 10", removeRange,
			&pb.RemoveRangeCommand{RangeId: 11, AbsorbedBy: desc(10, 1, "m", "", 4, 1)},
			map[uint64][]uint64{1: {1, 10}, 2: {2}}},
		{"adopting range 1 over the whole table retires range 10", update,
			ranges(desc(1, 1, "", "", 5, 1)),
			map[uint64][]uint64{1: {1}, 2: {2}}},
		{"split range 2 in its group, right half reported first", update,
			ranges(desc(20, 2, "k", "", 2, 2)),
			map[uint64][]uint64{1: {1}, 2: {20}}},
		{"then the left half", update,
			ranges(desc(2, 2, "", "k", 2, 2)),
			map[uint64][]uint64{1: {1}, 2: {2, 20}}},
		{"range 20 moves to a group of its own name", update,
			ranges(desc(20, 2, "k", "", 3, 20)),
			map[uint64][]uint64{1: {1}, 2: {2}, 20: {20}}},
		{"range 2 merged away: range 20 keeps group 20, a span joins it", update,
			ranges(desc(20, 2, "", "p", 4, 20), desc(21, 2, "p", "", 4, 20)),
			map[uint64][]uint64{1: {1}, 20: {20, 21}}},
		{"delete T2", deleteTable, &pb.DeleteTableCommand{Name: "T2"},
			map[uint64][]uint64{1: {1}}},
	}
	s := newState()
	for _, step := range steps {
		applyCmd(t, s, step.kind, step.cmd)
		checkIndexes(t, s)
		if got := groupIndex(s, step.want); fmt.Sprint(got) != fmt.Sprint(step.want) {
			t.Fatalf("%s: group index %v, want %v", step.name, got, step.want)
		}
		r := snapshotted(t, s)
		checkIndexes(t, r)
		if got := groupIndex(r, step.want); fmt.Sprint(got) != fmt.Sprint(step.want) {
			t.Fatalf("%s, snapshotted and restored: group index %v, want %v", step.name, got, step.want)
		}
	}
	if got := s.groupRanges(99); len(got) != 0 {
		t.Errorf("groupRanges of an unknown group = %v, want none", got)
	}
}

// TestGroupIndexKey: a descriptor is indexed under rangegroup.GroupOf: its
// range id when group_id is 0, else its group_id; the index's answer is
// sorted by range id.
func TestGroupIndexKey(t *testing.T) {
	for _, c := range []struct {
		name  string
		descs []*pb.RangeDescriptor
		group uint64
		want  []uint64
	}{
		{"group id 0: under the range id", []*pb.RangeDescriptor{{RangeId: 5}}, 5, []uint64{5}},
		{"group id set: under the group", []*pb.RangeDescriptor{{RangeId: 5, GroupId: 3}}, 3, []uint64{5}},
		{"group id set: not under the range id", []*pb.RangeDescriptor{{RangeId: 5, GroupId: 3}}, 5, []uint64{}},
		{"the namesake naming itself", []*pb.RangeDescriptor{{RangeId: 3, GroupId: 3}, {RangeId: 9, GroupId: 3}}, 3, []uint64{3, 9}},
		{"group id 0 and group id = range id alike", []*pb.RangeDescriptor{{RangeId: 3}, {RangeId: 9, GroupId: 3}}, 3, []uint64{3, 9}},
		{"sorted by range id", []*pb.RangeDescriptor{{RangeId: 30, GroupId: 3}, {RangeId: 4, GroupId: 3}, {RangeId: 12, GroupId: 3}}, 3, []uint64{4, 12, 30}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newState()
			for i, d := range c.descs {
				d.TableId, d.Start, d.End = uint64(i+1), "", ""
				s.putRange(d)
			}
			if got := s.groupRanges(c.group); !slices.Equal(got, c.want) {
				t.Errorf("groupRanges(%d) = %v, want %v", c.group, got, c.want)
			}
		})
	}
}

// TestIsolateClaimsTheGroup: before a range leaves its Raft group, every
// other range of the group is claimed: with one of them claimed by an
// operation in flight (a merge taking the namesake, frozen, which would
// have the detach refused on some replicas and not others), isolating the
// range is refused as busy before a partition server is asked (this
// Server has none), and the range's own claim is left to its caller.
func TestIsolateClaimsTheGroup(t *testing.T) {
	s, apply, first, reps := mapOnlyServer(t)
	s.ops = newRunner(context.Background(), 4, time.Minute, time.Minute, func(context.Context, scheduler.Op) error { return nil })
	g := first.GetRangeId()
	left := &pb.RangeDescriptor{RangeId: g, GroupId: g, Table: "t", TableId: first.GetTableId(), End: "m", Generation: 2, Replicas: reps}
	span := &pb.RangeDescriptor{RangeId: 100, GroupId: g, Table: "t", TableId: first.GetTableId(), Start: "m", Generation: 2, Replicas: reps}
	if res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{left, span}}); res.err != nil {
		t.Fatal(res.err)
	}
	if err := s.ops.claim(g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.isolate(context.Background(), 100, causePolicy); !errors.Is(err, ErrBusy) {
		t.Fatalf("isolate range 100 while range %d of its group is claimed: %v, want ErrBusy", g, err)
	}
	s.ops.release(g)
	if err := s.ops.claim(g, 100); err != nil {
		t.Fatalf("claims left behind by the refused isolate: %v", err)
	}
}
