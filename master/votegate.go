package master

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// A master that starts with no Raft state cannot tell a first start from a
// restart whose data directory was lost. In the second case it may have
// acknowledged entries before the loss, and granting its vote to a
// candidate that lacks them lets that candidate lead without them: three
// masters, B down, an entry committed on A and C; all stop; C's disk is
// lost; B and C start, C votes for B, and B's leadership overwrites the
// entry on A when A returns. Raft's safety assumes a voter never forgets.
//
// The rule (refuseVote): until such a master holds an entry beyond the
// bootstrap configuration (index 1), received from a leader elected
// without it, it grants no vote (nor pre-vote) to a candidate whose log
// goes past index 1. A first start of a whole group still elects (every
// candidate's log is the bootstrap entry alone); a lost master back among
// a live majority catches up from their leader and then votes as any
// member; with a majority's disks lost no rule can help. Left: a
// candidate that itself holds nothing past the bootstrap entry (it stopped
// before the first leader's entries reached it) looks like a first
// start's and gets the vote; with the only master that kept the entries
// down, nothing alive knows the group ever moved on. It is the master
// group's form of the partition servers' join floor (docs/reliability.md
// section 19), which the master, not the member, decides for ranges.

// refuseVote reports whether a master that started empty answers a vote
// request with a refusal: it holds nothing past the bootstrap entry (own
// is its last log or snapshot index), and the candidate's log goes
// further. (A master that did not start empty never asks: voteGate.)
func refuseVote(own, candidateLast uint64) bool {
	return own <= 1 && candidateLast > 1
}

// voteGate is the master's Raft transport with refuseVote applied to the
// vote and pre-vote requests it delivers to raft. Embedding the concrete
// transport keeps raft's optional interfaces (pre-vote, close) working.
type voteGate struct {
	*raft.NetworkTransport
	rpcs chan raft.RPC
	// lastIndex is the master's last log or snapshot index (not raft's
	// own view: raft is created after its transport, and reading it from
	// here would race with its creation).
	lastIndex func() uint64
	// caughtUp: the master held an entry past the bootstrap one once; the
	// rule no longer applies (a log never shrinks back to it).
	caughtUp atomic.Bool
	onRefuse func(candidate raft.ServerAddress, candidateLast uint64)
	id       raft.ServerID
	done     chan struct{}
	once     sync.Once
}

// newVoteGate starts forwarding t's RPCs; for a master that did not start
// empty it forwards every RPC unchanged.
func newVoteGate(t *raft.NetworkTransport, id raft.ServerID, amnesiac bool, lastIndex func() uint64, onRefuse func(raft.ServerAddress, uint64)) *voteGate {
	g := &voteGate{NetworkTransport: t, id: id, rpcs: make(chan raft.RPC), lastIndex: lastIndex, onRefuse: onRefuse, done: make(chan struct{})}
	g.caughtUp.Store(!amnesiac)
	go g.forward()
	return g
}

// Consumer is the channel raft reads its RPCs from.
func (g *voteGate) Consumer() <-chan raft.RPC { return g.rpcs }

// Close stops forwarding and closes the transport.
func (g *voteGate) Close() error {
	g.once.Do(func() { close(g.done) })
	return g.NetworkTransport.Close()
}

func (g *voteGate) forward() {
	in := g.NetworkTransport.Consumer()
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-g.done:
			return
		}
		if g.refused(rpc) {
			continue
		}
		select {
		case g.rpcs <- rpc:
		case <-g.done:
			return
		}
	}
}

// refused answers rpc with a refusal when the rule applies and reports
// whether it did.
func (g *voteGate) refused(rpc raft.RPC) bool {
	if g.caughtUp.Load() {
		return false
	}
	var term, last uint64
	var addr []byte
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		term, last, addr = req.Term, req.LastLogIndex, req.Addr
	case *raft.RequestPreVoteRequest:
		term, last, addr = req.Term, req.LastLogIndex, req.Addr
	default:
		return false
	}
	own := g.lastIndex()
	if own > 1 {
		g.caughtUp.Store(true)
		return false
	}
	if !refuseVote(own, last) {
		return false
	}
	if g.onRefuse != nil {
		g.onRefuse(raft.ServerAddress(addr), last)
	}
	// The candidate's own term: not higher than its, so it only counts a
	// vote not granted.
	switch rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		rpc.Respond(&raft.RequestVoteResponse{RPCHeader: g.header(), Term: term, Granted: false}, nil)
	default:
		rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: g.header(), Term: term, Granted: false}, nil)
	}
	return true
}

func (g *voteGate) header() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(g.id), Addr: []byte(g.LocalAddr())}
}
