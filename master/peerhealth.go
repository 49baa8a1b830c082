package master

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// peerPoll is how often a membership change refused for the quorum looks
// again while it waits for peers not heard yet (refuseWithoutQuorum).
const peerPoll = 20 * time.Millisecond

// peerHealth is what a master knows of the other masters: when each last
// answered one of its Raft RPCs. Membership changes read it so that a
// change never leaves the group without a live quorum: raft takes a new
// configuration when it appends it, so a change whose configuration's
// majority is down cannot even commit itself, and the group stops until a
// down master returns.
//
// A peer counts as up only on evidence: an answer within window. Before,
// the leader counted every peer up but those whose heartbeats raft
// reported failed (its FailedHeartbeat observations), and cleared that at
// each election; a heartbeat to a master whose traffic is dropped (a
// firewall, a hung host) fails only at the transport's timeout, 10 s, so a
// new leader, or any leader for 10 s after a master went silent, let
// through a change that stopped the group (TestNewLeaderSeesSilentPeer).
// Raft keeps each follower's last contact too, but does not export it.
type peerHealth struct {
	// self never counts as down: the leader asks no RPC of itself.
	self raft.ServerID
	// window: a leader heartbeats every follower every tenth to fifth of
	// the Raft heartbeat timeout, and raft's leader steps down when a
	// quorum has not answered within its lease (half that timeout here),
	// so a live peer answers many times within one heartbeat timeout; one
	// silent that long is down by raft's own yardstick.
	window time.Duration

	mu sync.Mutex
	// answered: each peer's last answer to an RPC of this master.
	answered map[raft.ServerID]time.Time
}

func newPeerHealth(self string, window time.Duration) *peerHealth {
	return &peerHealth{self: raft.ServerID(self), window: window, answered: map[raft.ServerID]time.Time{}}
}

// heard records an answer from peer id.
func (h *peerHealth) heard(id raft.ServerID, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.After(h.answered[id]) {
		h.answered[id] = now
	}
}

// silentSince reports whether peer id has given no answer after t (this
// master itself never is): a peer never heard from is down, not up, until
// it answers.
func (h *peerHealth) silentSince(id string, t time.Time) bool {
	if raft.ServerID(id) == h.self {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.answered[raft.ServerID(id)]
	return !ok || !at.After(t)
}

// peerTransport is the master's Raft transport with every answer to an RPC
// this master sends (heartbeats and appends while it leads, votes and
// pre-votes while it runs for the lead) recorded in peerHealth: a leader
// elected a moment ago has its voters' answers already, and every
// follower's from its first heartbeat round. Embedding keeps raft's
// optional interfaces (pre-vote, close).
type peerTransport struct {
	*voteGate
	peers *peerHealth
}

func (t peerTransport) note(id raft.ServerID, err error) error {
	if err == nil {
		t.peers.heard(id, time.Now())
	}
	return err
}

// AppendEntries implements raft.Transport (heartbeats go this way).
func (t peerTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.note(id, t.voteGate.AppendEntries(id, target, args, resp))
}

// RequestVote implements raft.Transport.
func (t peerTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.note(id, t.voteGate.RequestVote(id, target, args, resp))
}

// RequestPreVote implements raft.WithPreVote.
func (t peerTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.note(id, t.voteGate.RequestPreVote(id, target, args, resp))
}

// InstallSnapshot implements raft.Transport.
func (t peerTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.note(id, t.voteGate.InstallSnapshot(id, target, args, resp, data))
}

// TimeoutNow implements raft.Transport.
func (t peerTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.note(id, t.voteGate.TimeoutNow(id, target, args, resp))
}

// peerSilentSince reports whether master id has not answered this master's
// Raft RPCs since t (peerHealth).
func (s *Server) peerSilentSince(id string, t time.Time) bool { return s.peers.silentSince(id, t) }

// refuseWithoutQuorum is quorumRefusal against this master's view of its
// peers, where a voter counts as up only on an answer given after the
// change was asked (down receives that time), looking again until the
// window has passed before it refuses. A live follower answers the
// leader's heartbeats several times a heartbeat timeout, so a change among
// live masters passes within a round or two; one that needs a master
// really down is refused one window late. An answer from before the ask
// is not evidence: a master that answered during the last window and went
// silent since (killed, cut off) was counted up, and removing a live
// master beside it, or adding a fourth, left a configuration whose
// majority includes it, which the leader takes at once and cannot commit
// under: the group stopped until that master returned
// (TestNewLeaderSeesSilentPeer's rare failure; TestRefuseWithoutQuorumWaits).
func (s *Server) refuseWithoutQuorum(change string, after []string, down func(id string, asked time.Time) bool) error {
	asked := time.Now()
	deadline := asked.Add(s.peers.window)
	for {
		err := quorumRefusal(change, after, func(id string) bool { return down(id, asked) })
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-time.After(peerPoll):
		case <-s.ctx.Done():
			return err
		}
	}
}

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
