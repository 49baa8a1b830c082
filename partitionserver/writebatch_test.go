package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/internal/edm"
	"tablestore/internal/logging"
	"tablestore/partitionserver/fsm"
	pb "tablestore/proto/tablestorepb"
)

// fakeLeader applies proposals to a real state machine in log order, as a
// Raft leader whose entries commit at once would; gate holds the first
// proposal until closed, and fail, when set, refuses every proposal.
type fakeLeader struct {
	r       *fsm.Range
	gate    chan struct{}
	mu      sync.Mutex
	index   uint64
	entries []int // writes per entry
	fail    error
}

func newFakeLeader(t *testing.T) *fakeLeader {
	s, err := fsm.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateRange(&pb.RangeDescriptor{RangeId: 1, TableId: 1, Generation: 1}, true); err != nil {
		t.Fatal(err)
	}
	r, err := s.OpenRange(1, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return &fakeLeader{r: r, gate: make(chan struct{})}
}

func (f *fakeLeader) proposeWrite(ctx context.Context, cmd *pb.WriteCommand, timeout time.Duration) (*fsm.Result, error) {
	data, err := fsm.EncodeWrite(cmd)
	if err != nil {
		return nil, err
	}
	return f.propose(ctx, data, timeout)
}

func (f *fakeLeader) propose(_ context.Context, data []byte, _ time.Duration) (*fsm.Result, error) {
	<-f.gate
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	f.index++
	res := f.r.ApplyBatch([]*raft.Log{{Index: f.index, Term: 1, Type: raft.LogCommand, Data: data}})[0].(*fsm.Result)
	n := 1
	if res.Batch != nil {
		n = len(res.Batch)
	}
	f.entries = append(f.entries, n)
	return res, nil
}

func insertCmd(rk string) *pb.WriteCommand {
	return &pb.WriteCommand{ProposedUnixNano: time.Now().UnixNano(), RequestId: []byte("id-" + rk),
		Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: rk, Entity: edm.MarshalBinary(&edm.Entity{})}}}
}

// startBlockedWrites starts one write that the leader holds, then n more,
// and waits until those n are queued behind it.
func startBlockedWrites(t *testing.T, b *writeBatcher, f *fakeLeader, cmds []*pb.WriteCommand) ([]*fsm.Result, []error, *sync.WaitGroup) {
	t.Helper()
	results, errs := make([]*fsm.Result, len(cmds)), make([]error, len(cmds))
	var wg sync.WaitGroup
	run := func(i int) {
		defer wg.Done()
		results[i], errs[i] = b.write(context.Background(), f, cmds[i], time.Second)
	}
	wg.Add(1)
	go run(0)
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.inflight == 1 })
	for i := 1; i < len(cmds); i++ {
		wg.Add(1)
		go run(i)
	}
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == len(cmds)-1 })
	return results, errs, &wg
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWritesQueuedBehindAProposalShareOneEntry(t *testing.T) {
	f := newFakeLeader(t)
	var b writeBatcher
	cmds := []*pb.WriteCommand{insertCmd("first"), insertCmd("a"), insertCmd("b"), insertCmd("first"), insertCmd("c")}
	cmds[3].RequestId = []byte("another id") // a different write of an existing row: fails alone
	results, errs, wg := startBlockedWrites(t, &b, f, cmds)
	close(f.gate)
	wg.Wait()

	if fmt.Sprint(f.entries) != "[1 4]" {
		t.Fatalf("writes per entry = %v, want [1 4] (the lone first write, then the four queued behind it)", f.entries)
	}
	for i := range cmds {
		wantErr := i == 3
		var err error = errs[i]
		if err == nil {
			err = results[i].Err
		}
		if gotErr := err != nil; gotErr != wantErr {
			t.Errorf("write %d: err = %v, want failure %v", i, err, wantErr)
		}
		if wantErr && !errors.Is(err, fsm.ErrEntityExists) {
			t.Errorf("write %d: err = %v, want ErrEntityExists", i, err)
		}
	}
	seen := map[int64]bool{}
	for i, r := range results {
		if i == 3 {
			continue
		}
		if seen[r.TimestampUnixNano] {
			t.Errorf("write %d: timestamp %d given twice", i, r.TimestampUnixNano)
		}
		seen[r.TimestampUnixNano] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inflight != 0 || len(b.queue) != 0 {
		t.Fatalf("after the writes: %d in flight, %d queued, want none", b.inflight, len(b.queue))
	}
}

func TestAFailedBatchProposalFailsEachWrite(t *testing.T) {
	f := newFakeLeader(t)
	var b writeBatcher
	cmds := []*pb.WriteCommand{insertCmd("x"), insertCmd("y"), insertCmd("z")}
	results, errs, wg := startBlockedWrites(t, &b, f, cmds)
	f.fail = fmt.Errorf("%w: %v", ErrBusy, raft.ErrLeadershipTransferInProgress)
	close(f.gate)
	wg.Wait()
	for i := range cmds {
		if !errors.Is(errs[i], ErrBusy) || results[i] != nil {
			t.Errorf("write %d: result %v, err %v, want ErrBusy", i, results[i], errs[i])
		}
	}
}

func TestAQueuedWriteWhoseCallerLeftIsNotProposed(t *testing.T) {
	f := newFakeLeader(t)
	var b writeBatcher
	ctx, cancel := context.WithCancel(context.Background())
	results, errs, wg := startBlockedWrites(t, &b, f, []*pb.WriteCommand{insertCmd("x")})
	done := make(chan error, 1)
	go func() {
		_, err := b.write(ctx, f, insertCmd("gone"), time.Second)
		done <- err
	}()
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned write: err = %v, want context.Canceled", err)
	}
	close(f.gate)
	wg.Wait()
	if errs[0] != nil || results[0].Err != nil {
		t.Fatalf("first write failed: %v %v", errs[0], results[0].Err)
	}
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.inflight == 0 })
	if fmt.Sprint(f.entries) != "[1]" {
		t.Fatalf("writes per entry = %v, want [1]", f.entries)
	}
}

