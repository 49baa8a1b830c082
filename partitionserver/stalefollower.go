package partitionserver

import (
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// stuckSnapshotEvery spaces the handler's snapshots of one range: a
// follower whose log writes keep failing after each install would
// otherwise cost its leader a snapshot per replication round.
const stuckSnapshotEvery = time.Second

// snapshotPastFollower returns the group transport's stuck-follower
// handler (grouptransport.Group.SetStuckFollower) for r, whose reloadable
// config mu guards: when a follower refuses every append because its log
// holds a stale tail r cannot replace, r snapshots at its applied index
// and drops its log up to it, so its next install reaches past the
// follower's log and the replication resumes.
//
// Only once r has applied past the follower's last index: a snapshot short
// of it leaves the follower stuck the same way (the refusals repeat, so
// the handler is asked again). One snapshot at a time, at most one per
// stuckSnapshotEvery, and none while r's newest snapshot already lies past
// the follower's log (an install of the older one was on its way when the
// snapshot was taken: the next install is the new one).
func snapshotPastFollower(r *raft.Raft, mu *sync.Mutex, logger *slog.Logger) func(peer raft.ServerID, followerLast uint64) {
	var busy atomic.Bool
	var last atomic.Int64 // unix nanoseconds of the last snapshot started
	return func(peer raft.ServerID, followerLast uint64) {
		if r.State() != raft.Leader || r.AppliedIndex() <= followerLast {
			return
		}
		if time.Since(time.Unix(0, last.Load())) < stuckSnapshotEvery {
			return
		}
		if snap, err := strconv.ParseUint(r.Stats()["last_snapshot_index"], 10, 64); err == nil && snap > followerLast {
			return
		}
		if !busy.CompareAndSwap(false, true) {
			return
		}
		last.Store(time.Now().UnixNano())
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
