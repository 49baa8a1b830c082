// Package lease decides read leases of range leaders: when a leader may
// answer a linearizable read without a round of heartbeats (raft's
// VerifyLeader), and what a follower must refuse meanwhile.
//
// hashicorp/raft has no leases, and its followers' "we have a leader"
// refusal is not one: a restarted member, a member closed by quiescence and
// answered for by the server (dormant), and any candidate with the
// leadership-transfer flag (a TimeoutNow, or the server's own Campaign
// when a request wakes a quiet range) are granted votes whatever the
// follower heard last. So the promise is explicit, in the shape of etcd's
// lease-based reads with check-quorum and of CockroachDB's leader leases:
//
//   - A follower answering a leader's AppendEntries with success promises
//     (Voter.Promise), for Duration from its answer, not to let another
//     member be elected: its server refuses (Voter.Admit) every vote,
//     pre-vote, TimeoutNow and own campaign that could elect one. The one
//     exception is a transfer the promised leader started: its TimeoutNow
//     carries the leader's term, the candidate hands that token on in its
//     votes, and a follower promised to that leader in that term admits it.
//   - The answer says it carries a promise; the leader records when it sent
//     each answered request (Tracker.Ack). While the requests of a quorum
//     of the current voters (itself included) were sent less than
//     LeaderShare of Duration ago, no other member can have been elected,
//     so nothing can have committed outside this leader's log: the leader's
//     commit index, read after the check, is a read index (Tracker.Held).
//   - A leader gives its lease up for good in a term in which it starts a
//     transfer or quiesces the range (Tracker.Disable): both end its term
//     by design, and their followers let another member be elected.
//   - A server does not admit a vote for Duration after it starts (its
//     promises died with the process) and a follower does not promise while
//     a vote or TimeoutNow it admitted is unanswered, or when it has not
//     heard from a leader for long enough that raft may be starting an
//     election in parallel.
//
// Everything here is a pure function of its inputs (times, terms, member
// names); the transport and the replica gather them and act.
package lease
