package partitionserver

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// Follower reads serve the read-access secondary endpoint: any replica
// answers from its applied state at once, without confirming leadership or
// waiting for the leader, and says how current that state is.

// syncWait bounds how long a follower read waits for the replica's apply
// to reach the commit index it has heard of before it reports its sync
// time as unknown. Right after writes a follower's apply trails its
// commit index by a few entries (raft sets the commit index, then hands
// the entries to the state machine) for a few ms; answering "unknown" then
// left Get Service Stats without a LastSyncTime (session 8,
// docs/reliability.md). A replica still catching up after a restart or a
// snapshot stays behind for longer: its reads do not wait for all of that.
const syncWait = 250 * time.Millisecond

// syncPoint is the time up to which this replica's state machine will
// hold every committed write once it has applied index: now on the
// leader; on a follower the leader's last contact (its commit index came
// with that contact, or before it); zero on a follower that has never
// heard from a leader, since its state is older by an unknown amount.
// The time is read before the commit index: a contact in between brings
// a later commit index, never an earlier one, so the pair errs on the old
// side.
func (r *replica) syncPoint(now time.Time) (time.Time, uint64) {
	var t time.Time
	if r.raft.State() == raft.Leader {
		t = now
	} else {
		t = r.raft.LastContact()
	}
	return t, r.raft.CommitIndex()
}

// readCheck prepares a read: a follower read returns the replica's sync
// time (Unix nanoseconds, 0 if unknown) once the state file holds every
// entry up to the commit index that time vouches for (applied entries
// wait up to the state file's group-commit interval otherwise, and the
// sync time would claim writes the read cannot see). The wait is bounded
// by syncWait (and the read's context): a replica that cannot catch up by
// then serves the read from what raft has applied and reports 0. Any other
// read must be linearizable.
func (r *replica) readCheck(ctx context.Context, followerRead bool, linearizable func() error) (int64, error) {
	if !followerRead {
		return 0, linearizable()
	}
	t, commit := r.syncPoint(time.Now())
	if t.IsZero() {
		return 0, nil
	}
	wctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	err := r.waitApplied(wctx, max(commit, r.raft.AppliedIndex()))
	if err == nil {
		return t.UnixNano(), nil
	}
	if ctx.Err() != nil {
		return 0, err
	}
	// Still applying after syncWait: the read sees what raft has applied
	// (as any follower read), its time unknown.
	if err := r.waitApplied(ctx, r.raft.AppliedIndex()); err != nil {
		return 0, err
	}
	return 0, nil
}
