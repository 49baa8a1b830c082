package partitionserver

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"tablestore/partitionserver/raftlog"
)

// joinFloor is a committed log position of a range, (term, index) with the
// entry at index of that term, that the range's leader confirmed just
// before a move created a replica on this server empty. The zero floor is
// none.
//
// Why a re-created member needs it (chaos seed 243, reliability.md 19):
// Raft's membership changes assume a removed server that comes back keeps
// its log and vote. A move deletes the removed replica at once, and a later
// move may create it again empty on the same server. A member that missed
// the removal (a one-way cut kept the leader's appends from it) still
// counts the server in its configuration; an empty hashicorp member grants
// any candidate its vote (no log to compare) and takes any leader's
// entries. The stale member then had a majority of its stale configuration
// ({ps2, ps4} of {ps2, ps3, ps4}) while the real leader had one of the real
// configuration ({ps1, ps3} of {ps1, ps3, ps4}): two leaders, acknowledged
// writes lost.
//
// The floor restores what Raft assumed. The floor's entry is committed, so
// by Leader Completeness every leader of a later term holds it, and with it
// the removal of this server's earlier incarnation (the master asks for the
// floor after recording the removal, which it records once committed). So:
//   - a candidate whose last log is behind the floor in Raft's order can
//     never legitimately win: refusing it costs nothing, and it is exactly
//     the member that missed the removal;
//   - a leader of a term below the floor's is stale (a leader of the
//     floor's term exists or existed), and its entries or snapshot must not
//     land here; the refusal carries the floor's term, on which hashicorp's
//     replication (replicateTo, sendLatestSnapshot) steps the stale leader
//     down, and on which a candidate of an older term falls back to
//     follower (its pre-vote and vote tallies).
//
// The rule stays on for the replica's whole life instead of only while it is
// empty: once its own log reaches the floor, raft's own checks refuse every
// message the floor refuses (a candidate behind the floor is behind its log;
// a leader below the floor's term is below its current term), so the floor
// changes nothing then. Before that it matters even after a snapshot: the
// move compacts before it adds the voter, so the first leader's snapshot is
// at or past the floor, but a later leader may send its own older snapshot
// (one taken before the floor) and then the replica's log is behind the
// floor while it catches up. Keeping the rule needs no notion of "empty" and
// no state to get wrong.
type joinFloor struct{ term, index uint64 }

func (f joinFloor) set() bool { return f.term > 0 }

// behind reports whether a log ending at (term, index) is behind the floor
// in Raft's order (last term first, then last index).
func (f joinFloor) behind(term, index uint64) bool {
	return term < f.term || (term == f.term && index < f.index)
}

// floorRefusal decides one incoming raft request of a member with floor f:
// the refusal to answer, or nil to let raft handle it. Pure.
//
// TimeoutNow carries no term and passes: it only makes this member
// campaign, and the others judge its log; an empty member has no
// configuration and cannot even vote for itself.
func floorRefusal(f joinFloor, msg any) any {
	if !f.set() {
		return nil
	}
	h := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}
	switch m := msg.(type) {
	case *raft.RequestVoteRequest:
		if f.behind(m.LastLogTerm, m.LastLogIndex) {
			return &raft.RequestVoteResponse{RPCHeader: h, Term: f.term, Granted: false}
		}
	case *raft.RequestPreVoteRequest:
		if f.behind(m.LastLogTerm, m.LastLogIndex) {
			return &raft.RequestPreVoteResponse{RPCHeader: h, Term: f.term, Granted: false}
		}
	case *raft.AppendEntriesRequest:
		if m.Term < f.term {
			return &raft.AppendEntriesResponse{RPCHeader: h, Term: f.term, Success: false}
		}
	case *raft.InstallSnapshotRequest:
		if m.Term < f.term {
			return &raft.InstallSnapshotResponse{RPCHeader: h, Term: f.term, Success: false}
		}
	}
	return nil
}

// joinFloorKey is the stable-store key of a replica's floor, in its group
// of the shared raft log: it survives a restart of a still-empty replica
// and goes with the group when the replica is deleted. The state machine's
// RangeState would not do: a snapshot replaces it with the sender's.
var joinFloorKey = []byte("JoinFloor")

// storedFloor reads a replica's floor (zero when none).
func storedFloor(logs *raftlog.Log) (joinFloor, error) {
	v, err := logs.Get(joinFloorKey)
	if errors.Is(err, raftlog.ErrKeyNotFound) {
		return joinFloor{}, nil
	}
	if err != nil {
		return joinFloor{}, err
	}
	if len(v) != 16 {
		return joinFloor{}, fmt.Errorf("%w: join floor of %d bytes", raftlog.ErrCorrupt, len(v))
	}
	return joinFloor{binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])}, nil
}

// raiseFloor records f as the replica's floor unless it already has one as
// high, and returns the floor in force.
func raiseFloor(logs *raftlog.Log, f joinFloor) (joinFloor, error) {
	cur, err := storedFloor(logs)
	if err != nil || !f.set() || cur.behind(f.term, f.index) || cur == f {
		return cur, err
	}
	v := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, f.term), f.index)
	if err := logs.Set(joinFloorKey, v); err != nil {
		return cur, err
	}
	return f, nil
}

// memberGate is the one transport gate of a replica: the join floor's
// refusals, then snapshotFirst's (a split-born range's empty member takes
// no log entries before a snapshot); nil when neither applies.
func memberGate(f joinFloor, snapshotFirst func(any) (any, error)) func(any) (any, error) {
	if !f.set() {
		return snapshotFirst
	}
	return func(msg any) (any, error) {
		if resp := floorRefusal(f, msg); resp != nil {
			joinFloorRefusalsTotal.Inc()
			return resp, nil
		}
		if snapshotFirst != nil {
			return snapshotFirst(msg)
		}
		return nil, nil
	}
}
