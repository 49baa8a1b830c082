package fsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"tablestore/internal/edm"
	"tablestore/internal/failpoint"
	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// fragmentedFile writes a state file at path with two ranges of ~4 MiB of
// rows each, written with request ids, then deletes the second range (its
// table's bucket goes) and nine rows in ten of the first: most of the
// file is free pages.
func fragmentedFile(t *testing.T, path string) {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := entityBytes(t, map[string]edm.Value{"V": {Type: edm.TypeString, Str: strings.Repeat("x", 4000)}})
	for _, d := range []*pb.RangeDescriptor{{RangeId: 5, TableId: 9, Generation: 1}, {RangeId: 6, TableId: 10, Generation: 1}} {
		if err := s.CreateRange(d, true); err != nil {
			t.Fatal(err)
		}
		r, err := s.OpenRange(d.GetRangeId(), logging.Discard())
		if err != nil {
			t.Fatal(err)
		}
		index, clock := uint64(0), int64(1_000_000_000)
		apply := func(id string, ops ...*pb.EntityOp) {
			index++
			clock += 1000
			data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: clock, RequestId: []byte(id), Ops: ops})
			if res := r.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: data}})[0].(*Result); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		for b := range 100 {
			ops := make([]*pb.EntityOp, 10)
			for i := range ops {
				ops[i] = op(pb.OpKind_OP_KIND_INSERT, fmt.Sprint("p", b), fmt.Sprint("r", i), big)
			}
			apply(fmt.Sprint("w", b), ops...)
		}
		for b := range 100 {
			ops := make([]*pb.EntityOp, 9)
			for i := range ops {
				ops[i] = op(pb.OpKind_OP_KIND_DELETE, fmt.Sprint("p", b), fmt.Sprint("r", i+1), nil)
			}
			apply(fmt.Sprint("d", b), ops...)
		}
	}
	if err := s.DeleteRange(6, 0); err != nil {
		t.Fatal(err)
	}
}

// dumpFile renders every bucket of the store's file but meta (the stamp
// differs by design), nested buckets included, with their keys and values.
func dumpFile(t *testing.T, s *Store) string {
	t.Helper()
	var sb strings.Builder
	var walk func(prefix string, b *bolt.Bucket) error
	walk = func(prefix string, b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				fmt.Fprintf(&sb, "%s%x/\n", prefix, k)
				return walk(fmt.Sprintf("%s%x/", prefix, k), b.Bucket(k))
			}
			fmt.Fprintf(&sb, "%s%x=%x\n", prefix, k, v)
			return nil
		})
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if string(name) == string(bucketMeta) {
				return nil
			}
			return walk(string(name)+"/", b)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// withMinCompactFree lowers the minimum free bytes for one test.
func withMinCompactFree(t *testing.T, n int64) {
	prev := minCompactFree
	minCompactFree = n
	t.Cleanup(func() { minCompactFree = prev })
}

