package grouptransport

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/partitionserver/lease"
)

// Read leases (package lease) on the wire: this server's follower side
// (its promises, kept per group for as long as the process runs, so that a
// member closed and opened again, or restarted in place, keeps them) and
// the admission of the requests that could elect another member against a
// promise. A group's leader side is Group.lease.
type leases struct {
	d       time.Duration // 0: leases off (no promise given, everything admitted)
	fresh   time.Duration
	started time.Time

	mu     sync.Mutex
	voters map[uint64]*lease.Voter
}

func newLeases(d time.Duration, started time.Time) *leases {
	if started.IsZero() {
		started = time.Now()
	}
	// fresh: the silence after which the next append gets no promise, as
	// raft may be starting an election on it (lease.Voter.Promise). d is
	// at most half of raft's heartbeat timeout (partitionserver's Config).
	return &leases{d: d, fresh: d, started: started, voters: map[uint64]*lease.Voter{}}
}

func (l *leases) voter(group uint64) *lease.Voter {
	v := l.voters[group]
	if v == nil {
		v = &lease.Voter{}
		l.voters[group] = v
	}
	return v
}

// leaseRequest is the admission question msg asks, if any.
func leaseRequest(msg any, tok lease.Token) (lease.Request, bool) {
	switch m := msg.(type) {
	case *raft.RequestPreVoteRequest:
		return lease.Request{Kind: lease.PreVote, From: string(m.ID)}, true
	case *raft.RequestVoteRequest:
		return lease.Request{Kind: lease.Vote, From: string(m.ID), Transfer: m.LeadershipTransfer, Token: tok}, true
	case *raft.TimeoutNowRequest:
		return lease.Request{Kind: lease.TimeoutNow, From: string(m.ID), Token: tok}, true
	}
	return lease.Request{}, false
}

// admit decides req for group; an admitted vote or TimeoutNow is pending
// (no promise given) until done.
func (l *leases) admit(group uint64, req lease.Request) (pending bool, err error) {
	if l.d <= 0 {
		return false, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.voter(group)
	if err := v.Admit(time.Now(), l.started, l.d, req); err != nil {
		return false, err
	}
	if req.Kind == lease.PreVote {
		return false, nil
	}
	v.Begin()
	return true, nil
}

func (l *leases) done(group uint64) {
	l.mu.Lock()
	l.voter(group).End()
	l.mu.Unlock()
}

// promise records a successful append raft answered for group's leader
// and reports whether the answer carries a promise.
func (l *leases) promise(group uint64, leader string, term uint64) bool {
	if l.d <= 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.voter(group).Promise(time.Now(), leader, term, l.d, l.fresh)
}

// promisedAnswer reports whether raft's answer resp to msg, a request
// raft itself answered, gets a promise.
func (l *leases) promisedAnswer(group uint64, msg, resp any) bool {
	ae, ok := msg.(*raft.AppendEntriesRequest)
	if !ok || l.d <= 0 {
		return false
	}
	r, ok := resp.(*raft.AppendEntriesResponse)
	if !ok || !r.Success || r.Term != ae.Term {
		return false
	}
	return l.promise(group, string(ae.ID), ae.Term)
}

// groupLease is a leader's side of its lease (lease.Tracker) and the
// transfer term its TimeoutNow carries.
type groupLease struct {
	mu       sync.Mutex
	tracker  lease.Tracker
	transfer uint64      // the term this member last started a transfer in
	token    lease.Token // the token of the last TimeoutNow admitted here
}

// ack records a promised answer of peer to an append of term sent at sent.
func (g *Group) ack(peer raft.ServerID, term uint64, sent time.Time) {
	g.lease.mu.Lock()
	g.lease.tracker.Ack(string(peer), term, sent)
	g.lease.mu.Unlock()
}

// LeaseHeld reports whether this member, self, leading term with voters
// (its latest configuration's), holds a read lease now (lease.Tracker.Held):
// then its commit index, read after this call, is a read index without a
// round of heartbeats. Always false when leases are off.
func (g *Group) LeaseHeld(term uint64, self raft.ServerID, voters []raft.ServerID) bool {
	if g.t.leases.d <= 0 {
		return false
	}
	ids := make([]string, len(voters))
	for i, v := range voters {
		ids[i] = string(v)
	}
	now := time.Now()
	g.lease.mu.Lock()
	defer g.lease.mu.Unlock()
	return g.lease.tracker.Held(now, term, string(self), ids, g.t.leases.d)
}

// StartTransfer gives this member's lease up for term and every earlier
// one, and makes its TimeoutNow carry term: call it before starting a
// leadership transfer in term, and again (DisableLease) with the term
// current once the transfer returned.
func (g *Group) StartTransfer(term uint64) {
	g.lease.mu.Lock()
	g.lease.tracker.Disable(term)
	g.lease.transfer = term
	g.lease.mu.Unlock()
}

// DisableLease gives the lease up for term and every earlier one (a
// transfer returned, or a quiescence was proposed, in term).
func (g *Group) DisableLease(term uint64) {
	g.lease.mu.Lock()
	g.lease.tracker.Disable(term)
	g.lease.mu.Unlock()
}

func (g *Group) transferTerm() uint64 {
	g.lease.mu.Lock()
	defer g.lease.mu.Unlock()
	return g.lease.transfer
}

func (g *Group) setToken(tok lease.Token) {
	g.lease.mu.Lock()
	g.lease.token = tok
	g.lease.mu.Unlock()
}

func (g *Group) transferToken() lease.Token {
	g.lease.mu.Lock()
	defer g.lease.mu.Unlock()
	return g.lease.token
}
