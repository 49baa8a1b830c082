package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/internal/failpoint"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/lifecycle"
	pb "tablestore/proto/tablestorepb"
)

// A range assigned here joins empty (and waits for a snapshot) only when
// no replica here will create it by applying a split: assignment must not
// report "no parent, not stored" while a split it applied is still being
// committed to the state file.
func TestAssignmentJoin(t *testing.T) {
	parent := &pb.RangeDescriptor{RangeId: 1, Table: "t", TableId: 7, Generation: 1}
	right := &pb.RangeDescriptor{RangeId: 2, Table: "t", TableId: 7, Start: "m", Generation: 2}
	otherTable := &pb.RangeDescriptor{RangeId: 3, Table: "u", TableId: 8, Generation: 1}
	tests := []struct {
		name    string
		local   *pb.RangeDescriptor // the replica hosted here
		split   bool                // it applied the split creating right
		stalled bool                // and the state file's commit of it is slow
		// removed: the answer does not assign the local replica's range
		// here; retired: it retires it, as reported at generation 1 (the
		// parent before the split). Neither may delete the replica here:
		// that a range is missing from the answer is no proof this
		// server was removed from it (the master's map can lose a live
		// range for a while), and a retired replica that applied a split
		// since is of a later generation than the master judged.
		removed, retired bool
		want             lifecycle.Placement
	}{
		{name: "parent here has not split yet", local: parent, want: lifecycle.AwaitSplit},
		{name: "parent here applied the split", local: parent, split: true, want: lifecycle.AwaitSplit},
		// The split narrowed the parent's span in memory while its
		// commit, which stores the new range, is still running.
		{name: "parent here applied the split, commit in progress", local: parent, split: true, stalled: true, want: lifecycle.AwaitSplit},
		{name: "no replica of the table here", local: otherTable, want: lifecycle.Join},
		// The map dropped the parent (a split's right half adopted before
		// its left half) or a move took this server off it: only the
		// master, on a later generation of the parent that does not list
		// this server, deletes it (master/replicagc.go).
		{name: "parent here has not split and is no longer assigned here", local: parent, removed: true, want: lifecycle.AwaitSplit},
		{name: "parent here applied the split since it was retired", local: parent, split: true, removed: true, retired: true, want: lifecycle.AwaitSplit},
		// Applied, the split moved the start out of the parent's span:
		// whether the parent is still assigned does not matter.
		{name: "parent here applied the split and is no longer assigned here", local: parent, split: true, removed: true, want: lifecycle.AwaitSplit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store, err := fsm.OpenWithInterval(filepath.Join(t.TempDir(), "state.db"), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			if err := store.CreateRange(tc.local, true); err != nil {
				t.Fatal(err)
			}
			if err := store.Flush(); err != nil {
				t.Fatal(err)
			}
			r, err := store.OpenRange(tc.local.GetRangeId(), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			s := &Server{store: store, logger: slog.New(slog.DiscardHandler), slots: map[uint64]*slot{r.ID(): newSlot(r.ID(), r.Group(), &cfg)}, spanGroup: map[uint64]uint64{r.ID(): r.ID()}}
			// Every path out of the subtest lets a held commit go: the
			// store's Close waits for it.
			release := make(chan struct{})
			var once sync.Once
			let := func() { once.Do(func() { close(release) }) }
			defer let()
			if tc.stalled {
				failpoint.Enable("partitionserver/fsm/commit", func() error { <-release; return nil })
				t.Cleanup(func() {
					let()
					failpoint.Disable("partitionserver/fsm/commit")
				})
			}
			if tc.split {
				data, err := fsm.Encode(pb.CommandKind_COMMAND_KIND_SPLIT, &pb.SplitCommand{SplitKey: "m", NewRangeId: 2})
				if err != nil {
					t.Fatal(err)
				}
				res := r.ApplyBatch([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: data}})
				if e := res[0].(*fsm.Result).Err; e != nil {
					t.Fatal(e)
				}
			}
			got := make(chan lifecycle.Placement, 1)
			go func() { a, _ := s.assignment(right); got <- lifecycle.Assigned(a) }()
			if tc.stalled {
				// The commit completes a while later; the join must not
				// have decided on the half-applied split meanwhile.
				select {
				case v := <-got:
					if v == lifecycle.Join {
						t.Fatalf("%v while the split's commit was in progress", v)
					}
					return
				case <-time.After(100 * time.Millisecond):
				}
				let()
			}
			if v := <-got; v != tc.want {
				t.Fatalf("placement %v, want %v", v, tc.want)
			}
			if !tc.removed {
				return
			}
			// The heartbeat's reconcile of an answer assigning right and
			// not the parent keeps the parent.
			rp := &reportState{assigned: []*pb.RangeDescriptor{right}, live: map[uint64]bool{7: true, 8: true}, nextTableID: 9}
			var retired map[uint64]uint64
			if tc.retired {
				retired = retiredAt([]*pb.RangeStatus{{RangeId: parent.GetRangeId(), Generation: parent.GetGeneration()}}, []uint64{parent.GetRangeId()})
			}
			if tc.retired && retired[parent.GetRangeId()] != parent.GetGeneration() {
				t.Fatalf("retired at %v, want the reported generation %d", retired, parent.GetGeneration())
			}
			s.reconcile(rp, retired)
			if !s.hosts(parent.GetRangeId()) {
				t.Fatal("the reconcile deleted the parent's replica")
			}
		})
	}
}

