package partitionserver

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"

	"tablestore/internal/durable"
	"tablestore/partitionserver/raftlog"
)

// legacyLogFile is where a range kept its Raft log before the shared log:
// a raft-boltdb file in the range's directory.
const legacyLogFile = "raft.db"

// legacyStableKeys are the stable-store keys hashicorp/raft writes.
var legacyStableKeys = [][]byte{[]byte("CurrentTerm"), []byte("LastVoteTerm"), []byte("LastVoteCand")}

// importLegacyLog moves a range's log and stable keys from its own
// raft-boltdb file into its group of the shared log, then deletes the file.
// A crash before the delete repeats the import from scratch on the next
// start, so it is safe to interrupt.
func importLegacyLog(path string, dst *raftlog.Log, logger *slog.Logger) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	old, err := raftboltdb.New(raftboltdb.Options{
		Path:        path,
		BoltOptions: &bolt.Options{Timeout: 5 * time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType},
	})
	if err != nil {
		return fmt.Errorf("open legacy log %s: %w", path, err)
	}
	n, err := copyLog(old, dst)
	if cerr := old.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("import legacy log %s: %w", path, err)
	}
	// Durably: a crash that brought the file back would import it again
	// at the next start, over (Drop) the votes and entries the group
	// stored since.
	if err := durable.Remove(path); err != nil {
		return err
	}
	logger.Info("imported legacy raft log into the shared log", "path", path, "entries", n)
	return nil
}

func copyLog(src *raftboltdb.BoltStore, dst *raftlog.Log) (int, error) {
	if err := dst.Drop(); err != nil {
		return 0, err
	}
	for _, k := range legacyStableKeys {
		v, err := src.Get(k)
		if err != nil {
			if err.Error() == "not found" {
				continue
			}
			return 0, err
		}
		if err := dst.Set(k, v); err != nil {
			return 0, err
		}
	}
	first, err := src.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := src.LastIndex()
	if err != nil {
		return 0, err
	}
	n := 0
	const chunk = 256
	for lo := first; first > 0 && lo <= last; lo += chunk {
		hi := min(lo+chunk-1, last)
		batch := make([]*raft.Log, 0, hi-lo+1)
		for i := lo; i <= hi; i++ {
			e := new(raft.Log)
			if err := src.GetLog(i, e); err != nil {
				return n, fmt.Errorf("entry %d: %w", i, err)
			}
			batch = append(batch, e)
		}
		if err := dst.StoreLogs(batch); err != nil {
			return n, err
		}
		n += len(batch)
	}
	return n, nil
}
