package grouptransport

import (
	"sync"

	"github.com/hashicorp/raft"
)

// commitAcks is, per follower, the highest index a successful append of
// this member told it was committed while its log held that index: the
// append's commit index, but no further than the entries the follower
// matched (its previous entry plus those it carried), as a follower
// commits no further than its own last entry. Heartbeats carry no commit
// index and count for nothing.
type commitAcks struct {
	mu sync.Mutex
	m  map[raft.ServerID]uint64
}

func (c *commitAcks) note(id raft.ServerID, args *raft.AppendEntriesRequest) {
	known := min(args.LeaderCommitIndex, args.PrevLogEntry+uint64(len(args.Entries)))
	if known == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[raft.ServerID]uint64{}
	}
	if known > c.m[id] {
		c.m[id] = known
	}
}

// CommitKnown reports whether follower id acknowledged an append of this
// member that told it index is committed, with index in its log: it
// then applies index without hearing from this member again. A leader
// about to stop replicating (a range going quiet at a QUIESCE marker) asks
// this of every voter first: one that never learned the marker's commit
// stays open, without a leader, until a request wakes the range.
func (g *Group) CommitKnown(id raft.ServerID, index uint64) bool {
	g.commits.mu.Lock()
	defer g.commits.mu.Unlock()
	return g.commits.m[id] >= index
}
