package partitionserver

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// Follower reads serve the read-access secondary endpoint: any replica
// answers from its applied state at once, without confirming leadership or
// waiting for the leader, and says how current that state is.

// syncedAt is the time up to which this replica's state machine holds every
// committed write: now on the leader; on a follower that has applied all it
// knows to be committed, the leader's last contact (its commit index came
// with that contact); zero while a follower is still applying, or has never
// heard from a leader, since then its state is older by an unknown amount.
func (r *replica) syncedAt(now time.Time) time.Time {
	if r.raft.State() == raft.Leader {
		return now
	}
	if r.raft.AppliedIndex() < r.raft.CommitIndex() {
		return time.Time{}
	}
	return r.raft.LastContact()
}

// readCheck prepares a read: a follower read returns the replica's sync
// time (Unix nanoseconds, 0 if unknown) once the state file holds what raft
// has handed to the state machine (applied entries wait up to the state
// file's group-commit interval otherwise, and the sync time would claim
// writes the read cannot see); any other read must be linearizable.
func (r *replica) readCheck(ctx context.Context, followerRead bool, linearizable func() error) (int64, error) {
	if !followerRead {
		return 0, linearizable()
	}
	t := r.syncedAt(time.Now())
	if t.IsZero() {
		return 0, nil
	}
	// Read after syncedAt: at least the commit index that t vouches for.
	if err := r.waitApplied(ctx, r.raft.AppliedIndex()); err != nil {
		return 0, err
	}
	return t.UnixNano(), nil
}
