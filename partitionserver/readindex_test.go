package partitionserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A read index is confirmed in the term it was read in: a member that
// lost the lead after noting its commit index and won it back in a later
// term before the leadership round ran must not answer that index (a
// leader of the term between may have committed writes the index
// misses). Here the round itself moves the lead away and back; the round
// then confirms the later term.
func TestReadIndexConfirmsItsOwnTerm(t *testing.T) {
	config := func(id string) *raft.Config { return testRaftConfig(id, 500*time.Millisecond, 500*time.Millisecond, 0) }
	const group = 13
	lg, fg, faddr := groupPair(t, group)
	leader, _, _ := startTestLeader(t, config("leader"), lg)
	follower, err := raft.NewRaft(config("follower"), &countFSM{}, raft.NewInmemStore(), raft.NewInmemStore(), raft.NewInmemSnapshotStore(), fg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follower.Shutdown().Error() })
	followerAddr := faddr
	if err := leader.AddVoter("follower", followerAddr, 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if err := leader.Apply([]byte("x"), 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	r := &member{raft: leader, transport: lg, serverID: "leader"}
	term := leader.CurrentTerm()
	r.readyTerm.Store(term) // an entry of its term is committed
	waitLeading := func(m *raft.Raft) error {
		for deadline := time.Now().Add(10 * time.Second); m.State() != raft.Leader; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				return errors.New("no leader after the transfer")
			}
		}
		return nil
	}
	moved := false
	r.verify = newVerifyCoalescer(func() error {
		if err := leader.LeadershipTransferToServer("follower", followerAddr).Error(); err != nil {
			return err
		}
		if err := waitLeading(follower); err != nil {
			return err
		}
		if err := follower.LeadershipTransferToServer("leader", lg.LocalAddr()).Error(); err != nil {
			return err
		}
		if err := waitLeading(leader); err != nil {
			return err
		}
		moved = true
		return r.transport.VerifyLeader(leader, "leader")
	}, verifySpacing)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idx, err := r.readIndex(ctx)
	if !moved {
		t.Skipf("the lead did not move away and back (%v): nothing tested", err)
	}
	if err == nil {
		t.Fatalf("read index %d noted in term %d answered after the member led term %d", idx, term, leader.CurrentTerm())
	}
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("read index: %v, want ErrNotLeader", err)
	}
}
