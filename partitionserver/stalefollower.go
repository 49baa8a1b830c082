package partitionserver

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// snapshotPastFollower returns the group transport's stuck-follower
// handler (grouptransport.Group.SetStuckFollower) for r, whose reloadable
// config mu guards: when a follower refuses every append because its log
// holds a stale tail r cannot replace, r snapshots at its applied index
// and drops its log up to it, so its next install reaches past the
// follower's log and the replication resumes.
//
// Only once r has applied past the follower's last index: a snapshot short
// of it leaves the follower stuck the same way (the refusals repeat, so
// the handler is asked again). One snapshot at a time; the refusals come
// every few tens of milliseconds while it runs.
func snapshotPastFollower(r *raft.Raft, mu *sync.Mutex, logger *slog.Logger) func(peer raft.ServerID, followerLast uint64) {
	var busy atomic.Bool
	return func(peer raft.ServerID, followerLast uint64) {
		if r.State() != raft.Leader || r.AppliedIndex() <= followerLast || !busy.CompareAndSwap(false, true) {
			return
		}
		logger.Warn("a follower refuses every append, its log holding a stale tail: snapshotting past it",
			"peer", peer, "follower_last_index", followerLast, "applied_index", r.AppliedIndex())
		go func() {
			defer busy.Store(false)
			if err := snapshotAll(r, mu); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
				logger.Warn("snapshot past a stuck follower failed", "peer", peer, "err", err)
			}
		}()
	}
}
