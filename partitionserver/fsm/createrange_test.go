package fsm

import (
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/internal/failpoint"
	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// TestCreateRangeJoinsTheGroupCommit: CreateRange returns once its record
// is committed even when the group-commit interval is an hour away (it
// urges the commit), the writes applied before it are committed with it,
// concurrent creations all land, and a range is created once.
func TestCreateRangeJoinsTheGroupCommit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	s, err := OpenWithInterval(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var commits atomic.Int64
	failpoint.Enable("partitionserver/fsm/commit", func() error { commits.Add(1); return nil })
	defer failpoint.Disable("partitionserver/fsm/commit")

	if err := s.CreateRange(&pb.RangeDescriptor{RangeId: 1, TableId: 1, Generation: 1}, true); err != nil {
		t.Fatal(err)
	}
	r, err := s.OpenRange(1, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	// A write applied and pending in the shared transaction.
	data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: 1000, Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT, "p", "r", entityBytes(t, nil))}})
	if res := r.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: data}}); res[0].(*Result).Err != nil {
		t.Fatal(res[0].(*Result).Err)
	}

	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for i := 0; i < 2*n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every range id twice: one of each pair must fail.
			id := uint64(2 + i%n)
			errs[i] = s.CreateRange(&pb.RangeDescriptor{RangeId: id, TableId: id, Generation: 1}, true)
		}()
	}
	wg.Wait()
	created := 0
	for i, err := range errs {
		switch {
		case err == nil:
			created++
		case !errors.Is(err, ErrRangeExists):
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if created != n {
		t.Errorf("%d ranges created of %d ids asked twice each, want %d", created, n, n)
	}
	t.Logf("%d creations in %d commits", n+1, commits.Load())

	// Committed: a read transaction sees them, and so does a reopen.
	states, err := s.RangeStates()
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != n+1 {
		t.Fatalf("%d ranges in the committed file, want %d", len(states), n+1)
	}
	if r.AppliedIndex() != 1 {
		t.Errorf("applied index %d: the write pending before the creations was not committed with them", r.AppliedIndex())
	}
	if _, err := r.Get("p", "r"); err != nil {
		t.Errorf("the write pending before the creations: %v", err)
	}
}

// TestCreateRangeAfterClose: a creation racing the store's Close either
// fails or is committed; it never waits for a committer that has stopped.
func TestCreateRangeAfterClose(t *testing.T) {
	s, err := OpenWithInterval(filepath.Join(t.TempDir(), "state.db"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		time.Sleep(time.Millisecond)
		done <- s.CreateRange(&pb.RangeDescriptor{RangeId: 1, TableId: 1, Generation: 1}, true)
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("CreateRange still waiting 30 s after Close")
	}
}
