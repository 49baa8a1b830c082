package partitionserver

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// snapshotFirst returns the transport gate of a member that joins a
// split-born range empty (it was down across the split and caught its
// parent up by a snapshot taken after it, so the registry created it
// empty; or a move added it), or nil when the member needs none.
//
// A range born from a split holds rows its own log never carried: they
// came with the split, through the parent's log. Its members drop that
// birth log a few seconds after the split (compactBirthLog), after which a
// joiner can only get a snapshot. Within those seconds a leader would
// replay the log from index 1, and the joiner would reach the others'
// applied index without the rows from before the split: acknowledged
// writes missing on that replica, lost for good if it later leads (chaos
// seeds 27 and 51). The gate rejects log entries until a snapshot is
// installed. Heartbeats, votes and the snapshot itself pass.
//
// The rejection is a refused AppendEntries saying the member's log is
// empty, not a failed RPC: on a failed RPC raft backs off and resends the
// same entries, forever, so a joiner first sent entries past its (empty)
// log never got the snapshot it needs (a move adds its voter after
// compacting, and a write landing between the two made the first request
// carry entries: the joiner stayed empty until the next compaction, the
// range ran a replica short, and a leadership transfer to it timed out).
// Told the log is empty, the leader steps back to index 1: it sends the
// snapshot once the birth log is compacted, and until then backs off on
// each rejection.
//
// Raft's backoff doubles with every rejection (10 ms up to 10.24 s), so a
// joiner refused for the birth log's 3 s waited up to 2.6 s more after the
// compaction for its snapshot, longer the earlier it was created (the
// cluster test of chaos seed 299's heal: caught up 5.2 s after the heal,
// 2.3 s after the compaction). So at most every gateRetryEvery a rejection
// says NoRetryBackoff, which resets the leader's count: it retries at
// once, then backs off anew, and never waits more than about
// gateRetryEvery/2 between tries (about 14 requests a second, for the
// birth log's few seconds). Only for gateFreeFor after the first
// rejection: a joiner whose snapshot does not come for another reason
// (the leader cannot send one) must not draw 14 requests a second for
// ever; raft's own backoff takes over then.
func snapshotFirst(generation, applied uint64, bootstrap bool, logs raft.LogStore, snaps raft.SnapshotStore) (func(any) (any, error), error) {
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
	var pace gatePace
	return func(msg any) (any, error) {
		ae, ok := msg.(*raft.AppendEntriesRequest)
		if !ok || len(ae.Entries) == 0 || done.Load() {
			return nil, nil
		}
		if list, err := snaps.List(); err == nil && len(list) > 0 {
			done.Store(true)
			return nil, nil
		}
		// The request's own term: a member that has not seen it yet would
		// adopt it, and a leader steps down only on a newer one.
		free := pace.free(time.Now())
		return &raft.AppendEntriesResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: ae.Term, LastLog: 0, Success: false, NoRetryBackoff: free}, nil
	}, nil
}

// gateRetryEvery is how often a snapshotFirst rejection lets the leader
// retry without its backoff; gateFreeFor is for how long after the first
// rejection (the birth log is compacted 3 s after the split,
// birthCompactionDelay).
const (
	gateRetryEvery = 500 * time.Millisecond
	gateFreeFor    = 10 * time.Second
)

// gatePace decides which snapshotFirst rejections reset the leader's
// backoff (NoRetryBackoff): at most one every gateRetryEvery, and none
// from gateFreeFor after the first rejection.
type gatePace struct {
	mu          sync.Mutex
	first, last time.Time
}

func (p *gatePace) free(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.first.IsZero() {
		p.first = now
	}
	if now.Sub(p.first) >= gateFreeFor || (!p.last.IsZero() && now.Sub(p.last) < gateRetryEvery) {
		return false
	}
	p.last = now
	return true
}
