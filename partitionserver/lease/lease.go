package lease

import (
	"errors"
	"time"
)

// Refusals a follower answers instead of letting raft see a request.
var (
	// ErrStarting: the server started less than a lease ago, and may have
	// promised a leader before it stopped.
	ErrStarting = errors.New("lease: server started less than a lease duration ago")
	// ErrPromised: the follower promised another leader not to let anyone
	// else be elected, and the promise has not run out.
	ErrPromised = errors.New("lease: promised to the current leader")
)

// LeaderShare is the part of a promise's Duration its leader counts on.
// The rest covers clocks that run at different rates on two machines, and
// is measured from the leader's send, before the follower's answer.
const LeaderShare = 0.8

// Token names a leader and a term: what a follower promised, and what a
// transfer's TimeoutNow carries from its leader to the candidate.
type Token struct {
	Leader string
	Term   uint64
}

// Kind is the kind of request a follower admits.
type Kind int

// The requests that can elect a member.
const (
	PreVote Kind = iota
	Vote
	// TimeoutNow makes its receiver campaign with the transfer flag: a
	// leader's transfer, or the server's own Campaign (From "", no token).
	TimeoutNow
)

// Request is what Admit decides on.
type Request struct {
	Kind Kind
	// From is the candidate (votes) or the TimeoutNow's sender ("" for the
	// server's own Campaign).
	From string
	// Transfer is a vote's leadership-transfer flag.
	Transfer bool
	// Token is the transfer token: for a vote with Transfer, the one its
	// candidate was handed by a TimeoutNow; for a TimeoutNow, its sender
	// and the term it started the transfer in.
	Token Token
}

// Voter is one group's follower side: its promise, and what it needs to
// give one safely. The zero value has promised nothing. Not safe for
// concurrent use.
type Voter struct {
	promise  Token
	until    time.Time // the promise's end; zero: none
	lastOK   time.Time // the last successful append received, promised or not
	pending  int       // admitted votes and TimeoutNows raft has not answered
	voted    uint64    // the highest term of an admitted vote
	campaign time.Time // when a TimeoutNow (or Campaign) was last admitted
}

// CampaignWindow is how long after admitting a TimeoutNow a follower
// promises nothing: the campaign it starts moves the member to a term the
// transport cannot see, and ends (won, lost or timed out) within two of
// raft's election timeouts, well inside this.
const CampaignWindow = 3 * time.Second

// Admit decides whether req may reach raft (or the server's answer for a
// closed member) at now, for a server that started at started, with
// promises of Duration d. nil admits; an admitted Vote or TimeoutNow must
// be bracketed by Begin and End.
func (v *Voter) Admit(now, started time.Time, d time.Duration, req Request) error {
	if now.Sub(started) < d {
		return ErrStarting
	}
	if !now.Before(v.until) {
		return nil
	}
	p := v.promise
	switch req.Kind {
	case PreVote, Vote:
		// The promised leader campaigning no longer leads.
		if req.From != "" && req.From == p.Leader {
			return nil
		}
		if req.Kind == Vote && req.Transfer && req.Token == p {
			return nil
		}
	case TimeoutNow:
		if req.From != "" && req.From == p.Leader && req.Token == p {
			return nil
		}
	}
	return ErrPromised
}

// Begin records an admitted Vote (of term) or TimeoutNow at now: no
// promise is given until raft has answered it (End), since its answer may
// elect another member; after it, none to an older term than the vote's
// (raft may answer an append of that term before it sees the vote, and the
// promise be recorded after the vote's answer), and none for
// CampaignWindow after a TimeoutNow.
func (v *Voter) Begin(req Request, term uint64, now time.Time) {
	v.pending++
	switch req.Kind {
	case Vote:
		v.voted = max(v.voted, term)
	case TimeoutNow:
		v.campaign = now
	}
}

// End records raft's answer to a request Begin recorded.
func (v *Voter) End() {
	if v.pending > 0 {
		v.pending--
	}
}

// Idle reports whether, from now on, v decides no request and no promise
// more permissively than a Voter that promised nothing: its promise has run
// out, no vote or TimeoutNow it admitted is unanswered, and no campaign
// window is open. What else it holds (the last append received, the
// highest vote admitted) only makes it refuse more, and guards a raft
// member against its own appends racing its votes: once that member is
// gone for good, its raft state dropped with it, forgetting an idle Voter
// gives up nothing a promise relies on (a Voter made afresh gives no
// promise on its first append).
func (v *Voter) Idle(now time.Time) bool {
	return !now.Before(v.until) && v.pending == 0 &&
		(v.campaign.IsZero() || now.Sub(v.campaign) >= CampaignWindow)
}

