package partitionserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	bolt "go.etcd.io/bbolt"

	pb "tablestore/proto/tablestorepb"
)

// lockedBuffer is a log sink safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeInStateFile grows the closed state file at path by n bytes of rows
// and deletes them, the way deleted tables leave it: n bytes of free pages.
// The last commit stamps its id as the state machine's commits do, so the
// file reads as this code's own.
func freeInStateFile(t *testing.T, path string, n int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, FreelistType: bolt.FreelistMapType, NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	row := bytes.Repeat([]byte("x"), 1<<20)
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("gone"))
		for i := 0; err == nil && i < n>>20; i++ {
			err = b.Put([]byte(fmt.Sprint(i)), row)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte("gone")); err != nil {
			return err
		}
		return tx.Bucket([]byte("meta")).Put([]byte("last-commit"), binary.BigEndian.AppendUint64(nil, uint64(tx.ID())))
	}); err != nil {
		t.Fatal(err)
	}
}

func gaugeValue(t *testing.T, g interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestRestartCompactsStateFile: a server restarted with most of its state
// file free (100 MiB of deleted rows) compacts the file at start, logs it,
// keeps its range's rows, rebuilds no index, and exports the file's size.
func TestRestartCompactsStateFile(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID = "f"
	cfg.DataDir = filepath.Join(t.TempDir(), "ps")
	cfg.GRPCAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Masters = []string{"127.0.0.1:1"}
	cfg.QuiesceAfter = 0
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	leadingRangeWithWrites(t, s, 50, 1, 5)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.DataDir, "state.db")
	freeInStateFile(t, path, 100<<20)
	before := fileSize(t, path)

	var logs lockedBuffer
	s, err = New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	after := fileSize(t, path)
	if before < 100<<20 || after > 32<<20 {
		t.Fatalf("state file %d bytes before the restart, %d after: want over 100 MiB, then under 32", before, after)
	}
	if !strings.Contains(logs.String(), "compacted the state file") || s.store.IndexRebuilt() {
		t.Fatalf("restart log %q, index rebuilt %v: want the compaction logged, no rebuild", logs.String(), s.store.IndexRebuilt())
	}
	readRow(t, s, 50, "r4")
	// The range's first commits after the restart may grow the file
	// (by a bbolt step) between a gauge update and the stat: poll.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		size, free := gaugeValue(t, stateFileBytes.WithLabelValues(s.id)), gaugeValue(t, stateFileFreeBytes.WithLabelValues(s.id))
		if size == float64(fileSize(t, path)) && free < size {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state file gauges %v bytes, %v free; the file has %d bytes", size, free, fileSize(t, path))
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// readRow reads row p/rk of range id from the server's applied state,
// waiting for the range to open.
func readRow(t *testing.T, s *Server, id uint64, rk string) {
	t.Helper()
	v := &service{s: s}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := v.Get(ctx, &pb.GetRequest{RangeId: id, Generation: 1, PartitionKey: "p", RowKey: rk, FollowerRead: true})
		cancel()
		if err == nil && len(resp.GetEntity()) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("row p/%s of range %d after the restart: %v, %v", rk, id, resp, err)
		}
	}
}
