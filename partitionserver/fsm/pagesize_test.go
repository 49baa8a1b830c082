package fsm

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// A new state file gets statePageSize; a file written with another page
// size (every file before session 15 has the OS's 4 KiB) keeps it, and is
// read and written as before.
func TestStatePageSize(t *testing.T) {
	t.Run("new file", func(t *testing.T) {
		s, _ := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
		if got := s.db.Info().PageSize; got != statePageSize {
			t.Fatalf("page size of a new state file = %d, want %d", got, statePageSize)
		}
	})
	t.Run("existing file keeps its own", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		old, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		desc := &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1}
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.db.Info().PageSize; got != 4096 {
			t.Fatalf("page size after reopening a 4 KiB file = %d, want 4096", got)
		}
		if err := s.CreateRange(desc, true); err != nil {
			t.Fatal(err)
		}
		r, err := s.OpenRange(1, logging.Discard())
		if err != nil {
			t.Fatal(err)
		}
		data, err := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: 1000, RequestId: []byte("req-1"),
			Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: "r", Entity: benchEntity(t)}}})
		if err != nil {
			t.Fatal(err)
		}
		if res := r.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: data}}); res[0].(*Result).Err != nil {
			t.Fatal(res[0].(*Result).Err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, err = Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r, err = s.OpenRange(1, logging.Discard())
		if err != nil {
			t.Fatal(err)
		}
		if v, err := r.Get("p", "r"); err != nil || v == nil {
			t.Fatalf("Get after reopening = %v, %v; want the entity", v, err)
		}
		if got := s.db.Info().PageSize; got != 4096 {
			t.Fatalf("page size after a write and a reopen = %d, want 4096", got)
		}
	})
}
