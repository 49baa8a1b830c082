package partitionserver

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// ErrVoterUnreached refuses a range change that every replica must apply
// (a merge's freeze) while the leader's server does not hear from a
// voter's.
var ErrVoterUnreached = errors.New("partitionserver: the range's leader does not reach a voter")

// freezeReachWait is how long a freeze waits to hear from every voter: a
// range just woken for it starts its heartbeats, answered within tens of
// milliseconds by a reachable follower.
const freezeReachWait = time.Second

// unheardVoter waits, up to wait, until this server has heard from the
// server of every other voter of r within window (an answer on a raft
// lane, in any group), and returns one it has not heard from, if any.
//
// A server may answer the master yet be out of its leader's reach (a
// one-way cut, a broken route between two servers): the master's
// pre-freeze question "does every replica answer?" cannot see that, and a
// freeze that a follower never receives held the range's writes until it
// did (chaos seeds 136 and 147, docs/reliability.md section 15); since the
// merge abort (section 16) it holds them for the master's bounded wait,
// still worth saving.
func (r *member) unheardVoter(ctx context.Context, wait, window time.Duration) (string, bool) {
	deadline := time.Now().Add(wait)
	for {
		if r.raft.State() != raft.Leader {
			// Not leading any more: the proposal that follows fails
			// with NOT_LEADER and its hint, which the master follows.
			return "", false
		}
		f := r.raft.GetConfiguration()
		if f.Error() != nil {
			return "", false
		}
		id, ok := firstUnheard(f.Configuration().Servers, r.serverID, func(s raft.Server) bool {
			return r.transport.HeardFrom(s.ID, s.Address, time.Now().Add(-window))
		})
		if !ok || time.Now().After(deadline) || ctx.Err() != nil {
			return id, ok
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firstUnheard returns the first voter other than self that heard says
// this server has not heard from.
func firstUnheard(servers []raft.Server, self string, heard func(raft.Server) bool) (string, bool) {
	for _, s := range servers {
		if s.Suffrage != raft.Voter || string(s.ID) == self {
			continue
		}
		if !heard(s) {
			return string(s.ID), true
		}
	}
	return "", false
}
