package partitionserver

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"tablestore/partitionserver/raftlog"
)

// TestImportLegacyLog checks that a range's raft-boltdb file from before
// the shared log is moved into the shared log, entries and stable keys,
// and removed; and that an import interrupted before the removal is
// repeated without duplicating anything.
func TestImportLegacyLog(t *testing.T) {
	for _, interrupted := range []bool{false, true} {
		t.Run(fmt.Sprintf("interrupted=%v", interrupted), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ranges", "7", legacyLogFile)
			os.MkdirAll(filepath.Dir(path), 0o755)
			old, err := raftboltdb.NewBoltStore(path)
			if err != nil {
				t.Fatal(err)
			}
			var logs []*raft.Log
			for i := uint64(5); i <= 600; i++ {
				logs = append(logs, &raft.Log{Index: i, Term: 3, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry %d", i))})
			}
			if err := old.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			old.SetUint64([]byte("CurrentTerm"), 3)
			old.SetUint64([]byte("LastVoteTerm"), 3)
			old.Set([]byte("LastVoteCand"), []byte("ps-a"))
			old.Close()

			shared, err := raftlog.Open(filepath.Join(dir, raftLogDir), raftlog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { shared.Close() }()
			other := shared.Log(8)
			other.StoreLog(&raft.Log{Index: 1, Term: 1, Data: []byte("other")})
			view := shared.Log(7)
			if interrupted {
				// A first import that crashed before removing the file.
				src, _ := raftboltdb.NewBoltStore(path)
				if _, err := copyLog(src, view); err != nil {
					t.Fatal(err)
				}
				src.Close()
			}
			if err := importLegacyLog(path, view, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("legacy file still there: %v", err)
			}
			shared.Close()
			shared, err = raftlog.Open(filepath.Join(dir, raftLogDir), raftlog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			view = shared.Log(7)
			first, _ := view.FirstIndex()
			last, _ := view.LastIndex()
			if first != 5 || last != 600 {
				t.Fatalf("imported bounds [%d, %d]", first, last)
			}
			for i := first; i <= last; i++ {
				var e raft.Log
				if err := view.GetLog(i, &e); err != nil || string(e.Data) != fmt.Sprintf("entry %d", i) || e.Term != 3 {
					t.Fatalf("entry %d: %+v, %v", i, e, err)
				}
			}
			if v, err := view.GetUint64([]byte("CurrentTerm")); err != nil || v != 3 {
				t.Fatalf("CurrentTerm %d, %v", v, err)
			}
			if v, err := view.Get([]byte("LastVoteCand")); err != nil || string(v) != "ps-a" {
				t.Fatalf("LastVoteCand %q, %v", v, err)
			}
			var e raft.Log
			if err := shared.Log(8).GetLog(1, &e); err != nil || string(e.Data) != "other" {
				t.Fatalf("other group: %v", err)
			}
		})
	}
}
