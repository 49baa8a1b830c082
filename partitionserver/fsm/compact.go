package fsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"tablestore/internal/diskspace"
	"tablestore/internal/durable"
	"tablestore/internal/failpoint"
)

// CompactSuffix names the copy a compaction writes beside the state file
// (state.db.compact). One found at start is a crash's leftover and is
// removed: before the rename the original is whole, after it the copy is
// the state file and this name is gone.
const CompactSuffix = ".compact"

// compactMinFreeBytes is the least free space a compaction is run for.
// Copying the file delays the start by a pass over its live data, and the
// file grows again by bbolt's 16 MiB steps: under this much the disk gains
// too little for a restart's delay.
const compactMinFreeBytes = 64 << 20

// minCompactFree is compactMinFreeBytes; tests lower it to compact small
// files.
var minCompactFree int64 = compactMinFreeBytes

// compactTxBytes bounds the keys and values one transaction of the copy
// writes: bbolt keeps a transaction's dirty pages in memory until it
// commits.
const compactTxBytes = 16 << 20

// ErrNoRoomToCompact: the file system lacks room for the copy (the live
// data) plus the server's disk reserve; the compaction is skipped.
var ErrNoRoomToCompact = errors.New("fsm: not enough free disk space to compact the state file")

// ErrTooLargeToCompact: the file's live data is over the policy's MaxLive;
// the compaction is skipped.
var ErrTooLargeToCompact = errors.New("fsm: state file's live data over the compaction bound")

// CompactPolicy says when OpenCompacting compacts the state file.
type CompactPolicy struct {
	// MinFreeShare is the share of the file that must be free (0 < x <= 1)
	// for a compaction; 0 turns compaction off.
	MinFreeShare float64
	// MaxLive bounds the live bytes (size less free) a compaction copies:
	// a larger file is left alone (ErrTooLargeToCompact). 0: no bound.
	MaxLive uint64
	// Reserve is the free space in bytes the file system must keep beside
	// the copy (the server's disk reserve).
	Reserve uint64
	// Space reports the bytes available on dir's file system (ok false:
	// unknown, and the copy is tried); nil: the file system's own figure.
	Space func(dir string) (avail uint64, ok bool)
}

// Compaction is what OpenCompacting found and did, for its log lines.
type Compaction struct {
	// LeftoverRemoved: a crash's state.db.compact was removed.
	LeftoverRemoved bool
	// Size and Free are the file's bytes and free bytes after the open.
	Size, Free int64
	// Due: the free space was over the policy's share and minimum.
	Due bool
	// Compacted: the copy replaced the file; After is its size, Took how
	// long the copy and the swap took.
	Compacted bool
	After     int64
	Took      time.Duration
	// Err is why a due compaction did not happen (ErrNoRoomToCompact, or
	// a failure that left the file as it was).
	Err error
}

// OpenCompacting opens the state file as OpenWithInterval does (its checks
// and index rebuild included), then, when policy finds enough of the file
// free, copies its live data into a compacted file, swaps it in and opens
// that. Only a failure after the swap (the directory's sync, the reopen)
// is an error; any earlier one leaves the file as it was and returns the
// store opened on it, with the failure in Compaction.Err.
func OpenCompacting(path string, interval time.Duration, policy CompactPolicy) (*Store, Compaction, error) {
	var c Compaction
	// The copy is made beside the file a symlink names and renamed over
	// it: renamed over the link, it replaced the link with a regular file
	// on the link's file system (an operator's state file on another disk
	// moved back to the data directory's).
	var besideLink error
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		// A copy an older build left beside the link (it compacted there).
		besideLink = removeLeftover(path+CompactSuffix, &c)
		path = real
	}
	leftover := errors.Join(besideLink, removeLeftover(path+CompactSuffix, &c))
	s, err := OpenWithInterval(path, interval)
	if err != nil {
		return nil, c, err
	}
	if c.Size, c.Free, err = s.FileSpace(); err != nil {
		c.Err = err
		return s, c, nil
	}
	if c.Due = policy.due(c.Size, c.Free); !c.Due {
		return s, c, nil
	}
	if live := c.Size - c.Free; policy.MaxLive > 0 && uint64(max(live, 0)) > policy.MaxLive {
		c.Err = fmt.Errorf("%w: %d bytes live, the bound is %d (--state-compact-max-live)", ErrTooLargeToCompact, live, policy.MaxLive)
		return s, c, nil
	}
	if c.Err = errors.Join(leftover, policy.room(filepath.Dir(path), c.Size-c.Free)); c.Err != nil {
		return s, c, nil
	}
	start := time.Now()
	compacted, err := s.compact(path, interval, &c)
	c.Took = time.Since(start)
	return compacted, c, err
}

