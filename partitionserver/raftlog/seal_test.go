package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// entryFrames returns the offsets of the entries records in the segment
// file at path, in order.
func entryFrames(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int
	for off := 0; off < len(b); {
		kind, _, n, err := nextFrame(b[off:])
		if err != nil {
			break
		}
		if kind == recEntries {
			offs = append(offs, off)
		}
		off += n
	}
	return offs
}

// TestCorruptSyncedCommitRefused: a bad frame in the newest segment is cut
// as a torn write only when nothing was committed after it. A frame of a
// commit that a later commit's seal follows was synced (commits are
// written one after another, each after the last one's fdatasync): cutting
// there would silently drop acknowledged entries and votes after it, so
// Open refuses, as etcd refuses a WAL whose CRC fails before its end.
func TestCorruptSyncedCommitRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		commit  int // which of the five commits (0-based) is damaged
		refused bool
	}{
		{"first commit", 0, true},
		{"middle commit", 2, true},
		{"next to last commit", 3, true},
		{"last commit", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, Options{})
			for i := uint64(1); i <= 5; i++ {
				if err := s.Log(3).StoreLog(entry(i, 1, fmt.Sprintf("e%d", i))); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			ids, _ := listSegments(dir)
			path := filepath.Join(dir, segName(ids[len(ids)-1]))
			offs := entryFrames(t, path)
			if len(offs) != 5 {
				t.Fatalf("%d entries records, want 5 (one per commit)", len(offs))
			}
			b, _ := os.ReadFile(path)
			b[offs[tc.commit]+frameHeader+2] ^= 0x20
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, Options{})
			if tc.refused {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("open with commit %d of 5 damaged: %v, want ErrCorrupt", tc.commit+1, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("open with the last commit torn: %v", err)
			}
			defer s.Close()
			if last, _ := s.Log(3).LastIndex(); last != 4 {
				t.Fatalf("last index %d after the last commit was cut, want 4", last)
			}
		})
	}
}

// TestSealsAreNoGroup: seals are kept out of the index (no group, no
// stable keys) and their numbering goes on across reopens, so a commit
// after a restart is numbered after every commit before it.
func TestSealsAreNoGroup(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	for i := uint64(1); i <= 3; i++ {
		if err := s.Log(5).StoreLog(entry(i, 1, "x")); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Groups(); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("groups %v, want [5]", got)
	}
	seq := s.sealSeq
	s.Close()
	s = open(t, dir, Options{})
	defer s.Close()
	if s.sealSeq != seq || seq < 3 {
		t.Fatalf("after reopen the last seal is %d, want %d (at least 3 commits)", s.sealSeq, seq)
	}
	if got := s.Groups(); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("groups after reopen %v, want [5]", got)
	}
	if err := s.Log(5).StoreLog(entry(4, 1, "y")); err != nil {
		t.Fatal(err)
	}
	if s.sealSeq != seq+1 {
		t.Fatalf("the next commit sealed %d, want %d", s.sealSeq, seq+1)
	}
}

// TestEntryTooLargeRefused: an entry that cannot fit one record is refused
// before anything is written, not acknowledged and then cut at the next
// Open.
func TestEntryTooLargeRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	big := entry(1, 1, "")
	big.Data = make([]byte, maxEntryData+1)
	if err := s.Log(1).StoreLog(big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("store an entry of %d bytes: %v, want ErrTooLarge", len(big.Data), err)
	}
	if err := s.Log(1).StoreLog(entry(1, 1, "small")); err != nil {
		t.Fatalf("a small entry after the refusal: %v", err)
	}
	s.Close()
}

// TestSealLookalikeInTornCommitIsCut: bytes inside a torn last commit that
// look like a seal (an entity's data here) do not make Open refuse the
// log unless they carry exactly the number of the commit after the torn
// one: a later number, which a real log could not hold there, is ignored.
func TestSealLookalikeInTornCommitIsCut(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	for i := uint64(1); i <= 4; i++ {
		if err := s.Log(3).StoreLog(entry(i, 1, fmt.Sprintf("e%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	lookalike := string(appendSeal(nil, s.sealSeq+40))
	if err := s.Log(3).StoreLog(entry(5, 1, "x"+lookalike+"y")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ids, _ := listSegments(dir)
	path := filepath.Join(dir, segName(ids[len(ids)-1]))
	offs := entryFrames(t, path)
	b, _ := os.ReadFile(path)
	b[offs[4]+frameHeader+2] ^= 0x20
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("open with a torn last commit holding a seal look-alike: %v", err)
	}
	defer s.Close()
	if last, _ := s.Log(3).LastIndex(); last != 4 {
		t.Fatalf("last index %d, want 4 (the torn commit cut)", last)
	}
}
