package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"tablestore/partitionserver/grouptransport"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/partitionserver/fsm"
	pb "tablestore/proto/tablestorepb"
)

// Leadership transfers and hashicorp/raft v1.7.3.
//
// raft keeps its "leadership transfer in progress" flag set until its
// transfer goroutine returns, and that goroutine can block long after the
// transfer timed out: on a TimeoutNow RPC to a target that accepts the
// connection but does not answer (a paused process; up to the transport's
// timeout), or on the replication channel of a target that is lagging or
// gone (upstream issue #696; the fix, PR #708, is unreleased). While the
// flag is set the leader refuses every write. Rather than carry a patched
// raft, the server guards around it (docs/reliability.md):
//   - a transfer goes only to a voter of the current configuration (and the
//     master asks only for live, caught-up followers);
//   - TimeoutNow is bounded (boundedTimeoutNow), so a silent target cannot
//     hold the flag for the transport's timeout;
//   - a transfer that did not complete is watched: if the flag is still set
//     after transferGrace, the replica restarts its Raft member from its
//     durable state (log, stable store, state machine file), which clears
//     it. Writes refused meanwhile are answered ServerBusy (ErrBusy): they
//     were never proposed.

// transferGrace is how long a failed transfer may keep writes refused
// before the replica restarts its Raft member.
func (s *Server) transferGrace() time.Duration {
	return max(2*time.Second, 4*s.cfg.RaftElectionTimeout)
}

// errTimeoutNowBound reports a TimeoutNow RPC given up on.
var errTimeoutNowBound = errors.New("partitionserver: TimeoutNow not answered in time")

// boundedTimeoutNow is the Raft transport with TimeoutNow bounded: raft
// waits for that RPC with its transfer flag set.
type boundedTimeoutNow struct {
	*grouptransport.Group
	limit time.Duration
}

// TimeoutNow implements raft.Transport; past the limit the call is left to
// finish (or time out) on its own.
func (t boundedTimeoutNow) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	type result struct {
		resp raft.TimeoutNowResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r raft.TimeoutNowResponse
		err := t.Group.TimeoutNow(id, target, args, &r)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		*resp = res.resp
		return res.err
	case <-time.After(t.limit):
		return fmt.Errorf("%w: %s after %v", errTimeoutNowBound, id, t.limit)
	}
}

// isVoter reports whether server id is a voter of r's current
// configuration.
func (r *member) isVoter(id string) bool {
	s, member, err := r.suffrage(id)
	return err == nil && member && s == raft.Voter
}

// suffrage reports server id's suffrage in r's latest configuration, and
// whether it is a member at all.
func (r *member) suffrage(id string) (raft.ServerSuffrage, bool, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, false, err
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return s.Suffrage, true, nil
		}
	}
	return 0, false, nil
}

// ErrMembersUnsettled: a split or merge must wait until the range's Raft
// members are its descriptor's (settleMembers could not remove the others
// without leaving the range without a live majority).
var ErrMembersUnsettled = errors.New("partitionserver: the range's members differ from its descriptor")

