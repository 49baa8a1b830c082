package raftsnap

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
)

const snapshotChildEnv = "RAFTSNAP_FULL_DISK_DIR"

// TestFailedSnapshotLeavesNoTemp writes a snapshot that fails as on a full
// disk, in a child process whose file size limit (RLIMIT_FSIZE) fails the
// write past 64 KiB with EFBIG, as ENOSPC would: then cancels it, as raft
// and the state machine do. hashicorp's sink fails its Cancel at the flush
// of its buffered writer and keeps the temporary directory, which its
// store then ignores for good; Store removes it. (A child: the
// limit holds for every file of the process.)
func TestFailedSnapshotLeavesNoTemp(t *testing.T) {
	for _, wrapped := range []bool{false, true} {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestFailedSnapshotChild$", "-test.v")
		cmd.Env = append(os.Environ(), snapshotChildEnv+"="+dir)
		if wrapped {
			cmd.Env = append(cmd.Env, snapshotChildEnv+"_WRAPPED=1")
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "snapshot write failed") {
			t.Fatalf("child (wrapped %v): %v\n%s", wrapped, err, out)
		}
		des, err := os.ReadDir(filepath.Join(dir, "snapshots"))
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, de := range des {
			left = append(left, de.Name())
		}
		switch {
		case wrapped && len(left) != 0:
			t.Errorf("snapshots directory holds %v after a failed snapshot", left)
		case !wrapped && len(left) == 0:
			// The premise: hashicorp's own sink leaves it.
			t.Errorf("hashicorp's sink removed its failed snapshot; the wrapper may no longer be needed")
		}
	}
}

// TestFailedSnapshotChild is TestFailedSnapshotLeavesNoTemp's child.
func TestFailedSnapshotChild(t *testing.T) {
	dir := os.Getenv(snapshotChildEnv)
	if dir == "" {
		t.Skip("child process of TestFailedSnapshotLeavesNoTemp")
	}
	fs, err := raft.NewFileSnapshotStore(dir, 2, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var store raft.SnapshotStore = fs
	if os.Getenv(snapshotChildEnv+"_WRAPPED") != "" {
		if store, err = Wrap(dir, fs, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	// Past the limit a write fails with EFBIG; the signal that comes with
	// it is ignored.
	signal.Ignore(syscall.SIGXFSZ)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 64 << 10, Max: unix.RLIM_INFINITY}); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	sink, err := store.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	var werr error
	for i := 0; i < 8 && werr == nil; i++ {
		_, werr = sink.Write(chunk)
	}
	if werr == nil {
		t.Fatal("the snapshot's writes past the size limit succeeded")
	}
	t.Logf("snapshot write failed: %v; cancel: %v", werr, sink.Cancel())
}

// TestUnfinishedSnapshotRemovedAtOpen: a temporary directory left by a
// crash during a snapshot, or by a failure before this store cleaned up,
// is removed by Wrap; finished snapshots stay.
func TestUnfinishedSnapshotRemovedAtOpen(t *testing.T) {
	dir := t.TempDir()
	fs, err := raft.NewFileSnapshotStore(dir, 2, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	done, err := fs.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := done.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := done.Close(); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "snapshots", "1-20-123.tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "state.bin"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err = raft.NewFileSnapshotStore(dir, 2, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Wrap(dir, fs, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("unfinished snapshot still there (stat: %v)", err)
	}
	if list, err := s.List(); err != nil || len(list) != 1 || list[0].ID != done.ID() {
		t.Errorf("snapshots %v (%v), want only %s", list, err, done.ID())
	}
}
