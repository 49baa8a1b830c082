package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	if sl.State() != lifecycle.Broken || sl.openFailures.Count != 1 {
		t.Fatalf("after the damaged open: state %v, %d failures; want broken, 1", sl.State(), sl.openFailures.Count)
	}
	if _, err := s.acquire(1); !errors.Is(err, ErrRangeNotHosted) {
		t.Fatalf("request to the broken replica: %v, want ErrRangeNotHosted", err)
	}
	if s.Wake(1) {
		t.Fatal("a raft message opened the broken replica")
	}
	if sl.openFailures.Count != 1 || sl.State() != lifecycle.Broken {
		t.Fatalf("the broken replica was opened again: %d failures, state %v", sl.openFailures.Count, sl.State())
	}
	rs := s.status(sl, true)
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
		if sl.State() != lifecycle.Quiet || sl.openFailures.Count != i {
			t.Fatalf("after failed open %d: state %v, %d failures; want quiet, %d", i, sl.State(), sl.openFailures.Count, i)
		}
	}
}

// TestOpenFailureKind classifies open errors for the broken rule.
func TestOpenFailureKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		want lifecycle.FailureKind
	}{
		{fmt.Errorf("partitionserver: range 1: %w", fmt.Errorf("header: %w: bad magic", fsm.ErrCorruptSnapshot)), lifecycle.Damage},
		{ErrShuttingDown, lifecycle.Transient},
		{errWakeTimeout, lifecycle.Transient},
		{fmt.Errorf("partitionserver: range 1: %w", os.ErrPermission), lifecycle.Failure},
	} {
		if got := openFailure(c.err); got != c.want {
			t.Errorf("openFailure(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
