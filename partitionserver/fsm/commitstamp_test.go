package fsm

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// foreignUpdate commits fn on the closed file at path the way a binary
// that knows nothing of the time index or the commit stamp would: raw
// bbolt, neither maintained.
func foreignUpdate(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, FreelistType: bolt.FreelistMapType, NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// reopenStore closes s and opens its file again.
func reopenStore(t *testing.T, s *Store, path string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRequestIndexRebuiltAfterForeignCommits: when a binary that does not
// keep the time index (an older release) committed to the file after this
// code did, Open rebuilds the index: a record that binary added is indexed,
// and so pruned when it expires, and no entry of a record it deleted
// remains. The rebuild happens once: the next restart keeps the index.
func TestRequestIndexRebuiltAfterForeignCommits(t *testing.T) {
	// The foreign record: proposed long before the others, so the first
	// prune forgets it.
	foreignKey := requestKey(9, []byte("foreign"))
	foreignRec := appendRequestRecord(nil, 1, 1, "pforeign")
	for _, tc := range []struct {
		name    string
		foreign func(tx *bolt.Tx) error
		// pruned: the foreign record must be gone after the prune.
		pruned bool
	}{
		{name: "record put without its index entry", pruned: true, foreign: func(tx *bolt.Tx) error {
			return tx.Bucket(bucketRequests).Put(foreignKey, foreignRec)
		}},
		{name: "record deleted leaving its index entry", foreign: func(tx *bolt.Tx) error {
			return tx.Bucket(bucketRequests).Delete(requestKey(9, []byte("id3")))
		}},
		{name: "record put, stamp absent (index kept by a binary before the stamp)", pruned: true, foreign: func(tx *bolt.Tx) error {
			if err := tx.DeleteBucket(bucketMeta); err != nil {
				return err
			}
			return tx.Bucket(bucketRequests).Put(foreignKey, foreignRec)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			s, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Close() }()
			if err := s.CreateRange(&pb.RangeDescriptor{RangeId: 5, TableId: 9, Generation: 1}, true); err != nil {
				t.Fatal(err)
			}
			r, err := s.OpenRange(5, logging.Discard())
			if err != nil {
				t.Fatal(err)
			}
			clock := int64(1_000_000_000)
			write := func(index uint64, id string) {
				t.Helper()
				data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: clock, RequestId: []byte(id),
					Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, "p"+id, "r", entityBytes(t, nil))}})
				if res := r.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}})[0].(*Result); res.Err != nil {
					t.Fatal(res.Err)
				}
			}
			for i := range 10 {
				clock += int64(time.Minute)
				write(uint64(i+1), fmt.Sprint("id", i))
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			foreignUpdate(t, path, tc.foreign)

			if s, err = Open(path); err != nil {
				t.Fatal(err)
			}
			if !s.IndexRebuilt() {
				t.Fatal("Open after a foreign commit kept the index")
			}
			checkRequestIndex(t, s)
			s = reopenStore(t, s, path)
			if s.IndexRebuilt() {
				t.Fatal("the restart after the rebuild rebuilt again")
			}

			// Five minutes after the last write, at the next prune, the
			// first four and the foreign record are forgotten.
			if r, err = s.OpenRange(5, logging.Discard()); err != nil {
				t.Fatal(err)
			}
			clock += 5 * int64(time.Minute)
			write(pruneEvery, "now")
			checkRequestIndex(t, s)
			left := requestIDs(t, s)
			if tc.pruned && slices.Contains(left, "9/foreign") {
				t.Fatalf("the foreign record outlived its prune: %v", left)
			}
			for _, id := range left {
				if id == "9/id0" || id == "9/id1" || id == "9/id2" || id == "9/id3" {
					t.Fatalf("expired record %s outlived the prune: %v", id, left)
				}
			}
		})
	}
}

// TestRestartKeepsRequestIndex: every commit path of the package stamps
// its commit, so a restart after any of them keeps the index (a path that
// did not would rebuild it at every start).
func TestRestartKeepsRequestIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	desc := &pb.RangeDescriptor{RangeId: 5, TableId: 9, Generation: 1}
	var r *Range
	openRange := func() {
		t.Helper()
		if r, err = s.OpenRange(5, logging.Discard()); err != nil {
			t.Fatal(err)
		}
	}
	index, clock := uint64(0), int64(1_000_000_000)
	write := func(id string) {
		t.Helper()
		index++
		clock += int64(time.Second)
		data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: clock, RequestId: []byte(id),
			Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, "p"+id, "r", entityBytes(t, nil))}})
		if res := r.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}})[0].(*Result); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	var snap sink
	steps := []struct {
		name string
		do   func()
	}{
		{"open of a new file", func() {}},
		{"range created", func() {
			if err := s.CreateRange(desc, true); err != nil {
				t.Fatal(err)
			}
		}},
		{"writes group-committed (Flush)", func() {
			openRange()
			write("a")
			write("b")
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}},
		{"writes committed by Close", func() {
			openRange()
			write("c")
		}},
		{"snapshot restored", func() {
			openRange()
			sn, err := r.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if err := sn.Persist(&snap); err != nil {
				t.Fatal(err)
			}
			sn.Release()
			write("d")
			if err := r.Restore(io.NopCloser(&snap.Buffer)); err != nil {
				t.Fatal(err)
			}
			index = r.AppliedIndex()
		}},
		{"range deleted", func() {
			if err := s.DeleteRange(5, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"range created again", func() {
			if err := s.CreateRange(desc, true); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, st := range steps {
		st.do()
		s = reopenStore(t, s, path)
		if s.IndexRebuilt() {
			t.Fatalf("restart after %s rebuilt the time index", st.name)
		}
		checkRequestIndex(t, s)
	}
	if ids := requestIDs(t, s); len(ids) != 0 {
		t.Fatalf("records after the range was deleted: %s", strings.Join(ids, " "))
	}
}