// settleMembers prepares r (which leads) for a split or a merge, with
// r.membersMu held: it removes every member the descriptor does not list,
// and fails when r itself is one (handing its leadership to a listed
// voter first) or when removing a voter would leave no live majority.
// Both run over the descriptor's replicas only: every member applies the
// entry, and one the descriptor does not list would start a split's new
// range that lists no replica on its server, or take over a merged
// neighbour it holds no replica of (the merge's co-location follows the
// descriptors; fsm's applyMerge finds no replica there and stops the
// server, at every restart).
//
// Such a member is a non-voter an interrupted move left (the master never
// runs a move and a reshaping of one range together), or a voter whose
// promotion or add was cut off before it was recorded. Removing it leaves
// exactly the voters the master's map holds, which already hold every
// committed entry between them (any quorum of the larger configuration
// has a majority of them). Refusing instead would leave a merge the master
// has committed retrying for ever, holding the range from the check that
// would record the change.
//
// The descriptor is read after a barrier: a new leader, or one whose
// SET_REPLICAS timed out after dispatch, may not have applied the record
// of a voter yet, and would remove it. heard is the window in which a
// voter must have answered to count as live.
func (r *member) settleMembers(timeout, heard time.Duration) error {
	if err := r.raft.Barrier(timeout).Error(); err != nil {
		return err
	}
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	servers := f.Configuration().Servers
	listed := map[string]bool{}
	for _, rep := range r.descriptor().GetReplicas() {
		listed[rep.GetServerId()] = true
	}
	if !listed[r.serverID] {
		// Promoted, its record cut off, then elected: it cannot remove
		// itself. A listed voter takes over and removes it.
		for _, s := range servers {
			if s.Suffrage == raft.Voter && listed[string(s.ID)] {
				if err := r.transferLeadership(s.ID, s.Address); err == nil {
					break
				}
			}
		}
		return fmt.Errorf("%w: range %d's descriptor does not list its leader %s", ErrNotLeader, r.id, r.serverID)
	}
	live := 1 // r itself
	for _, s := range servers {
		if s.Suffrage == raft.Voter && listed[string(s.ID)] && string(s.ID) != r.serverID &&
			r.transport.HeardFrom(s.ID, s.Address, time.Now().Add(-heard)) {
			live++
		}
	}
	for _, s := range servers {
		if listed[string(s.ID)] {
			continue
		}
		if s.Suffrage == raft.Voter && 2*live <= len(listed) {
			// The listed voters alone would have no live majority (one
			// of them down, and the unlisted one counted for it).
			return fmt.Errorf("%w: %w: removing %s would leave range %d %d live voters of %d", ErrBusy, ErrMembersUnsettled, s.ID, r.id, live, len(listed))
		}
		if err := r.raft.RemoveServer(s.ID, 0, timeout).Error(); err != nil {
			return fmt.Errorf("remove %s, a member the descriptor does not list: %w", s.ID, err)
		}
		r.logger.Info("removed a member the descriptor does not list before reshaping the range", "server", string(s.ID), "suffrage", s.Suffrage.String())
	}
	return r.recordRemovedVoters(timeout)
}

// voterReplicas lists the voters of r's latest Raft configuration as a
// descriptor's replicas, sorted: what SET_REPLICAS records.
func (r *member) voterReplicas() ([]*pb.Replica, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var reps []*pb.Replica
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			reps = append(reps, &pb.Replica{ServerId: string(s.ID)})
		}
	}
	sort.Slice(reps, func(i, j int) bool { return reps[i].GetServerId() < reps[j].GetServerId() })
	return reps, nil
}

// recordRemovedVoters records the Raft configuration's voters in the
// descriptor (SET_REPLICAS, as ChangeReplicas does after a change) when
// the descriptor lists a server that is no longer a voter: a removal
// whose record a crash, a lost leadership or an apply timeout cut off
// (ChangeReplicas removes first and records after). A split copies the
// descriptor's replicas into the new range's, whose group every replica
// bootstraps with them as voters: with such a server among them, the new
// range had a voter that never gets it (the server applies none of the
// parent's entries any more), so one more failure among its real members
// left it without a quorum until the master's replica-set check recorded
// the parent's members (after its grace) and the replica GC and the
// assignment replaced the phantom. A frozen range is left as it is (its
// state machine refuses the record, and the split or merge with it).
func (r *member) recordRemovedVoters(timeout time.Duration) error {
	if r.frozen() {
		return nil
	}
	reps, err := r.voterReplicas()
	if err != nil {
		return err
	}
	var gone []string
	for _, rep := range r.descriptor().GetReplicas() {
		if !slices.ContainsFunc(reps, func(v *pb.Replica) bool { return v.GetServerId() == rep.GetServerId() }) {
			gone = append(gone, rep.GetServerId())
		}
	}
	if len(gone) == 0 {
		return nil
	}
	data, err := fsm.Encode(pb.CommandKind_COMMAND_KIND_SET_REPLICAS, &pb.SetReplicasCommand{Replicas: reps})
	if err != nil {
		return err
	}
	res, err := r.propose(context.Background(), data, timeout)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return fmt.Errorf("record the voters of range %d without %v, removed unrecorded: %w", r.id, gone, err)
	}
	r.logger.Info("recorded voters the descriptor still listed as removed before reshaping the range", "removed", gone, "generation", res.Range.GetGeneration())
	return nil
}

