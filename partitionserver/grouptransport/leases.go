package grouptransport

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"tablestore/partitionserver/lease"
)

// Read leases (package lease) on the wire: this server's follower side
// (its promises, kept per group while the group is hosted here, so that a
// member closed and opened again, or restarted in place, keeps them) and
// the admission of the requests that could elect another member against a
// promise. A group's leader side is Group.lease.
type leases struct {
	d       time.Duration // 0: leases off (no promise given, everything admitted)
	started time.Time
	now     func() time.Time // time.Now; tests move it

	mu     sync.Mutex
	voters map[uint64]*lease.Voter
	// tokens: per group, the token of the last TimeoutNow admitted here,
	// which the candidate's votes carry. Kept here, not in the Group: a
	// TimeoutNow to a closed member is admitted before the member opens.
	tokens map[uint64]lease.Token
	// gone: groups removed from this server (ForgetGroup) and not opened
	// here since, with when they were last forgotten or asked for (admit).
	// A gone group's Voter is dropped by a sweep once idle; its entry stays
	// goneFor after that, so that a late vote, pre-vote or TimeoutNow of a
	// peer that still has the group (it has not learned of the removal, or
	// was removed too and still campaigns) leaves no state behind for good:
	// the Voter it makes is swept again once idle, and no token is stored
	// for a gone group. Only admit and forget sweep.
	//
	// The transport cannot tell such a group from one hosted here but
	// closed (a quiet range: t.groups holds open members only), whose
	// TimeoutNow token is stored before the member opens and whose Voter
	// lives as long as the process; hence the set of forgotten groups
	// rather than "not open here".
	gone map[uint64]time.Time
}

// goneFor is how long a gone group stays known as gone after its Voter
// was dropped and the last request for it was admitted: long enough for
// the late requests of peers that still count this server (raft retries a
// vote every election timeout, an RPC for at most the transport's timeout)
// to find it gone, short enough that a server that hosted many ranges over
// time keeps only the recent ones. It decides nothing: a gone group's
// requests are admitted as any other group's (see sweepLocked), so it
// costs only memory when long, and when short a Voter kept for good for a
// group whose stale peer asks again after it.
const goneFor = time.Minute

func newLeases(d time.Duration, started time.Time) *leases {
	if started.IsZero() {
		started = time.Now()
	}
	return &leases{d: d, started: started, now: time.Now, voters: map[uint64]*lease.Voter{}, tokens: map[uint64]lease.Token{}, gone: map[uint64]time.Time{}}
}

// forget drops the state of group, removed from this server, so that a
// server that hosted many ranges over time does not keep it for all of
// them. The token goes at once: without it the candidate's transfer votes
// are refused by promised followers, a liveness cost, never a lease
// broken. The Voter goes only once idle (lease.Voter.Idle): the group may
// come back here (the range re-added) within a promise's duration, while
// its leader still counts this server's last promise, and a Voter made
// afresh would admit the vote that breaks it. Until then, and goneFor
// after, the group is gone (leases.gone).
func (l *leases) forget(group uint64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.tokens, group)
	l.gone[group] = now
	l.sweepLocked(now)
}

// sweepLocked drops the Voters of gone groups that are idle at now, and
// the gone entries whose Voter is dropped and that are older than goneFor.
//
// Dropping an idle Voter is safe. Idle, it holds no promise a leader still
// counts, no admitted vote or TimeoutNow raft has not answered, and no
// open campaign window: a Voter made afresh later (the range re-added
// here) decides every request as it would (lease.Voter.Idle). What a fresh
// one lacks, the last append received and the highest vote admitted, only
// guards a raft member's own appends racing its own votes, and the member
// those came from is gone, its raft state dropped with its log (DropLog).
// A member re-added is a new one: it gives no promise on its first append
// (no append received before it), and every vote it takes is admitted,
// and recorded, by the new Voter. A move's re-added member has moreover a
// join floor (partitionserver/joinfloor.go): its gate answers itself,
// unsuccessfully, the appends and snapshots of leaders of terms below the
// floor's (a gate's answer carries no promise), and the votes of
// candidates whose log is behind the floor: it promises nothing to a
// leader that may predate its earlier removal, and votes for no candidate
// that missed that removal.
//
// A gone group's requests are admitted against its stored Voter, made
// afresh when dropped, as any group's, rather than decided against a zero
// Voter left unstored: the decision is the same (a fresh Voter admits
// what a zero one does; the start guard applies to both), but a vote or
// TimeoutNow admitted for a group re-added here and opened meanwhile
// (Dormant.Wake) must stay recorded (lease.Voter.Begin) until raft has
// answered it and past its campaign window, or the member could promise a
// leader while that vote is being answered. The entry in gone makes the
// Voter swept again once idle.
func (l *leases) sweepLocked(now time.Time) {
	for g, at := range l.gone {
		if v := l.voters[g]; v != nil {
			if !v.Idle(now) {
				continue
			}
			delete(l.voters, g)
		}
		if now.Sub(at) >= goneFor {
			delete(l.gone, g)
		}
	}
}

