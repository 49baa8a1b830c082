package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/lifecycle"
	pb "tablestore/proto/tablestorepb"
)

// foundQuiet is quietServer with its replica's machine quiet too (found
// at start), so a request opens it.
func foundQuiet(t *testing.T) (*Server, *slot) {
	t.Helper()
	s, sl, _ := quietServer(t)
	s.cfg.DataDir = t.TempDir()
	sl.lock()
	_, err := s.step(sl, lifecycle.Input{Event: lifecycle.Found}, "test", nil)
	sl.unlock()
	if err != nil || sl.State() != lifecycle.Quiet {
		t.Fatalf("found: %v, state %v", err, sl.State())
	}
	return s, sl
}

// plantSnapshot writes, in s's replica directory of range 1, a Raft
// snapshot at index 100 (ahead of the state file) with state as its state
// file.
func plantSnapshot(t *testing.T, s *Server, state []byte) {
	t.Helper()
	name := "7-100-1"
	dir := filepath.Join(replicaDir(s.cfg.DataDir, 1), "snapshots", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	meta := fmt.Sprintf(`{"Version":1,"ID":%q,"Index":100,"Term":7,"Size":%d}`, name, len(state))
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.bin"), state, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrokenReplica: a replica whose open fails on damage (a snapshot
// ahead of its state file whose header is garbage) goes broken at once:
// it is not opened again by requests or Raft messages, reports itself
// broken and no longer leader, refuses RangeInfo (the master's checks
// count it as not answering), and the master's delete removes it.
func TestBrokenReplica(t *testing.T) {
	s, sl := foundQuiet(t)
	plantSnapshot(t, s, []byte("garbage!"))
	if _, err := s.acquire(1); !errors.Is(err, fsm.ErrCorruptSnapshot) {
		t.Fatalf("request to the damaged replica: %v, want ErrCorruptSnapshot", err)
	}
	if sl.State() != lifecycle.Broken || sl.openFailures != 1 {
		t.Fatalf("after the damaged open: state %v, %d failures; want broken, 1", sl.State(), sl.openFailures)
	}
	if _, err := s.acquire(1); !errors.Is(err, ErrRangeNotHosted) {
		t.Fatalf("request to the broken replica: %v, want ErrRangeNotHosted", err)
	}
	if s.Wake(1) {
		t.Fatal("a raft message opened the broken replica")
	}
	if sl.openFailures != 1 || sl.State() != lifecycle.Broken {
		t.Fatalf("the broken replica was opened again: %d failures, state %v", sl.openFailures, sl.State())
	}
	rs := s.status(sl, sl.span(1), true)
	if rs.GetLifecycle() != "broken" || rs.GetLeader() {
		t.Fatalf("report of the broken replica: lifecycle %q, leader %v; want broken, not leader", rs.GetLifecycle(), rs.GetLeader())
	}
	_, err := s.Service().RangeInfo(context.Background(), &pb.RangeInfoRequest{RangeId: 1})
	if rpcerr.Parse(err).Code != codes.Unavailable {
		t.Fatalf("RangeInfo of the broken replica: %v, want UNAVAILABLE", err)
	}
	if err := s.deleteReplica(1, 0, 0); err != nil || s.hosts(1) {
		t.Fatalf("delete of the broken replica: %v, hosted %v", err, s.hosts(1))
	}
}

// TestOpenFailureNotDamage: an open failure not known to be damage (here
// the replica's directory cannot be made) leaves the replica quiet and is
// tried again by the next request: one failure is not persistent.
func TestOpenFailureNotDamage(t *testing.T) {
	s, sl := foundQuiet(t)
	if err := os.WriteFile(filepath.Join(s.cfg.DataDir, "ranges"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := s.acquire(1); err == nil || errors.Is(err, ErrRangeNotHosted) {
			t.Fatalf("request %d: %v, want the open's error", i, err)
		}
		if sl.State() != lifecycle.Quiet || sl.openFailures != i {
			t.Fatalf("after failed open %d: state %v, %d failures; want quiet, %d", i, sl.State(), sl.openFailures, i)
		}
	}
}

// storedServer is an unstarted server "f" whose data directory's state
// file holds range 1 listing it, with quiescence off so the start opens
// it (found: MustOpen).
func storedServer(t *testing.T) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID = "f"
	cfg.DataDir = filepath.Join(t.TempDir(), "ps")
	cfg.GRPCAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Masters = []string{"127.0.0.1:1"} // never answers: heartbeats fail, harmlessly
	cfg.QuiesceAfter = 0
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	store, err := fsm.Open(filepath.Join(cfg.DataDir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	d := &pb.RangeDescriptor{RangeId: 1, Table: "t", TableId: 7, Generation: 1,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "f"}}}
	if err := store.CreateRange(d, false); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStartOpenFailure: at start, only a damaged replica is skipped (the
// server starts and hosts it broken); any other failure to open a stored
// replica fails the start, as it did before broken replicas: it is most
// likely the server's fault (here ranges/ is a plain file, as wrong
// permissions or a broken mount would fail every replica), and a server
// that started with every replica failing would serve nothing.
func TestStartOpenFailure(t *testing.T) {
	t.Run("plain failure fails the start", func(t *testing.T) {
		s := storedServer(t)
		if err := os.WriteFile(filepath.Join(s.cfg.DataDir, "ranges"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		err := s.Start()
		if err == nil {
			state := s.ReplicaState(1)
			s.Close()
			t.Fatalf("start with ranges/ a plain file succeeded (range 1 %s)", state)
		}
		if !strings.Contains(err.Error(), "range 1 in --data-dir") {
			t.Fatalf("start: %v, want the range's open error", err)
		}
	})
	t.Run("damage does not", func(t *testing.T) {
		s := storedServer(t)
		plantSnapshot(t, s, []byte("garbage!"))
		if err := s.Start(); err != nil {
			t.Fatalf("start with a damaged replica: %v", err)
		}
		defer s.Close()
		if got := s.ReplicaState(1); got != "broken" {
			t.Fatalf("damaged replica after the start: %s, want broken", got)
		}
	})
}

// TestPersistentFailureNotBroken: a plain open failure never makes a
// replica broken, however long it lasts (a full disk, EMFILE, wrong
// permissions strike every replica of the server, and broken ones would
// all be replaced): it stays quiet and is retried.
func TestPersistentFailureNotBroken(t *testing.T) {
	s, sl := foundQuiet(t)
	if err := os.WriteFile(filepath.Join(s.cfg.DataDir, "ranges"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Failing for an hour already.
	sl.openFailures = 100
	if _, err := s.acquire(1); err == nil || errors.Is(err, ErrRangeNotHosted) {
		t.Fatalf("request: %v, want the open's error", err)
	}
	if sl.State() != lifecycle.Quiet || sl.openFailures != 101 {
		t.Fatalf("after another failed open: state %v, %d failures; want quiet, 101", sl.State(), sl.openFailures)
	}
	if rs := s.status(sl, sl.primary(), true); rs.GetLifecycle() == "broken" {
		t.Fatal("a plainly failing replica reports itself broken")
	}
}

// leaderAtBroken is a log handler that, when the registry logs a
// replica's move to broken (finish logs after publishing the state),
// records whether the slot still claimed leadership then.
type leaderAtBroken struct {
	sl      *slot
	seen    bool
	claimed bool
}

func (h *leaderAtBroken) Enabled(context.Context, slog.Level) bool { return true }
func (h *leaderAtBroken) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *leaderAtBroken) WithGroup(string) slog.Handler            { return h }
func (h *leaderAtBroken) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "replica lifecycle" || h.sl.State() != lifecycle.Broken || h.seen {
		return nil
	}
	h.seen = true
	l := h.sl.lastLeader.Load()
	h.claimed = h.sl.wasLeader.Load() || (l != nil && *l != "")
	return nil
}

// TestBrokenNeverLeader: once a replica's state reads broken (a heartbeat
// reads it without the slot's lock), it no longer claims the leadership
// it had when it closed: the leader flag is cleared before the state is
// published.
func TestBrokenNeverLeader(t *testing.T) {
	s, sl := foundQuiet(t)
	leader := "f"
	sl.lastLeader.Store(&leader)
	if !sl.wasLeader.Load() {
		t.Fatal("quietServer's replica should have led")
	}
	h := &leaderAtBroken{sl: sl}
	s.logger = slog.New(h)
	plantSnapshot(t, s, []byte("garbage!"))
	if _, err := s.acquire(1); !errors.Is(err, fsm.ErrCorruptSnapshot) {
		t.Fatalf("request to the damaged replica: %v, want ErrCorruptSnapshot", err)
	}
	if !h.seen {
		t.Fatal("the move to broken was not logged")
	}
	if h.claimed {
		t.Fatal("the replica's state read broken while it still claimed leadership")
	}
}