// removeLeftover removes a crash's copy, before anything opens the file.
func removeLeftover(tmp string, c *Compaction) error {
	err := os.Remove(tmp)
	switch {
	case err == nil:
		c.LeftoverRemoved = true
		return nil
	case errors.Is(err, os.ErrNotExist):
		return nil
	}
	return fmt.Errorf("fsm: remove a leftover compaction copy: %w", err)
}

// due reports whether a file of size bytes with free of them free is worth
// compacting.
func (p CompactPolicy) due(size, free int64) bool {
	return p.MinFreeShare > 0 && size > 0 && free >= minCompactFree && float64(free) >= p.MinFreeShare*float64(size)
}

// room checks that dir's file system holds a copy of live bytes and still
// keeps the reserve free.
func (p CompactPolicy) room(dir string, live int64) error {
	space := p.Space
	if space == nil {
		space = func(dir string) (uint64, bool) {
			avail, _, ok := diskspace.Of(dir)
			return avail, ok
		}
	}
	avail, ok := space(dir)
	if need := uint64(max(live, 0)) + p.Reserve; ok && avail < need {
		return fmt.Errorf("%w: %d bytes available, the copy needs %d plus the disk reserve %d", ErrNoRoomToCompact, avail, live, p.Reserve)
	}
	return nil
}

// FileSpace reports the state file's size and how much of it is free: the
// pages on bbolt's freelist (free and pending) and the file's tail past
// its last page in use (bbolt grows the file in steps). Cheap: bbolt's
// statistics, a read transaction's meta and a stat.
func (s *Store) FileSpace() (size, free int64, err error) {
	fi, err := os.Stat(s.db.Path())
	if err != nil {
		return 0, 0, fmt.Errorf("fsm: state file size: %w", err)
	}
	var high int64
	if err := s.db.View(func(tx *bolt.Tx) error { high = tx.Size(); return nil }); err != nil {
		return 0, 0, err
	}
	st := s.db.Stats()
	listed := int64(st.FreePageN+st.PendingPageN) * int64(s.db.Info().PageSize)
	size = fi.Size()
	return size, min(size, max(0, size-high)+listed), nil
}

// compact copies the store's file into path+CompactSuffix, swaps the copy
// in and returns the store opened on it. Before the rename a failure
// removes the copy and returns a store on the original file (c.Err set);
// after it, the error is the start's.
func (s *Store) compact(path string, interval time.Duration, c *Compaction) (*Store, error) {
	tmp := path + CompactSuffix
	rebuilt := s.indexRebuilt
	err := s.copyTo(tmp)
	if err == nil {
		// Nothing is applied at start: Close only releases the file.
		err = s.Close()
		s = nil
	}
	if err == nil {
		err = failpoint.Inject("partitionserver/fsm/compact/before-rename")
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		c.Err = fmt.Errorf("fsm: compact %s: %w", path, err)
		os.Remove(tmp)
		if s != nil {
			return s, nil
		}
		return OpenWithInterval(path, interval)
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("fsm: compacted state file %s: %w", path, err)
	}
	c.Compacted = true
	if fi, err := os.Stat(path); err == nil {
		c.After = fi.Size()
	}
	reopened, err := OpenWithInterval(path, interval)
	if err != nil {
		return nil, fmt.Errorf("fsm: reopen compacted state file %s: %w", path, err)
	}
	// The reopen itself rebuilds nothing (the copy is stamped); a rebuild
	// of the first open is still the start's to report.
	reopened.indexRebuilt = reopened.indexRebuilt || rebuilt
	return reopened, nil
}

// copyTo writes the live data of the store's file into a new bbolt file
// at tmp and makes it durable.
func (s *Store) copyTo(tmp string) error {
	// No sync per commit: the copy counts only once the whole of it is
	// synced below, and a crash before leaves a leftover to remove.
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second, NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	err = bolt.Compact(dst, s.db, compactTxBytes)
	if err == nil {
		// The copy's own last commit carries its stamp, as every commit
		// of this package does (stampCommit): the copied stamp is the
		// original's id, and the next Open would take the copy's commits
		// for foreign ones and rebuild the time index.
		err = dst.Update(stampCommit)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncFile(tmp)
	}
	return err
}

// syncFile fsyncs the file at path: its data and size.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
