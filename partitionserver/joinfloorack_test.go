package partitionserver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// heldLogs is a log store whose appends wait while held: a follower that
// received entries and has yet to acknowledge them. Its heartbeats, which
// store nothing, still answer.
type heldLogs struct {
	*raft.InmemStore
	mu   sync.Mutex
	held chan struct{} // non-nil: StoreLogs waits until it is closed
}

func (h *heldLogs) hold() {
	h.mu.Lock()
	h.held = make(chan struct{})
	h.mu.Unlock()
}

func (h *heldLogs) release() {
	h.mu.Lock()
	if h.held != nil {
		close(h.held)
		h.held = nil
	}
	h.mu.Unlock()
}

func (h *heldLogs) StoreLogs(logs []*raft.Log) error {
	h.mu.Lock()
	ch := h.held
	h.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return h.InmemStore.StoreLogs(logs)
}

func (h *heldLogs) StoreLog(l *raft.Log) error { return h.StoreLogs([]*raft.Log{l}) }

// The join floor covers every entry the leader had appended when asked:
// the replica being re-created may have acknowledged entries whose
// acknowledgement the leader has not yet counted, and they commit after
// a commit index read at once (reliability.md 19, review fixes of session
// 9). Here the leader's one follower holds an appended entry unacknowledged
// while its heartbeats answer (so the leader confirms itself): the floor
// must wait for that entry's commit, not answer the commit index below it.
func TestJoinFloorCoversAppendedEntries(t *testing.T) {
	config := func(id string) *raft.Config { return testRaftConfig(id, 500*time.Millisecond, 500*time.Millisecond, 0) }
	const group = 12
	lg, fg, faddr := groupPair(t, group)
	leader, _, _ := startTestLeader(t, config("leader"), lg)
	flogs := &heldLogs{InmemStore: raft.NewInmemStore()}
	follower, err := raft.NewRaft(config("follower"), &countFSM{}, flogs, flogs, raft.NewInmemSnapshotStore(), fg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		flogs.release()
		follower.Shutdown().Error()
	})
	for deadline := time.Now().Add(20 * time.Second); leader.State() != raft.Leader; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	if err := leader.AddVoter("follower", faddr, 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := leader.Apply([]byte("x"), 10*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	r := &member{raft: leader, transport: lg, serverID: "leader"}
	term0 := leader.CurrentTerm()
	r.readyTerm.Store(term0) // an entry of its term is committed

	flogs.hold()
	pending := leader.Apply([]byte("acked by nobody yet"), 30*time.Second)
	var last uint64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if last = leader.LastIndex(); last > leader.CommitIndex() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held entry was never appended on the leader")
		}
	}
	type answer struct {
		f   joinFloor
		err error
	}
	got := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		f, err := r.joinFloor(ctx)
		got <- answer{f, err}
	}()
	// Before the fix the answer came now, at the commit index below the
	// held entry; the follower acknowledges it after a pause.
	select {
	case a := <-got:
		if a.err != nil {
			// Not the floor's answer: the leader lost its lease to a
			// loaded machine's scheduling.
			t.Skipf("join floor refused (%v) while the entry was held: leadership lost, nothing tested", a.err)
		}
		t.Fatalf("join floor %+v answered while entry %d, appended before the call, was uncommitted", a.f, last)
	case <-time.After(300 * time.Millisecond):
	}
	flogs.release()
	if err := pending.Error(); err != nil && !errors.Is(err, raft.ErrLeadershipLost) {
		t.Fatal(err)
	}
	a := <-got
	if errors.Is(a.err, ErrNotLeader) && (leader.State() != raft.Leader || leader.CurrentTerm() != term0) {
		t.Skipf("join floor refused (%v) after the release: leadership lost to a loaded machine's scheduling, nothing tested", a.err)
	}
	if a.err != nil {
		t.Fatalf("join floor: %v", a.err)
	}
	if a.f.index < last || a.f.term != leader.CurrentTerm() {
		t.Fatalf("join floor %+v, want at or past (%d, %d)", a.f, leader.CurrentTerm(), last)
	}
}
