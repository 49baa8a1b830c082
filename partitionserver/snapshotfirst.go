package partitionserver

import (
	"errors"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// errAwaitingSnapshot answers log entries sent to an empty member of a
// split-born range before it has a snapshot.
var errAwaitingSnapshot = errors.New("partitionserver: empty member of a split-born range takes a snapshot before log entries")

// snapshotFirst returns the transport gate of a member that joins a
// split-born range empty (it was down across the split and caught its
// parent up by a snapshot taken after it, so the registry created it
// empty), or nil when the member needs none.
//
// A range born from a split holds rows its own log never carried: they
// came with the split, through the parent's log. Its members drop that
// birth log a few seconds after the split (compactBirthLog), after which a
// joiner can only get a snapshot. Within those seconds a leader would
// replay the log from index 1, and the joiner would reach the others'
// applied index without the rows from before the split: acknowledged
// writes missing on that replica, lost for good if it later leads (chaos
// seeds 27 and 51). The gate refuses log entries until a snapshot is
// installed; the leader backs off and, once its birth log is compacted,
// sends the snapshot. Heartbeats, votes and the snapshot itself pass.
func snapshotFirst(generation, applied uint64, bootstrap bool, logs raft.LogStore, snaps raft.SnapshotStore) (func(any) error, error) {
	if bootstrap || generation <= 1 || applied > 0 {
		return nil, nil
	}
	last, err := logs.LastIndex()
	if err != nil {
		return nil, err
	}
	if last > 0 {
		return nil, nil
	}
	if list, err := snaps.List(); err != nil {
		return nil, err
	} else if len(list) > 0 {
		return nil, nil
	}
	var done atomic.Bool
	return func(msg any) error {
		ae, ok := msg.(*raft.AppendEntriesRequest)
		if !ok || len(ae.Entries) == 0 || done.Load() {
			return nil
		}
		if list, err := snaps.List(); err == nil && len(list) > 0 {
			done.Store(true)
			return nil
		}
		return errAwaitingSnapshot
	}, nil
}
