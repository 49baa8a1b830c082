package partitionserver

import (
	"testing"

	"tablestore/partitionserver/raftlog"
	pb "tablestore/proto/tablestorepb"
)

func descOn(id, gen uint64, servers ...string) *pb.RangeDescriptor {
	d := &pb.RangeDescriptor{RangeId: id, Generation: gen, Start: "m"}
	for _, s := range servers {
		d.Replicas = append(d.Replicas, &pb.Replica{ServerId: s})
	}
	return d
}

func TestPlanMissedSplit(t *testing.T) {
	birth := &pb.SplitBirth{Index: 40, Right: descOn(7, 3, "ps1", "ps3", "ps4")}
	base := missedSplit{self: "ps4", oldApplied: 30, birth: birth, parentBorn: true}
	for _, tc := range []struct {
		name string
		edit func(*missedSplit)
		want bool
	}{
		{"behind the split, bootstrapped parent (seed 2181)", func(*missedSplit) {}, true},
		{"parent joined before the split", func(m *missedSplit) { m.parentFloor = joinFloor{2, 12} }, true},
		{"parent joined just below the split", func(m *missedSplit) { m.parentFloor = joinFloor{3, 39} }, true},
		// A floor at or past the split: the parent replica was created
		// after it, and this server may have held the new range before
		// (its data directory lost, or a move off and back).
		{"parent created at the split", func(m *missedSplit) { m.parentFloor = joinFloor{3, 40} }, false},
		{"parent created after the split", func(m *missedSplit) { m.parentFloor = joinFloor{4, 90} }, false},
		{"parent joined before the split, not born here", func(m *missedSplit) { m.parentFloor, m.parentBorn = joinFloor{2, 12}, false }, true},
		// Neither a floor nor the bootstrap mark: a floorless join, or a
		// replica an older build created (perhaps re-created after a
		// lost data directory, when that server held the new range).
		{"parent neither floored nor born here", func(m *missedSplit) { m.parentBorn = false }, false},
		{"parent born here and floored after the split", func(m *missedSplit) { m.parentFloor = joinFloor{4, 90} }, false},
		{"parent had no state", func(m *missedSplit) { m.oldApplied = 0 }, false},
		{"parent applied the split", func(m *missedSplit) { m.oldApplied = 40 }, false},
		{"new range lists another server", func(m *missedSplit) { m.self = "ps2" }, false},
		{"new range stored here", func(m *missedSplit) { m.stored = true }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			tc.edit(&m)
			got, why := planMissedSplit(m)
			if got != tc.want {
				t.Fatalf("planMissedSplit = %v (%s), want %v", got, why, tc.want)
			}
			if !got && why == "" {
				t.Fatal("a refusal without its reason")
			}
		})
	}
}

func TestBirthJoin(t *testing.T) {
	birth := &pb.SplitBirth{Index: 40, Right: descOn(7, 3, "ps1", "ps3", "ps4")}
	for _, tc := range []struct {
		name string
		d    *pb.RangeDescriptor
		want bool
	}{
		{"as created", descOn(7, 3, "ps1", "ps3", "ps4"), true},
		{"listed in another order", descOn(7, 3, "ps4", "ps1", "ps3"), true},
		{"changed since (a move)", descOn(7, 5, "ps1", "ps3", "ps4"), false},
		{"older than its birth", descOn(7, 2, "ps1", "ps3", "ps4"), false},
		{"same generation, other servers", descOn(7, 3, "ps1", "ps2", "ps4"), false},
		{"a server more", descOn(7, 3, "ps1", "ps2", "ps3", "ps4"), false},
		{"this server not listed", descOn(7, 3, "ps1", "ps3"), false},
		{"another range", descOn(8, 3, "ps1", "ps3", "ps4"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := birthJoin(birth, tc.d, "ps4"); got != tc.want {
				t.Fatalf("birthJoin = %v, want %v", got, tc.want)
			}
		})
	}
	if birthJoin(&pb.SplitBirth{Index: 40}, descOn(7, 3, "ps4"), "ps4") {
		t.Fatal("a birth without its range allowed a join")
	}
}

// The bootstrap mark is kept in the group's stable keys and goes with the
// group.
func TestBornHereStored(t *testing.T) {
	store, err := raftlog.Open(t.TempDir(), raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	logs := store.Log(7)
	if got, err := bornHere(logs); err != nil || got {
		t.Fatalf("before the mark: %v, %v", got, err)
	}
	if err := markBornHere(logs); err != nil {
		t.Fatal(err)
	}
	if got, err := bornHere(logs); err != nil || !got {
		t.Fatalf("after the mark: %v, %v", got, err)
	}
	if err := logs.Drop(); err != nil {
		t.Fatal(err)
	}
	if got, err := bornHere(store.Log(7)); err != nil || got {
		t.Fatalf("after the group was dropped: %v, %v", got, err)
	}
}