// TestOpenCompacting: a file mostly free is copied compact and swapped in,
// every range's rows, applied index and request records intact, and the
// next Open keeps the request index (the copy's stamp is its own last
// commit's); one under the share or the minimum, with no room for the
// copy, or whose swap fails is left as it was and opens; a crash's copy
// is removed first.
func TestOpenCompacting(t *testing.T) {
	const mib = 1 << 20
	noRoom := func(live *int64) func(string) (uint64, bool) {
		return func(string) (uint64, bool) { return uint64(*live) + 100*mib - 1, true }
	}
	var live int64
	for _, tc := range []struct {
		name     string
		minFree  int64 // 0: the real minimum
		policy   CompactPolicy
		setup    func(t *testing.T, path string)
		compact  bool
		due      bool
		errIs    error
		leftover bool // a leftover copy was removed
	}{
		{name: "mostly free: compacted", minFree: mib, policy: CompactPolicy{MinFreeShare: 0.5}, compact: true, due: true},
		{name: "free under the share", minFree: mib, policy: CompactPolicy{MinFreeShare: 0.999}},
		{name: "free under the minimum bytes", policy: CompactPolicy{MinFreeShare: 0.1}},
		{name: "share 0: never", minFree: 1, policy: CompactPolicy{}},
		{name: "live data over the bound", minFree: mib, due: true, errIs: ErrTooLargeToCompact,
			policy: CompactPolicy{MinFreeShare: 0.5, MaxLive: 1}},
		{name: "live data within the bound", minFree: mib, due: true, compact: true,
			policy: CompactPolicy{MinFreeShare: 0.5, MaxLive: 1 << 40}},
		{name: "no room for the copy and the reserve", minFree: mib, due: true, errIs: ErrNoRoomToCompact,
			policy: CompactPolicy{MinFreeShare: 0.5, Reserve: 100 * mib, Space: noRoom(&live)}},
		{name: "room for the copy and the reserve", minFree: mib, due: true, compact: true,
			policy: CompactPolicy{MinFreeShare: 0.5, Reserve: 100*mib - 1, Space: noRoom(&live)}},
		{name: "failure before the rename", minFree: mib, policy: CompactPolicy{MinFreeShare: 0.5}, due: true, errIs: failpoint.ErrInjected,
			setup: func(t *testing.T, _ string) {
				failpoint.Enable("partitionserver/fsm/compact/before-rename", nil)
				t.Cleanup(func() { failpoint.Disable("partitionserver/fsm/compact/before-rename") })
			}},
		{name: "a crash's copy removed, then compacted", minFree: mib, policy: CompactPolicy{MinFreeShare: 0.5}, compact: true, due: true, leftover: true,
			setup: func(t *testing.T, path string) {
				// Not a bbolt file: a copy over it would fail.
				if err := os.WriteFile(path+CompactSuffix, []byte("torn copy"), 0o600); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "a crash's copy removed, compaction off", policy: CompactPolicy{}, leftover: true,
			setup: func(t *testing.T, path string) {
				if err := os.WriteFile(path+CompactSuffix, []byte("torn copy"), 0o600); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "a leftover that cannot be removed: not compacted", minFree: mib, policy: CompactPolicy{MinFreeShare: 0.5}, due: true, errIs: os.ErrExist,
			setup: func(t *testing.T, path string) {
				if err := os.MkdirAll(filepath.Join(path+CompactSuffix, "x"), 0o700); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.minFree > 0 {
				withMinCompactFree(t, tc.minFree)
			}
			path := filepath.Join(t.TempDir(), "state.db")
			fragmentedFile(t, path)
			want, size, free := fileFacts(t, path)
			live = size - free
			if tc.setup != nil {
				tc.setup(t, path)
			}
			s, c, err := OpenCompacting(path, 0, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if s.IndexRebuilt() {
				// The fixture's file is stamped: only a copy whose last
				// commit is not would have the reopen rebuild.
				t.Fatal("OpenCompacting rebuilt the request index")
			}
			if got := dumpFile(t, s); got != want {
				t.Fatalf("the store's data after OpenCompacting differs from the file's before (%d bytes, want %d)", len(got), len(want))
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkCompaction(t, c, tc.compact, tc.due, tc.leftover, tc.errIs, size, free)
			after, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if shrunk := after.Size() < size; shrunk != tc.compact {
				t.Fatalf("file %d bytes after, %d before: shrunk %v, want %v", after.Size(), size, shrunk, tc.compact)
			}
			if tc.compact && after.Size() > live+17*mib {
				t.Fatalf("compacted file %d bytes, live data %d: want at most bbolt's growth step more", after.Size(), live)
			}
			if _, err := os.Stat(path + CompactSuffix); tc.errIs == nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the copy's name after OpenCompacting: %v, want none", err)
			}
			checkReopened(t, path, want)
		})
	}
}

// fileFacts opens the file at path and returns its data (dumpFile), size
// and free bytes.
func fileFacts(t *testing.T, path string) (dump string, size, free int64) {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if size, free, err = s.FileSpace(); err != nil {
		t.Fatal(err)
	}
	if free < size/2 || free < 4<<20 {
		t.Fatalf("fixture: %d of %d bytes free, want over half and 4 MiB", free, size)
	}
	return dumpFile(t, s), size, free
}

func checkCompaction(t *testing.T, c Compaction, compact, due, leftover bool, errIs error, size, free int64) {
	t.Helper()
	if c.Compacted != compact || c.Due != due || c.LeftoverRemoved != leftover {
		t.Fatalf("compaction %+v: want compacted %v, due %v, leftover removed %v", c, compact, due, leftover)
	}
	if (errIs == nil) != (c.Err == nil) || (errIs != nil && !errors.Is(c.Err, errIs)) {
		t.Fatalf("compaction error %v, want %v", c.Err, errIs)
	}
	if c.Size != size || c.Free != free {
		t.Fatalf("compaction measured %d bytes, %d free; the file had %d, %d", c.Size, c.Free, size, free)
	}
	if compact && (c.After <= 0 || c.After >= size || c.Took <= 0) {
		t.Fatalf("compaction %+v: want a size under %d and a duration", c, size)
	}
}

// checkReopened: a plain Open of the file finds the same data and keeps
// the request index (no rebuild: every commit since the index was built,
// the copy's included, was stamped).
func checkReopened(t *testing.T, path, want string) {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.IndexRebuilt() {
		t.Fatal("the Open after OpenCompacting rebuilt the request index: the copy's last commit was not stamped")
	}
	checkRequestIndex(t, s)
	if got := dumpFile(t, s); got != want {
		t.Fatal("the file's data after a reopen differs from before")
	}
	states, err := s.RangeStates()
	if err != nil || len(states) != 1 || states[0].GetAppliedIndex() != 200 {
		t.Fatalf("range states after a reopen: %v, %v; want range 5 applied at 200", states, err)
	}
	if ids := requestIDs(t, s); len(ids) != 200 {
		t.Fatalf("%d request records after a reopen, want range 5's 200", len(ids))
	}
}

// TestCompactThroughSymlink: a state file reached through a symlink (the
// data directory's state.db naming a file on another disk) is compacted
// where it is: the link stays a link to the same, now smaller, file.
// Before, the copy was written beside the link and renamed over it, which
// left a regular file in the data directory and the old one orphaned.
func TestCompactThroughSymlink(t *testing.T) {
	withMinCompactFree(t, 1<<20)
	elsewhere := filepath.Join(t.TempDir(), "state.db")
	fragmentedFile(t, elsewhere)
	want, size, _ := fileFacts(t, elsewhere)
	link := filepath.Join(t.TempDir(), "state.db")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	s, c, err := OpenCompacting(link, 0, CompactPolicy{MinFreeShare: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !c.Compacted || c.Err != nil {
		t.Fatalf("compacted %v, err %v: want compacted", c.Compacted, c.Err)
	}
	fi, err := os.Lstat(link)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("%s is %v after the compaction, want still a symlink", link, fi.Mode())
	}
	if target, err := os.Readlink(link); err != nil || target != elsewhere {
		t.Fatalf("the link names %q (%v), want %q", target, err, elsewhere)
	}
	after, err := os.Stat(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() >= size {
		t.Fatalf("the linked file is %d bytes, %d before: not compacted in place", after.Size(), size)
	}
	checkReopened(t, link, want)
}