// revive keeps group's Voter from a sweep: the group is hosted here again
// (a member of it opened), and its Voter guards that member's appends
// against its votes (lease.Voter.Idle), idle or not.
func (l *leases) revive(group uint64) {
	l.mu.Lock()
	delete(l.gone, group)
	l.mu.Unlock()
}

func (l *leases) voter(group uint64) *lease.Voter {
	v := l.voters[group]
	if v == nil {
		v = &lease.Voter{}
		l.voters[group] = v
	}
	return v
}

// leaseRequest is the admission question msg asks, if any, and the term
// it asks in (0 for a TimeoutNow).
func leaseRequest(msg any, tok lease.Token) (lease.Request, uint64, bool) {
	switch m := msg.(type) {
	case *raft.RequestPreVoteRequest:
		return lease.Request{Kind: lease.PreVote, From: string(m.ID)}, m.Term, true
	case *raft.RequestVoteRequest:
		return lease.Request{Kind: lease.Vote, From: string(m.ID), Transfer: m.LeadershipTransfer, Token: tok}, m.Term, true
	case *raft.TimeoutNowRequest:
		return lease.Request{Kind: lease.TimeoutNow, From: string(m.ID), Token: tok}, 0, true
	}
	return lease.Request{}, 0, false
}

// refusal is the answer to a vote or pre-vote refused against a promise:
// not granted, in the candidate's own term, as raft itself counts a vote
// it could not get. An error would do the same, but raft logs every failed
// vote RPC at ERROR level. A TimeoutNow gets the error.
func refusal(msg any) any {
	switch m := msg.(type) {
	case *raft.RequestPreVoteRequest:
		return &raft.RequestPreVoteResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: m.Term}
	case *raft.RequestVoteRequest:
		return &raft.RequestVoteResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: m.Term}
	}
	return nil
}

