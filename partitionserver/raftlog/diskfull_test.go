package raftlog

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"

	"tablestore/internal/failpoint"
)

// TestFullDiskWriteRecovers fails a group commit as a full disk does: half
// of the batch lands, then ENOSPC. The batch's callers get the error, the
// log takes the next batch once the disk has room (no restart), and the
// failed batch's records never come back: not even when the next batch is
// exactly as long as the failed one's first record and its seal, so that a
// replay left to read on behind it would find the failed batch's second
// record whole (a record of another group, acknowledged to nobody).
func TestFullDiskWriteRecovers(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	g1 := s.Log(1)
	if err := g1.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("one")}}); err != nil {
		t.Fatal(err)
	}
	// The failed batch: group 2's entry 1, group 3's entries 1-2, then a
	// large entry of group 3, so the half that lands holds the first two
	// records whole.
	r1, _ := s.Log(2).encodeEntries(nil, []*raft.Log{{Index: 1, Term: 1, Data: bytes.Repeat([]byte("a"), 500)}})
	r2, _ := s.Log(3).encodeEntries(nil, []*raft.Log{{Index: 1, Term: 1, Data: []byte("b")}, {Index: 2, Term: 1, Data: []byte("c")}})
	r3, _ := s.Log(3).encodeEntries(nil, []*raft.Log{{Index: 3, Term: 1, Data: bytes.Repeat([]byte("d"), 4000)}})
	failpoint.Enable("partitionserver/raftlog/write", func() error { return syscall.ENOSPC })
	err = s.submit(r1, r2, r3)
	failpoint.Disable("partitionserver/raftlog/write")
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("failed batch: err %v, want ENOSPC", err)
	}
	// What landed of it is given back: on a full disk, the blocks it
	// took are what the next write needs.
	if fi, err := os.Stat(s.cur.f.Name()); err != nil || fi.Size() != s.cur.size {
		t.Fatalf("segment of %v bytes (err %v) after the failed write, want its records' end %d", fi.Size(), err, s.cur.size)
	}

	// The retry: group 1's entry 2, sized so that it and its seal end
	// exactly where r1 ended.
	seal := len(appendSeal(nil, s.sealSeq+1))
	var retry *raft.Log
	for n := 0; n < len(r1.frame); n++ {
		e := &raft.Log{Index: 2, Term: 1, Data: bytes.Repeat([]byte("r"), n)}
		if rec, _ := g1.encodeEntries(nil, []*raft.Log{e}); len(rec.frame)+seal == len(r1.frame) {
			retry = e
			break
		}
	}
	if retry == nil {
		t.Fatal("no entry size lines the retry up with the failed batch's first record")
	}
	if err := g1.StoreLogs([]*raft.Log{retry}); err != nil {
		t.Fatalf("write after the disk had room again: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, g := range []uint64{2, 3} {
		if last, _ := s.Log(g).LastIndex(); last != 0 {
			t.Errorf("group %d holds entries up to %d after a restart; its only write failed", g, last)
		}
	}
	var got raft.Log
	if err := s.Log(1).GetLog(2, &got); err != nil || !bytes.Equal(got.Data, retry.Data) {
		t.Errorf("group 1 entry 2: %v (err %v), want the retried entry", got.Data, err)
	}
}

// TestFullDiskNewSegmentRecovers fails the creation of the next segment
// (the checkpoint's write on a full disk): the batch fails, no segment file
// is left behind, and the next batch starts the segment.
func TestFullDiskNewSegmentRecovers(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	l := s.Log(1)
	big := bytes.Repeat([]byte("x"), 3<<10)
	if err := l.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: big}}); err != nil {
		t.Fatal(err)
	}
	before, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	failpoint.Enable("partitionserver/raftlog/write", func() error { return syscall.ENOSPC })
	err = l.StoreLogs([]*raft.Log{{Index: 2, Term: 1, Data: big}})
	failpoint.Disable("partitionserver/raftlog/write")
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write needing a new segment: err %v, want ENOSPC", err)
	}
	if after, _ := listSegments(dir); len(after) != len(before) {
		t.Fatalf("segments %v after the failed creation, want %v", after, before)
	}
	if err := l.StoreLogs([]*raft.Log{{Index: 2, Term: 1, Data: big}}); err != nil {
		t.Fatalf("write after the disk had room again: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if last, _ := s.Log(1).LastIndex(); last != 2 {
		t.Fatalf("last index %d after a restart, want 2", last)
	}
}
