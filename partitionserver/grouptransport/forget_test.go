package grouptransport

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/partitionserver/lease"
)

// promise makes l's Voter of group promise leader in term, as two
// answered appends do (the first after silence promises nothing).
func promise(t *testing.T, l *leases, group uint64, leader string, term uint64) {
	t.Helper()
	ae := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte(leader)}, Term: term}
	ok := &raft.AppendEntriesResponse{Term: term, Success: true}
	following := func(uint64) bool { return true }
	l.promisedAnswer(group, ae, ok, time.Now(), following)
	if !l.promisedAnswer(group, ae, ok, time.Now(), following) {
		t.Fatal("no promise given")
	}
}

// voteFrom asks l to admit a vote of candidate in term for group.
func voteFrom(l *leases, group uint64, candidate string, term uint64) error {
	pending, err := l.admit(group, lease.Request{Kind: lease.Vote, From: candidate}, term)
	if pending {
		l.done(group)
	}
	return err
}

// TestForgetGroupLeaseState: a group removed from the server loses its
// lease state (token at once, Voter once idle), but a promise still
// running is kept, and keeps refusing other candidates, until it has run
// out: the range may come back here while its leader still counts it.
func TestForgetGroupLeaseState(t *testing.T) {
	const d = time.Hour // promises outlive the test: no timing in it
	const group, other = 7, 8
	for _, tc := range []struct {
		name    string
		promise bool // the group's Voter holds a running promise
		revive  bool // the group is opened here again after the forget
	}{
		{name: "idle"},
		{name: "promise running", promise: true},
		{name: "promise running, group back", promise: true, revive: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLeases(d, time.Now().Add(-2*d))
			if err := voteFrom(l, group, "a", 1); err != nil {
				t.Fatal(err)
			}
			if tc.promise {
				promise(t, l, group, "a", 1)
			}
			l.setToken(group, lease.Token{Leader: "a", Term: 1})
			// Another group's state is untouched throughout.
			promise(t, l, other, "a", 1)

			l.forget(group, time.Now())
			if _, ok := l.tokens[group]; ok {
				t.Fatal("token kept after the forget")
			}
			if _, kept := l.voters[group]; kept != tc.promise {
				t.Fatalf("Voter kept = %v after the forget, want %v", kept, tc.promise)
			}
			if tc.promise {
				// The promise still refuses another candidate.
				if err := voteFrom(l, group, "b", 2); !errors.Is(err, lease.ErrPromised) {
					t.Fatalf("vote of another candidate after the forget: %v, want %v", err, lease.ErrPromised)
				}
			}
			if tc.revive {
				l.revive(group)
			}
			// A sweep after the promise has run out.
			l.mu.Lock()
			l.sweepLocked(time.Now().Add(d + time.Second))
			l.mu.Unlock()
			if _, kept := l.voters[group]; kept != tc.revive {
				t.Fatalf("Voter kept = %v after the promise ran out, want %v (group back: %v)", kept, tc.revive, tc.revive)
			}
			if !tc.revive && len(l.retired) != 0 {
				t.Fatalf("retired groups left: %v", l.retired)
			}
			if l.voters[other] == nil {
				t.Fatal("another group's Voter went too")
			}
		})
	}
}

// TestTransportForgetGroup: ForgetGroup reaches the lease state, and a
// group opened again keeps its Voter from the sweep.
func TestTransportForgetGroup(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := New(Config{Listener: ln, LeaseDuration: time.Hour, Started: time.Now().Add(-2 * time.Hour)})
	t.Cleanup(func() { tr.Close() })
	const back, gone = 1, 2
	for _, id := range []uint64{back, gone} {
		promise(t, tr.leases, id, "a", 1)
		tr.ForgetGroup(id)
	}
	g, err := tr.Group(back, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	tr.leases.mu.Lock()
	tr.leases.sweepLocked(time.Now().Add(2 * time.Hour))
	_, keptBack := tr.leases.voters[back]
	_, keptGone := tr.leases.voters[gone]
	tr.leases.mu.Unlock()
	if !keptBack || keptGone {
		t.Fatalf("after the sweep: Voter of the group opened again kept %v (want true), of the group gone %v (want false)", keptBack, keptGone)
	}
}
