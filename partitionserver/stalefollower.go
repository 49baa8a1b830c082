package partitionserver

import (
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// snapshotPastFollower returns the group transport's stale-install handler
// (grouptransport.Group.SetStaleInstall) for r: when a follower refuses
// appends right after installing r's snapshot because its log runs past
// that snapshot, r takes a new snapshot at its applied index, so the next
// install reaches past the follower's log and the replication resumes.
//
// Only once r has applied past the follower's last index: a snapshot short
// of it leaves the follower stuck the same way (and the refusal repeats,
// so the handler is asked again after the next install). One snapshot at
// a time; the refusals come every few tens of milliseconds while it runs.
func snapshotPastFollower(r *raft.Raft, logger *slog.Logger) func(peer raft.ServerID, installed, followerLast uint64) {
	var busy atomic.Bool
	return func(peer raft.ServerID, installed, followerLast uint64) {
		if r.State() != raft.Leader || r.AppliedIndex() <= followerLast || !busy.CompareAndSwap(false, true) {
			return
		}
		logger.Warn("a follower refuses appends after installing this member's snapshot, its log running past it: snapshotting past its log",
			"peer", peer, "snapshot_index", installed, "follower_last_index", followerLast, "applied_index", r.AppliedIndex())
		go func() {
			defer busy.Store(false)
			err := r.Snapshot().Error()
			if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && !errors.Is(err, raft.ErrRaftShutdown) {
				logger.Warn("snapshot for a follower past the last one failed", "peer", peer, "err", err)
			}
		}()
	}
}
