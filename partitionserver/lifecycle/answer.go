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
// requests identically whether its member runs or not. Anything else
// (entries to append, a newer term, a commit index past what it applied, a
// log it may not hold) needs the real member.
func Answer(m Mark, a Append) Reply {
	if a.Term != m.Term || a.Entries > 0 || a.LeaderCommit > m.Applied {
		return Wake
	}
	heartbeat := a.PrevLogEntry == 0 && a.PrevLogTerm == 0 && a.LeaderCommit == 0
	if heartbeat || (a.PrevLogEntry == m.LastIndex && a.PrevLogTerm == m.LastTerm) {
		return Ack
	}
	return Wake
}
