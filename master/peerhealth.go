package master

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// peerFailWindow: a failed heartbeat counts this long unless a success
// follows. Raft retries a failed peer at least every half heartbeat
// timeout, or every transport timeout (10 s) for a peer that does not
// answer at all, and reports each failure; a Resumed observation the
// observer channel dropped then stops counting after this long.
const peerFailWindow = 30 * time.Second

// peerHealth is what the leading master knows of the other masters: the
// heartbeats raft sends them that fail (FailedHeartbeat and
// ResumedHeartbeat observations). Membership changes read it so that a
// change never leaves the group without a live quorum: raft takes a new
// configuration when it appends it, so a change whose configuration's
// majority is down cannot even commit itself, and the group stops until a
// down master returns.
type peerHealth struct {
	mu sync.Mutex
	// failing: each peer's last failed heartbeat with no success after it.
	failing map[raft.ServerID]time.Time
}

func newPeerHealth() *peerHealth {
	return &peerHealth{failing: map[raft.ServerID]time.Time{}}
}

// observe takes one raft observation.
func (h *peerHealth) observe(o raft.Observation, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch d := o.Data.(type) {
	case raft.FailedHeartbeatObservation:
		h.failing[d.PeerID] = now
	case raft.ResumedHeartbeatObservation:
		delete(h.failing, d.PeerID)
	case raft.LeaderObservation:
		// A new term's heartbeats start afresh: a peer back up since
		// would never be reported resumed.
		clear(h.failing)
	case raft.PeerObservation:
		if d.Removed {
			delete(h.failing, d.Peer.ID)
		}
	}
}

// down reports whether the peer's heartbeats fail now.
func (h *peerHealth) down(id string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.failing[raft.ServerID(id)]
	return ok && now.Sub(at) < peerFailWindow
}

func wantObservation(o *raft.Observation) bool {
	switch o.Data.(type) {
	case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation, raft.PeerObservation:
		return true
	}
	return false
}

// watchPeers feeds peerHealth from raft's observations until the master
// stops.
func (s *Server) watchPeers() {
	ch := make(chan raft.Observation, 256)
	obs := raft.NewObserver(ch, false, wantObservation)
	s.raft.RegisterObserver(obs)
	defer s.raft.DeregisterObserver(obs)
	for {
		select {
		case <-s.ctx.Done():
			return
		case o := <-ch:
			s.peers.observe(o, time.Now())
		}
	}
}

// peerDown reports whether this master's heartbeats to master id fail.
func (s *Server) peerDown(id string) bool { return s.peers.down(id, time.Now()) }

// quorumRefusal decides whether the voters of the configuration a
// membership change makes keep a live quorum (nil: they do); down says
// which are known down. Pure.
func quorumRefusal(change string, after []string, down func(id string) bool) error {
	var gone []string
	for _, id := range after {
		if down(id) {
			gone = append(gone, id)
		}
	}
	need := len(after)/2 + 1
	if len(after)-len(gone) >= need {
		return nil
	}
	sort.Strings(gone)
	return fmt.Errorf("%w: %s leaves %d voters, %d of them needed for the quorum, and %s not up (%s); start it again, or remove a down master first",
		ErrQuorumLoss, change, len(after), need, plural(len(gone), "one is", "these are"), strings.Join(gone, ", "))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