// hasNonvoter reports whether r's latest configuration has a non-voter (or
// is unknown).
func (r *member) hasNonvoter() bool {
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return true
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			return true
		}
	}
	return false
}

// members lists, on the leader, the voters and the non-voters of r's
// latest Raft configuration (each sorted; nil elsewhere or on error), for
// the master's replica-set check.
func (r *member) members(leader bool) (voters, nonvoters []string) {
	if !leader {
		return nil, nil
	}
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return nil, nil
	}
	for _, s := range f.Configuration().Servers {
		switch s.Suffrage {
		case raft.Voter:
			voters = append(voters, string(s.ID))
		case raft.Nonvoter:
			nonvoters = append(nonvoters, string(s.ID))
		}
	}
	sort.Strings(voters)
	sort.Strings(nonvoters)
	return voters, nonvoters
}

// watchTransfer clears a transfer raft failed to finish: while r leads and
// its writes are refused with the transfer flag, it waits until started +
// transferGrace, then restarts r's Raft member.
func (s *Server) watchTransfer(r *member, started time.Time) {
	if !r.watching.CompareAndSwap(false, true) {
		return
	}
	defer r.watching.Store(false)
	grace := s.transferGrace()
	for s.ctx.Err() == nil && r.isLeader() {
		err := r.raft.Barrier(grace).Error()
		if !errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return
		}
		if time.Since(started) >= grace {
			r.logger.Warn("leadership transfer stuck; restarting the range's raft member", "since", started)
			transferRestartsTotal.Inc()
			s.restartReplica(r)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// transferLeadership hands this member's leadership to id. The member's
// read lease ends first, for the term it leads and for good: the target's
// votes carry this term's transfer token, which followers promised to this
// leader admit. The term current when the transfer returns loses its lease
// too: raft may have ended the transfer's term and elected this member
// again meanwhile, while its TimeoutNow was still on the way.
func (r *member) transferLeadership(id raft.ServerID, addr raft.ServerAddress) error {
	r.transport.StartTransfer(r.raft.CurrentTerm())
	err := r.raft.LeadershipTransferToServer(id, addr).Error()
	r.transport.DisableLease(r.raft.CurrentTerm())
	return err
}

// handOff hands this member's leadership to another voter before a
// shutdown, with the same lease rules as transferLeadership: to the one
// raft finds most caught up when every other voter was heard from lately,
// else to one that was (raft's own pick ties a follower that went down on
// an idle range with a live one, and a transfer to it only times out).
func (r *member) handOff() error {
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return f.Error()
	}
	since := time.Now().Add(-handOffHeard)
	var others, live []raft.Server
	for _, sv := range f.Configuration().Servers {
		if sv.Suffrage != raft.Voter || string(sv.ID) == r.serverID {
			continue
		}
		others = append(others, sv)
		if r.transport.HeardFrom(sv.ID, sv.Address, since) {
			live = append(live, sv)
		}
	}
	if len(live) == 0 {
		return nil
	}
	r.transport.StartTransfer(r.raft.CurrentTerm())
	var fut raft.Future
	if len(live) == len(others) {
		fut = r.raft.LeadershipTransfer()
	} else {
		fut = r.raft.LeadershipTransferToServer(live[0].ID, live[0].Address)
	}
	err := fut.Error()
	r.transport.DisableLease(r.raft.CurrentTerm())
	if errors.Is(err, raft.ErrLeadershipTransferInProgress) {
		// A transfer the master ordered is under way: it is the
		// hand-off, if it ends before the shutdown's bound (the server
		// then isolates its transport, which would cut its TimeoutNow).
		deadline := time.Now().Add(handOffWait)
		for r.isLeader() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if !r.isLeader() {
			return nil
		}
	}
	return err
}

// handOffWait bounds how long a hand-off waits for a transfer already
// under way (handOffLeaderships bounds them all as well).
const handOffWait = 2 * time.Second

// handOffHeard is how recently a voter must have answered to be handed a
// leadership at shutdown: a few heartbeats.
const handOffHeard = time.Second