// A quiet leader that served reads without waking reports their load (a
// read-hot range may stay quiet, and the master's policies follow its
// load); once idle again its reused idle report zeroes the rates. A quiet
// follower reports none.
func TestQuietLeaderReportsReadLoad(t *testing.T) {
	store, err := fsm.OpenWithInterval(filepath.Join(t.TempDir(), "state.db"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	desc := &pb.RangeDescriptor{RangeId: 1, Table: "t", TableId: 7, Generation: 1}
	if err := store.CreateRange(desc, true); err != nil {
		t.Fatal(err)
	}
	r, err := store.OpenRange(1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	sl := newSlot(1, r.Group(), &cfg)
	s := &Server{store: store, cfg: cfg, logger: slog.New(slog.DiscardHandler), slots: map[uint64]*slot{1: sl}, spanGroup: map[uint64]uint64{1: 1}}
	sl.state.Store(int32(lifecycle.Quiet))
	sl.wasLeader.Store(true)

	idle := s.status(sl, sl.primary(), true)
	if !idle.GetLeader() || !idleLoad(idle.GetLoad()) {
		t.Fatalf("idle quiet leader: leader %v, load %v", idle.GetLeader(), idle.GetLoad())
	}
	if again := s.status(sl, sl.primary(), true); again != idle {
		t.Fatal("an idle quiet replica's report was rebuilt")
	}
	time.Sleep(10 * time.Millisecond)
	for range 10 {
		sl.meters.get(1).servedRead("p", 1, time.Now())
	}
	busy := s.status(sl, sl.primary(), true)
	if !busy.GetLeader() || busy.GetLifecycle() != "quiet" || busy.GetLoad().GetReadsPerSec() <= 0 || len(busy.GetLoad().GetHotKeys()) == 0 {
		t.Fatalf("quiet leader after reads: leader %v, lifecycle %q, load %v", busy.GetLeader(), busy.GetLifecycle(), busy.GetLoad())
	}
	after := s.status(sl, sl.primary(), true)
	if !idleLoad(after.GetLoad()) || sameReport(busy, after) {
		t.Fatalf("quiet leader idle again: load %v (want idle and reported)", after.GetLoad())
	}

	sl.wasLeader.Store(false)
	sl.meters.get(1).servedRead("p", 1, time.Now())
	if f := s.status(sl, sl.primary(), true); f.GetLeader() || !idleLoad(f.GetLoad()) {
		t.Fatalf("quiet follower: leader %v, load %v; want no load", f.GetLeader(), f.GetLoad())
	}
}

// TestLogRefusedDeleteLevels: a retired replica's delete is retried every
// heartbeat, so the refusals by design log at Debug and only a failure
// nobody expects warns.
func TestLogRefusedDeleteLevels(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want slog.Level
	}{
		{"merge pending", fmt.Errorf("x: %w", fsm.ErrMergePending), slog.LevelDebug},
		{"late delete", fmt.Errorf("x: %w", ErrLateDelete), slog.LevelDebug},
		{"span of a group", fmt.Errorf("x: %w", errSpanOfGroup), slog.LevelDebug},
		{"anything else", errors.New("disk on fire"), slog.LevelWarn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []slog.Level
			logger := slog.New(levelRecorder{&got})
			logRefusedDelete(logger, "delete retired replica failed", 7, tc.err)
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("logged at %v, want one record at %v", got, tc.want)
			}
		})
	}
}

// levelRecorder is a slog.Handler that keeps the level of every record.
type levelRecorder struct{ levels *[]slog.Level }

func (h levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h levelRecorder) Handle(_ context.Context, r slog.Record) error {
	*h.levels = append(*h.levels, r.Level)
	return nil
}
func (h levelRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h levelRecorder) WithGroup(string) slog.Handler      { return h }
