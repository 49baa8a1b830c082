// Package raftsnap wraps hashicorp/raft's FileSnapshotStore so that a
// snapshot that fails (a full disk) leaves no temporary directory behind.
package raftsnap

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"
)

// Store is a raft.FileSnapshotStore that does not leave a failed
// snapshot's temporary directory behind.
//
// hashicorp/raft (v1.7.3) writes a snapshot into "<name>.tmp" and renames
// it into place when done. On a full disk the write fails, and the sink's
// Cancel (and Close) fail too, at their first step: the flush of the
// sink's buffered writer, whose error sticks. Cancel then returns before
// it removes the directory, Close before it writes the meta, so the
// partial snapshot stays, holding the space it took; raft's store ignores
// ".tmp" directories for good (List skips them, the reaper keeps them), so
// each snapshot attempt on a full disk (every SnapshotInterval, and each
// install from a leader) left another, and the space never came back.
type Store struct {
	*raft.FileSnapshotStore
	dir    string // the store's snapshots directory
	logger *slog.Logger
}

var _ raft.SnapshotStore = (*Store)(nil)

// Wrap wraps fs, the file snapshot store made on base (the base passed
// to raft.NewFileSnapshotStore), first removing the temporary directories
// of snapshots never finished (a crash, or a failure before this package
// cleaned up): nothing reads them. Call it before the store's raft starts,
// when no snapshot is being written.
func Wrap(base string, fs *raft.FileSnapshotStore, logger *slog.Logger) (*Store, error) {
	dir := filepath.Join(base, "snapshots")
	des, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, de := range des {
		if de.IsDir() && strings.HasSuffix(de.Name(), ".tmp") {
			if err := os.RemoveAll(filepath.Join(dir, de.Name())); err != nil {
				return nil, fmt.Errorf("removing unfinished snapshot %s: %w", de.Name(), err)
			}
			logger.Warn("removed an unfinished snapshot", "snapshot", de.Name())
		}
	}
	return &Store{FileSnapshotStore: fs, dir: dir, logger: logger}, nil
}

// Create implements raft.SnapshotStore.
func (s *Store) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &snapshotSink{SnapshotSink: sink, tmp: filepath.Join(s.dir, sink.ID()+".tmp"), logger: s.logger}, nil
}

// snapshotSink removes its temporary directory when Cancel or Close fails
// before the snapshot is in place.
type snapshotSink struct {
	raft.SnapshotSink
	tmp    string
	logger *slog.Logger
}

// Cancel implements raft.SnapshotSink.
func (k *snapshotSink) Cancel() error {
	err := k.SnapshotSink.Cancel()
	if err != nil {
		k.removeTemp(err)
	}
	return err
}

// Close implements raft.SnapshotSink.
func (k *snapshotSink) Close() error {
	err := k.SnapshotSink.Close()
	if err != nil {
		// A failure after the rename (syncing the parent directory)
		// leaves no temporary directory: the snapshot is in place.
		k.removeTemp(err)
	}
	return err
}

// removeTemp deletes the temporary directory of a snapshot that failed
// with cause. Its file may still be open in the failed sink; unlinked, its
// blocks are freed when the sink is collected (os.File's finalizer).
func (k *snapshotSink) removeTemp(cause error) {
	if _, err := os.Stat(k.tmp); err != nil {
		return
	}
	if err := os.RemoveAll(k.tmp); err != nil {
		k.logger.Error("removing a failed snapshot's temporary directory", "dir", k.tmp, "cause", cause, "err", err)
		return
	}
	k.logger.Warn("removed a failed snapshot's temporary directory", "dir", k.tmp, "cause", cause)
}
