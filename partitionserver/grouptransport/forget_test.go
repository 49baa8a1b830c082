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
			if !tc.revive && len(l.gone) != 0 {
				t.Fatalf("gone groups left: %v", l.gone)
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

// clock is a test's time for leases.now: it moves only when told.
type clock struct{ t time.Time }

func (c *clock) now() time.Time           { return c.t }
func (c *clock) advance(by time.Duration) { c.t = c.t.Add(by) }
func withClock(l *leases) *clock          { c := &clock{t: time.Now()}; l.now = c.now; return c }
func hasVoter(l *leases, group uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.voters[group] != nil
}

// lateRequest admits req for group as the server's handle does: the token
// of a TimeoutNow recorded, an admitted vote or TimeoutNow answered.
func lateRequest(t *testing.T, l *leases, group uint64, req lease.Request, term uint64) {
	t.Helper()
	pending, err := l.admit(group, req, term)
	if err != nil {
		t.Fatalf("%+v for group %d: %v", req, group, err)
	}
	if req.Kind == lease.TimeoutNow {
		l.setToken(group, req.Token)
	}
	if pending {
		l.done(group)
	}
}

// TestForgottenGroupLateRequests: a vote, pre-vote or TimeoutNow for a
// group forgotten here, from a peer that still has it, leaves no state
// behind once its Voter is idle again (no token is stored at all), however
// late it comes after the forget; a group hosted here but closed, never
// forgotten, keeps its token and Voter. The sweeps are admit's, for
// another group.
func TestForgottenGroupLateRequests(t *testing.T) {
	const d = time.Hour
	const group, closed, other = 7, 8, 9
	tok := lease.Token{Leader: "a", Term: 3}
	for _, tc := range []struct {
		name string
		req  lease.Request
	}{
		{name: "pre-vote", req: lease.Request{Kind: lease.PreVote, From: "b"}},
		{name: "vote", req: lease.Request{Kind: lease.Vote, From: "b"}},
		{name: "transfer vote", req: lease.Request{Kind: lease.Vote, From: "b", Transfer: true, Token: tok}},
		{name: "TimeoutNow", req: lease.Request{Kind: lease.TimeoutNow, From: "a", Token: tok}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLeases(d, time.Now().Add(-2*d))
			c := withClock(l)
			sweep := func() { lateRequest(t, l, other, lease.Request{Kind: lease.PreVote, From: "x"}, 9) }
			forgot := c.now()
			l.forget(group, forgot)
			// Past the idle window of anything a request leaves.
			const idle = lease.CampaignWindow + time.Second
			// Late requests: soon after the forget, then after the first
			// entry's goneFor (each one keeps the group known as gone).
			for i, after := range []time.Duration{time.Second, goneFor - time.Second, goneFor - time.Second} {
				c.advance(after)
				lateRequest(t, l, group, tc.req, 4)
				if l.token(group) != (lease.Token{}) {
					t.Fatalf("request %d: token stored for a forgotten group", i)
				}
				c.advance(idle)
				sweep()
				if hasVoter(l, group) {
					t.Fatalf("request %d, %v after the forget: the forgotten group's Voter kept", i, c.now().Sub(forgot))
				}
			}
			// Asked no more, the group is not kept as gone for good.
			c.advance(goneFor)
			sweep()
			if _, ok := l.gone[group]; ok {
				t.Fatal("gone entry kept goneFor after the last request")
			}

			// A group hosted here but closed (never forgotten): its
			// TimeoutNow's token and its Voter stay across sweeps.
			lateRequest(t, l, closed, lease.Request{Kind: lease.TimeoutNow, From: "a", Token: tok}, 0)
			c.advance(idle + goneFor)
			sweep()
			if l.token(closed) != tok || !hasVoter(l, closed) {
				t.Fatalf("closed group: token %+v (want %+v), Voter kept %v (want true)", l.token(closed), tok, hasVoter(l, closed))
			}
		})
	}
}

// TestAdmitSweeps: an admission for any group drops the Voters of the
// forgotten groups that became idle since (not only a later forget).
func TestAdmitSweeps(t *testing.T) {
	const d = time.Hour
	const group, other = 7, 8
	l := newLeases(d, time.Now().Add(-2*d))
	c := withClock(l)
	promise(t, l, group, "a", 1)
	l.forget(group, c.now())
	if !hasVoter(l, group) {
		t.Fatal("the Voter of a running promise dropped at the forget")
	}
	c.advance(d + time.Second) // the promise has run out
	if err := voteFrom(l, other, "b", 2); err != nil {
		t.Fatal(err)
	}
	if hasVoter(l, group) {
		t.Fatal("an admission after the promise ran out did not drop the forgotten group's Voter")
	}
	if !hasVoter(l, other) {
		t.Fatal("the admitted group's Voter is missing")
	}
}

// TestForgetGroupOpen: ForgetGroup forgets nothing while a member of the
// group is open here (its Voter guards that member), and does once it
// closed.
func TestForgetGroupOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := New(Config{Listener: ln, LeaseDuration: time.Hour, Started: time.Now().Add(-2 * time.Hour)})
	t.Cleanup(func() { tr.Close() })
	const id = 3
	g, err := tr.Group(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := lease.Token{Leader: "a", Term: 1}
	tr.leases.setToken(id, tok)
	if tr.ForgetGroup(id) {
		t.Fatal("ForgetGroup of an open group reported forgotten")
	}
	tr.leases.mu.Lock()
	_, gone := tr.leases.gone[id]
	tr.leases.mu.Unlock()
	if gone || tr.leases.token(id) != tok {
		t.Fatalf("open group: gone %v (want false), token %+v (want %+v)", gone, tr.leases.token(id), tok)
	}
	g.Close()
	if !tr.ForgetGroup(id) {
		t.Fatal("ForgetGroup of a closed group reported not forgotten")
	}
	if tr.leases.token(id) != (lease.Token{}) {
		t.Fatal("token kept after the forget of the closed group")
	}
}