// Promise records that raft answered, with success, leader's append of
// term received at recv, and reports whether the answer, given at now,
// carries a promise of Duration d. It does not when a vote or TimeoutNow
// is pending, nor when the last successful append was received more than
// fresh before now (or there was none): raft may be turning the member
// into a candidate right now, on the silence before this append, and must
// not do so behind a promise. Receipt times, taken before raft sees an
// append, are never later than raft's own contact time for it, however
// long the process stalls in between: a candidacy on the silence before
// this append needs its raft heartbeat timeout since that time, and fresh
// must stay below it. The caller also checks, after raft answered, that
// the member is a follower.
func (v *Voter) Promise(now, recv time.Time, leader string, term uint64, d, fresh time.Duration) bool {
	prev := v.lastOK
	if recv.After(v.lastOK) {
		v.lastOK = recv
	}
	if leader == "" || v.pending > 0 || prev.IsZero() || now.Sub(prev) > fresh || term < v.voted {
		return false
	}
	if !v.campaign.IsZero() && now.Sub(v.campaign) < CampaignWindow {
		return false
	}
	if term < v.promise.Term && now.Before(v.until) {
		return false // raft answers no older term with success
	}
	v.promise, v.until = Token{Leader: leader, Term: term}, now.Add(d)
	return true
}

// Tracker is one leader's side: until when each follower's last promised
// answer counts, and when the last request each follower answered with
// success was sent. The zero value holds no lease. Not safe for concurrent
// use.
type Tracker struct {
	term     uint64
	acks     map[string]time.Time // the end of what each follower's promise is counted for
	heard    map[string]time.Time // the send time of each follower's last successful answer
	disabled uint64               // terms up to this hold no lease
}

// at makes term the tracked one: false for an older term (its answers
// count for nothing), and a newer one forgets the older one's answers.
func (t *Tracker) at(term uint64) bool {
	if term < t.term || term == 0 {
		return false
	}
	if term > t.term || t.acks == nil {
		t.term = term
		t.acks = make(map[string]time.Time, 4)
		t.heard = make(map[string]time.Time, 4)
	}
	return true
}

// Ack records that peer answered, with a promise of promised, an append of
// term this leader sent at sent; the leader counts it for LeaderShare of
// the shorter of promised and its own d (a follower configured with a
// shorter lease promises less).
func (t *Tracker) Ack(peer string, term uint64, sent time.Time, promised, d time.Duration) {
	if promised <= 0 || d <= 0 || !t.at(term) {
		return
	}
	end := sent.Add(time.Duration(float64(min(promised, d)) * LeaderShare))
	if end.After(t.acks[peer]) {
		t.acks[peer] = end
	}
}

// Answered records that peer answered with success, promised or not, an
// append of term this leader sent at sent (HeardSince).
func (t *Tracker) Answered(peer string, term uint64, sent time.Time) {
	if !t.at(term) {
		return
	}
	if sent.After(t.heard[peer]) {
		t.heard[peer] = sent
	}
}

// HeardSince reports whether a quorum of voters (the latest
// configuration's), self among them, answered with success in term
// requests self sent at or after since: each of them then followed self
// in term after since, so no leader of a later term could be elected
// before since. A leadership check counts only such answers. A leader
// outside its latest configuration (removing itself) is never confirmed,
// as it never holds a lease (Held); raft's VerifyLeader counts it anyway,
// which confirms the leader of a single-voter configuration it left.
func (t *Tracker) HeardSince(since time.Time, term uint64, self string, voters []string) bool {
	if term == 0 {
		return false
	}
	heard := t.heard
	if term != t.term {
		heard = nil // nothing heard in term (a single voter hears nothing)
	}
	n, in := 0, false
	for _, v := range voters {
		if v == self {
			in = true
			n++
			continue
		}
		if sent, ok := heard[v]; ok && !sent.Before(since) {
			n++
		}
	}
	return in && n > len(voters)/2
}

// Disable gives up the lease in every term up to term, for good: the
// leader started a transfer or proposed a quiescence in it.
func (t *Tracker) Disable(term uint64) { t.disabled = max(t.disabled, term) }

// Held reports whether self, leading term with voters (the latest
// configuration's), holds its lease at now: a quorum of voters, itself
// among them, promised on requests whose counted time has not run out.
func (t *Tracker) Held(now time.Time, term uint64, self string, voters []string) bool {
	if term == 0 || term != t.term || term <= t.disabled {
		return false
	}
	n, in := 0, false
	for _, v := range voters {
		if v == self {
			in = true
			n++
			continue
		}
		if end, ok := t.acks[v]; ok && now.Before(end) {
			n++
		}
	}
	return in && n > len(voters)/2
}
