package fsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

func births(idx ...uint64) []*pb.SplitBirth {
	var out []*pb.SplitBirth
	for _, i := range idx {
		out = append(out, &pb.SplitBirth{Index: i, Right: &pb.RangeDescriptor{RangeId: 100 + i}})
	}
	return out
}

func birthIndexes(b []*pb.SplitBirth) []uint64 {
	var out []uint64
	for _, x := range b {
		out = append(out, x.GetIndex())
	}
	return out
}

func TestRecordSplitKeepsTheLast(t *testing.T) {
	var recent []*pb.SplitBirth
	for i := uint64(1); i <= maxRecentSplits+2; i++ {
		recent = recordSplit(recent, i*10, &pb.RangeDescriptor{RangeId: i})
	}
	want := []uint64{30, 40, 50, 60}
	if got := birthIndexes(recent); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("recent splits %v, want %v", got, want)
	}
}

func TestMissedSplits(t *testing.T) {
	for _, tc := range []struct {
		name          string
		recent        []*pb.SplitBirth
		old, newIndex uint64
		want          []uint64
	}{
		{"none recorded", nil, 5, 50, nil},
		{"no state of its own", births(10, 20), 0, 50, nil},
		{"all applied", births(10, 20), 20, 50, nil},
		{"one missed", births(10, 20), 15, 50, []uint64{20}},
		{"both missed", births(10, 20), 9, 50, []uint64{10, 20}},
		{"past the snapshot", births(10, 60), 5, 50, []uint64{10}},
		{"at the snapshot's index", births(50), 5, 50, []uint64{50}},
		{"no right range", []*pb.SplitBirth{{Index: 10}}, 5, 50, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := birthIndexes(MissedSplits(tc.recent, tc.old, tc.newIndex)); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("missed %v, want %v", got, tc.want)
			}
		})
	}
}

// missedHooks records the SplitsMissed calls.
type missedHooks struct {
	mergeHooks
	parent, oldApplied uint64
	missed             []*pb.SplitBirth
}

func (h *missedHooks) SplitsMissed(group, oldApplied uint64, missed []*pb.SplitBirth) {
	h.parent, h.oldApplied, h.missed = group, oldApplied, missed
}

// A replica that did not apply a split and restores a snapshot taken
// after it learns the new range from the snapshot (chaos seed 2181): the
// split's index and the right range as created. One that applied the
// split, or had no state, hears of nothing.
func TestRestorePastSplitReportsIt(t *testing.T) {
	desc := &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
	_, r := openTestRange(t, desc)
	a := &applier{t: t, r: r, clock: 1_000_000}
	a.apply(op(pb.OpKind_OP_KIND_INSERT, "c", "r", entityBytes(t, nil)))
	a.apply(op(pb.OpKind_OP_KIND_INSERT, "x", "r", entityBytes(t, nil)))
	data, err := Encode(pb.CommandKind_COMMAND_KIND_SPLIT, &pb.SplitCommand{SplitKey: "m", NewRangeId: 2})
	if err != nil {
		t.Fatal(err)
	}
	a.index++
	splitIndex := a.index
	res := r.ApplyBatch([]*raft.Log{{Index: splitIndex, Term: 1, Type: raft.LogCommand, Data: data}})[0].(*Result)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	a.apply(op(pb.OpKind_OP_KIND_INSERT, "d", "r", entityBytes(t, nil)))
	if got := r.State().GetRecentSplits(); len(got) != 1 || got[0].GetIndex() != splitIndex || !proto.Equal(got[0].GetRight(), res.Right) {
		t.Fatalf("recent splits after the split: %v, want index %d right %v", got, splitIndex, res.Right)
	}
	snapshot := func() []byte {
		sn, err := r.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Release()
		var out sink
		if err := sn.Persist(&out); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	snap := snapshot()

	for _, tc := range []struct {
		name    string
		applied int // entries of the leader's first ones the replica applied
		want    bool
	}{
		{"behind the split", 2, true},
		{"no state", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, behind := openTestRange(t, desc)
			b := &applier{t: t, r: behind, clock: 1_000_000}
			if tc.applied >= 1 {
				b.apply(op(pb.OpKind_OP_KIND_INSERT, "c", "r", entityBytes(t, nil)))
			}
			if tc.applied >= 2 {
				b.apply(op(pb.OpKind_OP_KIND_INSERT, "x", "r", entityBytes(t, nil)))
			}
			hooks := &missedHooks{}
			behind.SetHooks(hooks)
			if err := behind.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatal(err)
			}
			if !tc.want {
				if hooks.missed != nil {
					t.Fatalf("SplitsMissed called with %v", hooks.missed)
				}
				return
			}
			if hooks.parent != 1 || hooks.oldApplied != uint64(tc.applied) || len(hooks.missed) != 1 ||
				hooks.missed[0].GetIndex() != splitIndex || !proto.Equal(hooks.missed[0].GetRight(), res.Right) {
				t.Fatalf("SplitsMissed(%d, %d, %v), want (1, %d, [%d %v])", hooks.parent, hooks.oldApplied, hooks.missed, tc.applied, splitIndex, res.Right)
			}
		})
	}

	// The leader's own replica restoring its own later snapshot (it
	// applied the split) hears of nothing.
	a.apply(op(pb.OpKind_OP_KIND_INSERT, "e", "r", entityBytes(t, nil)))
	later := snapshot()
	hooks := &missedHooks{}
	r.SetHooks(hooks)
	if err := r.Restore(io.NopCloser(bytes.NewReader(later))); err != nil {
		t.Fatal(err)
	}
	if hooks.missed != nil {
		t.Fatalf("a replica that applied the split: SplitsMissed called with %v", hooks.missed)
	}
}