// TestWriteManyProposesTogether: writes that come in one WriteMany share
// an entry whether the range is idle (proposed at once, all of them, not
// the first alone) or busy (queued together behind the proposal in
// flight), each keeping its own result.
func TestWriteManyProposesTogether(t *testing.T) {
	tests := []struct {
		name        string
		busy        bool
		n           int
		wantEntries string
	}{
		{"idle range, three writes", false, 3, "[3]"},
		{"idle range, one write", false, 1, "[1]"},
		{"idle range, more than one entry holds", false, maxBatchWrites + 2, fmt.Sprintf("[%d 2]", maxBatchWrites)},
		{"busy range, queued behind a proposal", true, 3, "[1 3]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeLeader(t)
			var b writeBatcher
			var wg *sync.WaitGroup
			var firstErrs []error
			if tt.busy {
				_, firstErrs, wg = startBlockedWrites(t, &b, f, []*pb.WriteCommand{insertCmd("first")})
			} else {
				close(f.gate)
			}
			cmds := make([]*pb.WriteCommand, tt.n)
			for i := range cmds {
				cmds[i] = insertCmd(fmt.Sprintf("w%03d", i))
			}
			cmds[tt.n-1].Ops[0].RowKey = "w000" // the same row as the first: fails alone, unless it is the first
			type out struct {
				res  []*fsm.Result
				errs []error
			}
			done := make(chan out, 1)
			go func() {
				res, errs := b.writeMany(context.Background(), f, cmds, time.Second)
				done <- out{res, errs}
			}()
			if tt.busy {
				waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == tt.n })
				close(f.gate)
				wg.Wait()
				if firstErrs[0] != nil {
					t.Fatalf("first write: %v", firstErrs[0])
				}
			}
			o := <-done
			f.mu.Lock()
			entries := fmt.Sprint(f.entries)
			f.mu.Unlock()
			if entries != tt.wantEntries {
				t.Fatalf("writes per entry = %s, want %s", entries, tt.wantEntries)
			}
			for i := range cmds {
				err := o.errs[i]
				if err == nil {
					err = o.res[i].Err
				}
				wantErr := tt.n > 1 && i == tt.n-1
				if (err != nil) != wantErr || wantErr && !errors.Is(err, fsm.ErrEntityExists) {
					t.Errorf("write %d: err = %v, want ErrEntityExists %v", i, err, wantErr)
				}
			}
			waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.inflight == 0 && len(b.queue) == 0 })
		})
	}
}
