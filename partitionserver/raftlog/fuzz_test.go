package raftlog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzDecodeRecord feeds arbitrary bytes to the frame and record decoders
// (what Open does with a segment): they must return an error or a record,
// never panic or allocate without bound; a decoded entry must decode again.
// Seeds are in testdata/fuzz/FuzzDecodeRecord.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(validSegment())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		// The checksum hides the payload decoder from most inputs, so it
		// also gets the bytes directly: kind, then payload.
		if len(b) > 0 {
			checkRecord(t, b[0], b[1:])
		}
		for off := 0; off < len(b); {
			kind, payload, n, err := nextFrame(b[off:])
			if err != nil {
				return
			}
			checkRecord(t, kind, payload)
			off += n
		}
	})
}

func checkRecord(t *testing.T, kind byte, payload []byte) {
	ev, err := decodeRecord(kind, payload)
	if err != nil {
		return
	}
	for _, e := range ev.entries {
		var l raft.Log
		if err := decodeEntry(payload[e.off:e.off+e.n], &l); err != nil || l.Index != e.index {
			t.Fatalf("entry at %d decoded once, not twice: %v", e.off, err)
		}
	}
}

// validSegment is a segment holding each kind of record.
func validSegment() []byte {
	dir, err := os.MkdirTemp("", "raftlog-seed")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	s, err := Open(dir, Options{})
	if err != nil {
		panic(err)
	}
	l := s.Log(3)
	l.StoreLogs([]*raft.Log{entry(1, 1, "a"), entry(2, 1, "bb"), {Index: 3, Term: 2, Type: raft.LogConfiguration, Extensions: []byte("ext")}})
	l.SetUint64([]byte("CurrentTerm"), 2)
	l.DeleteRange(3, 3)
	s.Log(4).StoreLog(entry(1, 1, "c"))
	s.Log(4).Drop()
	s.Close()
	s, _ = Open(dir, Options{}) // a new segment starting with a checkpoint
	s.Log(3).StoreLog(entry(3, 2, "d"))
	s.Close()
	ids, _ := listSegments(dir)
	var all []byte
	for _, id := range ids {
		b, _ := os.ReadFile(filepath.Join(dir, segName(id)))
		all = append(all, b...)
	}
	return all
}