// admit decides req (of term) for group; an admitted vote or TimeoutNow is
// pending (no promise given) until done.
func (l *leases) admit(group uint64, req lease.Request, term uint64) (pending bool, err error) {
	if l.d <= 0 {
		return false, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if len(l.gone) > 0 {
		if _, ok := l.gone[group]; ok {
			l.gone[group] = now // a peer still asks: keep the group known as gone
		}
		l.sweepLocked(now)
	}
	v := l.voter(group)
	if err := v.Admit(now, l.started, l.d, req); err != nil {
		leaseRefusalsTotal.WithLabelValues(kindLabel[req.Kind], reasonLabel(err)).Inc()
		return false, err
	}
	if req.Kind == lease.PreVote {
		return false, nil
	}
	v.Begin(req, term, now)
	return true, nil
}

func (l *leases) done(group uint64) {
	l.mu.Lock()
	l.voter(group).End()
	l.mu.Unlock()
}

// setToken records tok, of a TimeoutNow admitted for group. None is
// stored for a gone group (one removed from this server): nothing would
// drop it again. Its member, if the group was re-added here and opens for
// this TimeoutNow, campaigns without it, and promised followers refuse
// its transfer votes: a liveness cost, as forget's.
func (l *leases) setToken(group uint64, tok lease.Token) {
	l.mu.Lock()
	if _, gone := l.gone[group]; gone || tok == (lease.Token{}) {
		delete(l.tokens, group)
	} else {
		l.tokens[group] = tok
	}
	l.mu.Unlock()
}

func (l *leases) token(group uint64) lease.Token {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tokens[group]
}

// promisedAnswer reports whether raft's answer resp to msg, an append
// received at recv that raft itself answered, gets a promise. following
// is asked after raft answered: a member that is no longer a follower in
// the append's term (a candidate of a TimeoutNow still takes appends of
// its old term; a vote moves it to the candidate's) promises nothing.
func (l *leases) promisedAnswer(group uint64, msg, resp any, recv time.Time, following func(term uint64) bool) bool {
	ae, ok := msg.(*raft.AppendEntriesRequest)
	if !ok || l.d <= 0 {
		return false
	}
	r, ok := resp.(*raft.AppendEntriesResponse)
	if !ok || !r.Success || r.Term != ae.Term || following == nil || !following(ae.Term) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Fresh within d: at most half of raft's heartbeat timeout
	// (partitionserver's Config), as Promise requires.
	return l.voter(group).Promise(time.Now(), recv, string(ae.ID), ae.Term, l.d, l.d)
}

// groupLease is a leader's side of its lease (lease.Tracker), the
// transfer term its TimeoutNow carries, and whether its raft member
// follows (set by its owner; without it nothing is promised).
type groupLease struct {
	mu        sync.Mutex
	tracker   lease.Tracker
	transfer  uint64 // the term this member last started a transfer in
	following atomic.Pointer[func(term uint64) bool]
	// answered, while a leadership check waits for answers
	// (Group.VerifyLeader), is closed by the next one recorded.
	answered chan struct{}
}

// SetFollowing installs fn, which reports whether the group's raft member
// is a follower in term right now (raft.Raft.State() == raft.Follower and
// CurrentTerm() == term). A member's answers carry lease promises only
// with it installed.
func (g *Group) SetFollowing(fn func(term uint64) bool) { g.lease.following.Store(&fn) }

func (g *Group) following(term uint64) bool {
	fn := g.lease.following.Load()
	return fn != nil && *fn != nil && (*fn)(term)
}

// ack records peer's successful answer to an append of term sent at sent,
// with its promise of promised (0: none).
func (g *Group) ack(peer raft.ServerID, term uint64, sent time.Time, promised time.Duration) {
	g.lease.mu.Lock()
	g.lease.tracker.Answered(string(peer), term, sent)
	if promised > 0 {
		g.lease.tracker.Ack(string(peer), term, sent, promised, g.t.leases.d)
	}
	if g.lease.answered != nil {
		close(g.lease.answered)
		g.lease.answered = nil
	}
	g.lease.mu.Unlock()
}

// ErrUnconfirmed: a leadership check (Group.VerifyLeader) did not hear a
// quorum answer requests sent after it began within verifyWait.
var ErrUnconfirmed = errors.New("grouptransport: leadership not confirmed by answers sent after the check began")

// verifyWait bounds Group.VerifyLeader's further rounds once raft's own
// check passed on answers that predate it.
const verifyWait = 2 * time.Second

// VerifyLeader confirms, as raft's VerifyLeader, that r (this group's
// member self) still leads, but counts only voters' answers to requests
// sent after the call began. raft's check (hashicorp/raft v1.7.3,
// verifyLeader and replication.go's notifyAll) counts every success any
// replication goroutine reports once the check is registered: a
// non-voter's (a move's joiner: a leader cut off from its voters but not
// from it was confirmed, TestVerifyLeaderCountsVotersOnly), and the answer
// to a heartbeat or append sent, and answered, before the check began but
// handled after it (the leader's process stalled meanwhile), which
// confirms a leader that a transfer-flagged election (a hand-off, a woken
// range's campaign) deposed in between; a read then misses the new
// leader's acknowledged writes
// (TestVerifyLeaderIgnoresAnswersSentBeforeIt). So after raft's check
// passes, the answers the transport recorded (Tracker.HeardSince, recorded
// before raft sees them) must include a quorum's to requests sent after
// the start; until they do, raft's check runs again, which sends fresh
// heartbeats. A member that lost the lead or its term fails.
func (g *Group) VerifyLeader(r *raft.Raft, self raft.ServerID) error {
	start := time.Now()
	term := r.CurrentTerm()
	for {
		if err := r.VerifyLeader().Error(); err != nil {
			return err
		}
		if r.CurrentTerm() != term {
			return raft.ErrNotLeader
		}
		f := r.GetConfiguration()
		if err := f.Error(); err != nil {
			return err
		}
		var voters []string
		in := false
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters = append(voters, string(s.ID))
				in = in || s.ID == self
			}
		}
		if !in {
			return fmt.Errorf("%w: %s is not a voter of its configuration", ErrUnconfirmed, self)
		}
		// raft's check sent fresh heartbeats: their answers usually
		// arrive within a round trip, and are waited for here before
		// raft's check runs again (which sends more).
		again := time.Now().Add(verifyAnswerWait)
		for {
			g.lease.mu.Lock()
			ok := g.lease.tracker.HeardSince(start, term, string(self), voters)
			if !ok && g.lease.answered == nil {
				g.lease.answered = make(chan struct{})
			}
			answered := g.lease.answered
			g.lease.mu.Unlock()
			if ok {
				return nil
			}
			if time.Since(start) >= verifyWait {
				return ErrUnconfirmed
			}
			wait := time.Until(again)
			if wait <= 0 {
				break
			}
			t := time.NewTimer(wait)
			select {
			case <-answered:
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// verifyAnswerWait is how long Group.VerifyLeader waits for answers to
// requests sent after it began before it runs raft's check again.
const verifyAnswerWait = 20 * time.Millisecond

// LeaseHeld reports whether this member, self, leading term with voters
// (its latest configuration's), holds a read lease now (lease.Tracker.Held):
// then its commit index, read after this call, is a read index without a
// round of heartbeats. Always false when leases are off.
func (g *Group) LeaseHeld(term uint64, self string, voters []string) bool {
	if g.t.leases.d <= 0 {
		return false
	}
	now := time.Now()
	g.lease.mu.Lock()
	defer g.lease.mu.Unlock()
	return g.lease.tracker.Held(now, term, self, voters)
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

var (
	leaseRefusalsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "lease_refusals_total",
		Help: "Votes, pre-votes, TimeoutNows and campaigns refused against a read-lease promise (promised) or in the lease after the server started (starting).",
	}, []string{"request", "reason"})
	kindLabel = map[lease.Kind]string{lease.PreVote: "prevote", lease.Vote: "vote", lease.TimeoutNow: "timeoutnow"}
)

func init() { prometheus.MustRegister(leaseRefusalsTotal) }

func reasonLabel(err error) string {
	if errors.Is(err, lease.ErrStarting) {
		return "starting"
	}
	return "promised"
}
