package raftlog

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
)

// The benchmarks compare three ways to keep the logs of G groups on one
// server, each group appending one 1 KiB entry per StoreLogs (what a range
// leader does per write at low load), fsync on, every group busy at once:
//
//   - shared: this package (one segmented log, group commit)
//   - boltbatch: one bbolt file for all groups, a bucket per group,
//     appends coalesced with bbolt's DB.Batch (the other shape the design
//     considered; a prototype kept here only to measure it)
//   - perGroup: a raft-boltdb file per group (what partition servers did)
//
// go test -run '^$' -bench . -benchtime 2000x ./partitionserver/raftlog/

// appender is what a benchmark needs of a group's log.
type appender interface {
	StoreLogs([]*raft.Log) error
}

func benchAppend(b *testing.B, groups int, open func(b *testing.B, dir string) (func(id uint64) appender, func())) {
	get, closeAll := open(b, b.TempDir())
	defer closeAll()
	data := make([]byte, 1024)
	var next atomic.Int64
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), cpuTime()
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := get(uint64(g + 1))
			for idx := uint64(1); next.Add(1) <= int64(b.N); idx++ {
				if err := l.StoreLogs([]*raft.Log{{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "appends/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/append")
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func openShared(b *testing.B, dir string) (func(uint64) appender, func()) {
	s, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	return func(id uint64) appender { return s.Log(id) }, func() {
		b.ReportMetric(float64(b.N)/float64(s.Stats().Syncs), "appends/sync")
		s.Close()
	}
}

func openPerGroup(b *testing.B, dir string) (func(uint64) appender, func()) {
	var mu sync.Mutex
	var stores []*raftboltdb.BoltStore
	return func(id uint64) appender {
			st, err := raftboltdb.New(raftboltdb.Options{
				Path:        filepath.Join(dir, fmt.Sprintf("%d.db", id)),
				BoltOptions: &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType},
			})
			if err != nil {
				b.Fatal(err)
			}
			mu.Lock()
			stores = append(stores, st)
			mu.Unlock()
			return st
		}, func() {
			for _, st := range stores {
				st.Close()
			}
		}
}

// boltBatch is the bbolt-with-coalesced-transactions prototype.
type boltBatch struct {
	db *bolt.DB
	id uint64
}

func (l boltBatch) StoreLogs(logs []*raft.Log) error {
	var bufs [][]byte
	for _, e := range logs {
		bufs = append(bufs, appendEntry(nil, e))
	}
	return l.db.Batch(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(binary.BigEndian.AppendUint64(nil, l.id))
		if err != nil {
			return err
		}
		for i, e := range logs {
			if err := bk.Put(binary.BigEndian.AppendUint64(nil, e.Index), bufs[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

func openBoltBatch(b *testing.B, dir string) (func(uint64) appender, func()) {
	db, err := bolt.Open(filepath.Join(dir, "all.db"), 0o644, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		b.Fatal(err)
	}
	// bbolt gathers a batch for MaxBatchDelay (default 10 ms) or
	// MaxBatchSize calls; 1 ms trades a little latency for batching.
	db.MaxBatchDelay = time.Millisecond
	return func(id uint64) appender { return boltBatch{db: db, id: id} }, func() { db.Close() }
}

func BenchmarkAppend(b *testing.B) {
	shapes := []struct {
		name string
		open func(*testing.B, string) (func(uint64) appender, func())
	}{{"shared", openShared}, {"boltbatch", openBoltBatch}, {"perGroup", openPerGroup}}
	for _, groups := range []int{1, 4, 16, 64} {
		for _, sh := range shapes {
			b.Run(fmt.Sprintf("%s/groups=%d", sh.name, groups), func(b *testing.B) {
				benchAppend(b, groups, sh.open)
			})
		}
	}
}
