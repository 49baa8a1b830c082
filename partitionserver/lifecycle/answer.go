package lifecycle

// Mark is what a quiet replica remembers of its closed Raft member: its
// current term, its last log entry, and an index it knows to be applied
// (the QUIESCE marker's).
type Mark struct {
	Term, LastIndex, LastTerm, Applied uint64
}

// Append is the part of an AppendEntries request Answer looks at.
type Append struct {
	Term, PrevLogEntry, PrevLogTerm, LeaderCommit uint64
	Entries                                       int
	// First and Last are the indexes of the first and last entry, LastTerm
	// the last one's term. Plain: the entries are contiguous, their terms
	// never decrease, and each is a command, a no-op or a barrier (no
	// configuration change: the voters a quiet member recorded stay its
	// voters).
	First, Last, LastTerm uint64
	Plain                 bool
}

// Vote is the part of a RequestVote Answer looks at. Voter: the candidate
// is a voter of the configuration the member recorded when it closed.
type Vote struct {
	Term, LastLogIndex, LastLogTerm uint64
	Voter                           bool
}

// Voted is the mark after granting a vote in term.
func (m Mark) Voted(term uint64) Mark {
	m.Term = term
	return m
}

// Unsettled reports a mark that a closed vote or store moved past what
// the member applied: a vote in a term it holds no entry of, or entries
// after its applied index. A mark recorded at a close is settled: the
// member closed at its QUIESCE marker, applied, in its leader's term.
func (m Mark) Unsettled() bool { return m.Term != m.LastTerm || m.LastIndex > m.Applied }

// Stored is the mark after storing a's entries.
func (m Mark) Stored(a Append) Mark {
	m.LastIndex, m.LastTerm = a.Last, a.LastTerm
	return m
}

// Reply is Answer's verdict.
type Reply int

// The verdicts.
const (
	// Wake: open the group and deliver the request to it.
	Wake Reply = iota
	// Ack: answer success with the mark's term and last index, as the
	// closed member would: it is a follower of that term that holds
	// everything the leader asks about.
	Ack
	// Deny: answer "not granted" with the mark's term.
	Deny
	// Grant: durably record the vote (the candidate's term as the current
	// term and the vote, one write) and answer "granted", staying closed.
	Grant
	// Store: durably append the entries after the mark's last entry and
	// answer success, staying closed.
	Store
)

// AnswerPreVote decides how a quiet replica answers a pre-vote from a
// candidate whose log ends at candidateLast. A candidate that missed only
// the QUIESCE marker (its log ends at the marker or just before it) timed
// out after the others closed: it is refused, as a follower that still has
// a leader refuses, because granting would lead to a real election that
// opens every member again, and again each time the range goes quiet.
// Refusing a pre-vote is always safe (it decides nothing), and liveness
// comes from requests: a request to the range opens a member that
// campaigns without a pre-vote (TimeoutNow), whose RequestVote opens this
// one. A candidate further behind (a member that was down or cut off and
// came back after the range went quiet) cannot catch up while every
// up-to-date member is closed, and nobody would ever send it the entries
// it lacks (or the split those entries carry): this member wakes, times
// out as a follower with no leader and, its log being the longer, wins the
// election and replicates to the candidate.
func AnswerPreVote(m Mark, candidateLast uint64) Reply {
	if candidateLast+1 < m.LastIndex {
		return Wake
	}
	return Deny
}

// Answer decides how a quiet replica answers an AppendEntries (heartbeats
// included). The leader that committed the QUIESCE marker keeps
// heartbeating (and propagating its commit index) until it closes too;
// opening every follower again for that would undo the quiesce. A
// follower of the same term whose log ends where the leader believes it
// does, and that applied whatever the leader has committed, answers those
// requests identically whether its member runs or not.
//
// Entries that extend the log exactly at its end, from the leader of the
// member's current term, are stored without opening (Store): that is all
// a running follower would do with them before answering (it applies them
// later, once it learns they are committed, and an opened member learns
// that from the leader). This takes the followers' open off the path of
// the first write to a quiet range: its leader opens and campaigns, the
// others vote (AnswerVote) and store its entries closed, and open when the
// leader's commit index passes what they applied (the leader's commit tick, after the
// write was answered). Not for a member with nothing applied (it may be
// the empty member of a split-born range that must take a snapshot first)
// or a configuration change.
//
// Anything else (a newer term, a commit index past what it applied, a log
// it may not hold, entries after a gap or overwriting its own) needs the
// real member.
func Answer(m Mark, a Append) Reply {
	if a.Term != m.Term {
		return Wake
	}
	if a.Entries > 0 {
		if a.Plain && m.LastIndex > 0 && m.Applied > 0 && a.PrevLogEntry == m.LastIndex && a.PrevLogTerm == m.LastTerm &&
			a.First == m.LastIndex+1 && a.Last == a.First+uint64(a.Entries)-1 && a.LastTerm >= m.LastTerm && a.LastTerm <= a.Term {
			return Store
		}
		return Wake
	}
	if a.LeaderCommit > m.Applied {
		return Wake
	}
	heartbeat := a.PrevLogEntry == 0 && a.PrevLogTerm == 0 && a.LeaderCommit == 0
	if heartbeat || (a.PrevLogEntry == m.LastIndex && a.PrevLogTerm == m.LastTerm) {
		return Ack
	}
	return Wake
}

// AnswerVote decides how a quiet replica answers a RequestVote: it grants
// it, without opening, exactly when Raft requires a running member to:
// the candidate is a voter, asks for a term after the member's current
// one (so the member has not voted in it), and its log is at least as up
// to date as the member's. Any other case (a vote in the current term, a
// refusal, which still moves the member's term) is left to the real
// member. Granting closed is what makes the first write to a quiet range
// cheap: the candidate (the member a request opened) wins with one
// durable write on the others instead of opening them (AnswerPreVote says
// why other candidates rarely get this far).
func AnswerVote(m Mark, v Vote) Reply {
	if m.LastIndex == 0 || !v.Voter || v.Term <= m.Term {
		return Wake
	}
	if v.LastLogTerm < m.LastTerm || (v.LastLogTerm == m.LastTerm && v.LastLogIndex < m.LastIndex) {
		return Wake
	}
	return Grant
}
