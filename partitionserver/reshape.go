package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/failpoint"
	"tablestore/internal/rpcerr"
	"tablestore/partitionserver/fsm"
	pb "tablestore/proto/tablestorepb"
)

// ErrSpanShared refuses a merge's freeze of a range that shares its Raft
// group with other ranges, and a deleted table's freeze of a range whose
// group serves another table's: the master detaches it first (isolate).
var ErrSpanShared = errors.New("partitionserver: the range shares its Raft group; it leaves the group before a merge")

func (v *service) leaderReplica(id uint64) (*replica, error) {
	r, err := v.replica(id)
	if err != nil {
		return nil, err
	}
	if !r.isLeader() {
		return nil, toStatus(r, ErrNotLeader)
	}
	return r, nil
}

// SplitRange splits through the range's log and waits (bounded) until the
// right-hand range has a leader, so routing to it works when this returns.
func (v *service) SplitRange(ctx context.Context, req *pb.SplitRangeRequest) (*pb.SplitRangeResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("split").Observe(time.Since(start).Seconds()) }()
	r, err := v.leaderReplica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if err := failpoint.Inject("partitionserver/split/before-propose"); err != nil {
		return nil, toStatus(r, err)
	}
	if err := r.lockMembers(ctx); err != nil {
		return nil, toStatus(r, err)
	}
	defer r.unlockMembers()
	// Tests arm the point to split with an unlisted member, as a change
	// another master raced in would leave one (RangeCreated's check).
	if failpoint.Inject("partitionserver/split/unsettled") == nil {
		if err := r.settleMembers(v.s.cfg.ApplyTimeout, v.s.cfg.RaftHeartbeatTimeout); err != nil {
			return nil, toStatus(r, raftErr(err))
		}
	}
	var res *fsm.Result
	if req.GetInGroup() {
		// The right range becomes a span of this group: one entry, the
		// same leader, no new group to start.
		res, err = v.run(ctx, r, pb.CommandKind_COMMAND_KIND_SPLIT_SPAN, &pb.SplitSpanCommand{
			SplitKey: req.GetSplitKey(), NewRangeId: req.GetNewRangeId(),
		})
	} else {
		res, err = v.run(ctx, r, pb.CommandKind_COMMAND_KIND_SPLIT, &pb.SplitCommand{
			SplitKey: req.GetSplitKey(), NewRangeId: req.GetNewRangeId(), PreferredLeader: req.GetPreferredLeader(),
		})
	}
	if err != nil {
		return nil, err
	}
	if req.GetInGroup() {
		// Served here from the answer on, not from the hook that follows
		// the group commit: the master routes to it at once, and the
		// span serves once the file holds it.
		if err := r.waitApplied(ctx, r.raft.AppliedIndex()); err != nil {
			return nil, toStatus(r, err)
		}
		v.s.indexSpan(res.Right.GetRangeId(), r.member.id)
	}
	if err := failpoint.Inject("partitionserver/split/after-apply"); err != nil {
		return nil, toStatus(r, err)
	}
	// No wait for the right range's election: the master publishes the new
	// map at once and front-ends find the leader as it emerges.
	v.s.logger.Info("range split", "range", req.GetRangeId(), "key", req.GetSplitKey(), "new_range", req.GetNewRangeId(), "in_group", req.GetInGroup(), "took", time.Since(start))
	return &pb.SplitRangeResponse{Left: res.Range, Right: res.Right}, nil
}

// DetachRange moves a range that shares its Raft group into a group of its
// own on the same replicas (a group split, docs/range-groups.md stage 4:
// DetachSpanCommand) and answers once this server hosts the new group, so
// that routing to it works when the master publishes it. A range alone in
// its group answers its descriptor: so does a retry after the detach
// applied (its answer lost), which reaches the new group's leader.
func (v *service) DetachRange(ctx context.Context, req *pb.DetachRangeRequest) (*pb.DetachRangeResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("detach").Observe(time.Since(start).Seconds()) }()
	id := req.GetRangeId()
	r, err := v.leaderReplica(id)
	if err != nil {
		return nil, err
	}
	if len(r.group.Spans()) == 1 {
		return &pb.DetachRangeResponse{Range: r.fsm.Descriptor()}, nil
	}
	if err := r.lockMembers(ctx); err != nil {
		return nil, toStatus(r, err)
	}
	defer r.unlockMembers()
	// The new group is bootstrapped with the span's replicas: they must
	// be the group's configuration, not a change still settling.
	if err := r.settleMembers(v.s.cfg.ApplyTimeout, v.s.cfg.RaftHeartbeatTimeout); err != nil {
		return nil, toStatus(r, raftErr(err))
	}
	if _, ok := r.group.Span(id); !ok {
		// A retry whose first attempt's entry applied while this one
		// waited for the lock.
		return v.detached(ctx, r, id, nil)
	}
	_, err = v.run(ctx, r, pb.CommandKind_COMMAND_KIND_DETACH_SPAN, &pb.DetachSpanCommand{PreferredLeader: req.GetPreferredLeader()})
	if status.Code(err) == codes.NotFound {
		// The same, its entry applied after the check: refused as naming
		// no span of the group, the range is its own group's now (or it
		// was merged away: the refusal stands).
		return v.detached(ctx, r, id, err)
	}
	if err != nil {
		return nil, err
	}
	if err := failpoint.Inject("partitionserver/detach/after-apply"); err != nil {
		return nil, toStatus(r, err)
	}
	resp, err := v.detached(ctx, r, id, nil)
	if err == nil {
		v.s.logger.Info("range left its group", "range", id, "group", r.member.id, "took", time.Since(start))
	}
	return resp, err
}

// detached answers DetachRange once range id, which left r's group, is
// hosted here as a group of its own: RangeCreated starts it after the
// group commit, in a goroutine of its own. If it is not within the apply
// timeout, the answer is refused (busy: asked again), or refused when
// given.
func (v *service) detached(ctx context.Context, r *replica, id uint64, refused error) (*pb.DetachRangeResponse, error) {
	r.group.Urge()
	deadline := time.Now().Add(v.s.cfg.ApplyTimeout)
	for {
		if sp := v.s.groupSlot(id).span(id); sp != nil {
			return &pb.DetachRangeResponse{Range: sp.Descriptor()}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if refused != nil {
				return nil, refused
			}
			return nil, toStatus(r, fmt.Errorf("%w: range %d left its group, but its own group has not started here", ErrBusy, id))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// FreezeRange stops reads and writes of a range that is about to be merged
// and reports the log index of its freeze.
func (v *service) FreezeRange(ctx context.Context, req *pb.FreezeRangeRequest) (*pb.FreezeRangeResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("freeze").Observe(time.Since(start).Seconds()) }()
	r, err := v.leaderReplica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if req.GetTableDeleted() {
		return v.freezeDeleted(ctx, r)
	}
	if st := r.fsm.State(); st.GetFrozen() || req.GetOnlyIfFrozen() {
		// The applied index goes with it: "not frozen" proves a freeze
		// undone only if this leader applied past it.
		return &pb.FreezeRangeResponse{Range: st.GetRange(), FreezeIndex: st.GetFrozenIndex(), AppliedIndex: st.GetAppliedIndex()}, nil
	}
	if n := len(r.group.Spans()); n > 1 {
		// The master detaches the range first (isolate): a merge's right
		// range is alone in its Raft group, so the group ends with the
		// merge and never outlives its namesake, and no other span's
		// snapshot can carry the frozen one past the merge.
		err := fmt.Errorf("%w: range %d is one of %d ranges of Raft group %d", ErrSpanShared, r.id, n, r.member.id)
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonNotReady, err.Error(), nil)
	}
	// A frozen range serves nothing until every replica has applied the
	// freeze or the master aborted the merge (a bounded wait): a voter
	// this leader cannot reach, though it may answer the master, would
	// hold the range's writes for that wait and the merge would not
	// happen anyway.
	if id, ok := r.unheardVoter(ctx, freezeReachWait, v.s.cfg.RaftHeartbeatTimeout); ok {
		err := fmt.Errorf("%w: %s has not answered this server within %v", ErrVoterUnreached, id, v.s.cfg.RaftHeartbeatTimeout)
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonNotReady, err.Error(), nil)
	}
	res, err := v.run(ctx, r, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{Generation: r.fsm.Descriptor().GetGeneration()})
	if err != nil {
		return nil, err
	}
	return &pb.FreezeRangeResponse{Range: res.Range, FreezeIndex: res.Index}, nil
}

// freezeDeleted freezes a range of a deleted table for good, through its
// log: every write and read after it (on this leader or any later one) is
// refused, and nothing undoes it. It is proposed even when the range is
// frozen already (for a merge, which an abort could undo), and without
// the merge freeze's check that every voter answers: a majority commits
// it, and the master's DeleteTable waits for it.
//
// A range whose group serves a span of another table is refused
// (ErrSpanShared, NOT_READY with the group in MetaSharedGroup): frozen
// there, it would block the group's membership changes and its own
// detach, and its delete would take the other table's spans with it
// (deleteDropped). The master detaches it first; the spans of one table
// split in their group freeze as before and go whole.
func (v *service) freezeDeleted(ctx context.Context, r *replica) (*pb.FreezeRangeResponse, error) {
	if st := r.fsm.State(); st.GetTableDeleted() {
		return &pb.FreezeRangeResponse{Range: st.GetRange(), FreezeIndex: st.GetFrozenIndex(), AppliedIndex: st.GetAppliedIndex()}, nil
	}
	if other, ok := otherTableSpan(r.fsm.Descriptor().GetTableId(), r.group.Spans()); ok {
		err := fmt.Errorf("%w: range %d of a deleted table shares Raft group %d with range %d of table %d", ErrSpanShared, r.id, r.member.id, other.GetRangeId(), other.GetTableId())
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonNotReady, err.Error(),
			map[string]string{rpcerr.MetaSharedGroup: strconv.FormatUint(r.member.id, 10)})
	}
	res, err := v.run(ctx, r, pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{Generation: r.fsm.Descriptor().GetGeneration(), TableDeleted: true})
	if err != nil {
		return nil, err
	}
	v.s.logger.Info("range of a deleted table frozen", "range", r.id, "freeze_index", res.Index)
	return &pb.FreezeRangeResponse{Range: res.Range, FreezeIndex: res.Index}, nil
}

// otherTableSpan is a span among spans of a table other than table, if
// any.
func otherTableSpan(table uint64, spans []*fsm.Range) (*pb.RangeDescriptor, bool) {
	for _, sp := range spans {
		if d := sp.Descriptor(); d.GetTableId() != table {
			return d, true
		}
	}
	return nil, false
}

// MergeRange extends the range over its frozen right neighbour through the
// range's own log; no entity travels (fsm's applyMerge). It is idempotent:
// a range that already covers the neighbour answers at once.
func (v *service) MergeRange(ctx context.Context, req *pb.MergeRangeRequest) (*pb.MergeRangeResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("merge").Observe(time.Since(start).Seconds()) }()
	r, err := v.leaderReplica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	desc := r.fsm.Descriptor()
	right := req.GetRight()
	if desc.GetEnd() == right.GetEnd() && desc.GetStart() < right.GetStart() {
		return &pb.MergeRangeResponse{Range: desc}, nil
	}
	if err := failpoint.Inject("partitionserver/merge/before-propose"); err != nil {
		return nil, toStatus(r, err)
	}
	if err := r.lockMembers(ctx); err != nil {
		return nil, toStatus(r, err)
	}
	defer r.unlockMembers()
	if err := r.settleMembers(v.s.cfg.ApplyTimeout, v.s.cfg.RaftHeartbeatTimeout); err != nil {
		return nil, toStatus(r, raftErr(err))
	}
	if desc := r.fsm.Descriptor(); desc.GetEnd() == right.GetEnd() && desc.GetStart() < right.GetStart() {
		// The settling's barrier applied a MERGE an earlier call proposed.
		return &pb.MergeRangeResponse{Range: desc}, nil
	}
	if req.GetInGroup() {
		// Two spans of this group: one entry, no freeze, nothing to
		// co-locate (docs/range-groups.md, stage 5). The right range is
		// served no more once it applies (its span leaves the group).
		res, err := v.run(ctx, r, pb.CommandKind_COMMAND_KIND_MERGE_SPANS, &pb.MergeSpansCommand{Right: right})
		if err != nil {
			return nil, err
		}
		v.s.logger.Info("range merged its right neighbour in its group", "range", r.id, "right", right.GetRangeId(), "took", time.Since(start))
		return &pb.MergeRangeResponse{Range: res.Range}, nil
	}
	if err := colocated(r.id, r.memberIDs(), right); err != nil {
		return nil, toStatus(r, err)
	}
	if err := v.checkMergeFreeze(ctx, right, req.GetRightFreezeIndex()); err != nil {
		return nil, toStatus(r, err)
	}
	res, err := v.run(ctx, r, pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: right, RightFreezeIndex: req.GetRightFreezeIndex()})
	if err != nil {
		return nil, err
	}
	v.s.logger.Info("range merged its right neighbour", "range", r.id, "right", right.GetRangeId(), "took", time.Since(start))
	return &pb.MergeRangeResponse{Range: res.Range}, nil
}

// ErrFreezeMismatch: a MergeRange names a freeze its right range's
// replica on the left range's leader is not (or no longer) frozen at.
var ErrFreezeMismatch = errors.New("partitionserver: the right range is not frozen at the merge's freeze index")

// mergeFreezeWait bounds MergeRange's wait for the leader's own replica
// of the right range to apply the freeze the merge names.
const mergeFreezeWait = 5 * time.Second

// checkMergeFreeze refuses a merge unless this server's replica of the
// right range, once it has applied the freeze the merge names (a bounded
// wait), is frozen at exactly that index with the span the merge names.
// A master sends MergeRange only after recording COMMIT for that freeze,
// after which the range is never unfrozen from it, so for a current
// master this holds at once. A master of an older build that lost the
// lead during a rolling upgrade records nothing: it can send MergeRange
// for a freeze a newer master aborted and undid, and every replica of
// this range would stop in applyMerge (and again on replay), so the
// check runs before anything is proposed. It narrows that hole rather
// than closing it: a replica here that has not learnt of the unfreeze's
// commit passes (and the other servers' replicas are not asked), so the
// full rule is the upgrade order (docs/operations.md: every master
// before any partition server).
func (v *service) checkMergeFreeze(ctx context.Context, right *pb.RangeDescriptor, freeze uint64) error {
	rr, err := v.replica(right.GetRangeId())
	if err != nil {
		return fmt.Errorf("%w: range %d has no replica on this server: %v", ErrFreezeMismatch, right.GetRangeId(), err)
	}
	wctx, cancel := context.WithTimeout(ctx, mergeFreezeWait)
	defer cancel()
	if err := rr.waitApplied(wctx, freeze); err != nil {
		return fmt.Errorf("%w: range %d's replica here applied %d < freeze %d: %v", ErrFreezeMismatch, right.GetRangeId(), rr.fsm.AppliedIndex(), freeze, err)
	}
	// Also up to what this replica knows committed: an unfreeze the
	// stale master's merge raced is then seen here (best effort: past
	// the bound, the state as applied decides).
	if c := rr.raft.CommitIndex(); c > freeze {
		_ = rr.waitApplied(wctx, c)
	}
	return freezeMatches(rr.fsm.State(), right, freeze)
}

// ErrNotColocated: a MergeRange's left range has a member (in its
// descriptor or its Raft configuration) on a server the right range's
// freeze does not list. It wraps ErrFreezeMismatch (refused NOT_READY,
// nothing proposed).
var ErrNotColocated = fmt.Errorf("%w: the left range has a member where the right range has no replica", ErrFreezeMismatch)

// colocated is MergeRange's rule on where the left range lives: every
// member of it (members: its descriptor's replicas and its Raft
// configuration's servers, after settleMembers) must be a server the
// right range's freeze lists (right: the descriptor the freeze reported,
// whose every replica the master saw apply the freeze). Each member of
// the left range applies the merge with its own server's replica of the
// right range (fsm applyMerge): on a server without one it panics, and
// on one whose replica left the right range before the freeze (removed,
// not yet deleted) it waits for ever for a freeze that replica never
// applies. The master co-locates before it freezes, but from its map,
// which a deposed master's move (or a crash before a move's map update)
// can leave behind the ranges' own descriptors; checked here, before
// anything is proposed, the merge is refused instead.
func colocated(leftID uint64, members []string, right *pb.RangeDescriptor) error {
	listed := map[string]bool{}
	for _, rep := range right.GetReplicas() {
		listed[rep.GetServerId()] = true
	}
	for _, m := range members {
		if !listed[m] {
			return fmt.Errorf("%w: range %d on %s, range %d's freeze lists %v", ErrNotColocated, leftID, m, right.GetRangeId(), serverIDs(right))
		}
	}
	return nil
}

// serverIDs lists the servers of d's replicas.
func serverIDs(d *pb.RangeDescriptor) []string {
	out := make([]string, 0, len(d.GetReplicas()))
	for _, rep := range d.GetReplicas() {
		out = append(out, rep.GetServerId())
	}
	return out
}

// memberIDs lists the servers of r's descriptor's replicas and of its
// latest Raft configuration (voters and non-voters: each applies the
// log), without repeats. A configuration that cannot be read adds
// nothing (the descriptor's list stands; settleMembers read it just
// before).
func (r *member) memberIDs() []string {
	seen := map[string]bool{}
	var out []string
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, rep := range r.descriptor().GetReplicas() {
		add(rep.GetServerId())
	}
	voters, nonvoters := r.members(true)
	for _, id := range append(voters, nonvoters...) {
		add(id)
	}
	return out
}

// freezeMatches is checkMergeFreeze's rule on the right range's state
// here: frozen at exactly freeze, over the span the merge names (what
// fsm applyMerge requires, checked before proposing).
func freezeMatches(st *pb.RangeState, right *pb.RangeDescriptor, freeze uint64) error {
	switch {
	case !st.GetFrozen() || st.GetFrozenIndex() != freeze:
		return fmt.Errorf("%w: range %d is frozen=%v at %d, the merge names %d", ErrFreezeMismatch, right.GetRangeId(), st.GetFrozen(), st.GetFrozenIndex(), freeze)
	case st.GetRange().GetStart() != right.GetStart() || st.GetRange().GetEnd() != right.GetEnd():
		return fmt.Errorf("%w: range %d spans %q..%q, the merge names %q..%q", ErrFreezeMismatch, right.GetRangeId(),
			st.GetRange().GetStart(), st.GetRange().GetEnd(), right.GetStart(), right.GetEnd())
	}
	return nil
}

// UnfreezeRange undoes a freeze through the range's own log; the master
// sends it only once it recorded the freeze's merge as aborted. The apply
// undoes only the freeze at the given index (fsm's applyUnfreeze), so a
// repeated or late request is harmless.
func (v *service) UnfreezeRange(ctx context.Context, req *pb.UnfreezeRangeRequest) (*pb.UnfreezeRangeResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("unfreeze").Observe(time.Since(start).Seconds()) }()
	r, err := v.leaderReplica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if st := r.fsm.State(); st.GetFrozen() && st.GetFrozenIndex() > req.GetFreezeIndex() {
		// Frozen again since: the freeze asked about was undone long ago.
		// (An unfrozen leader still proposes: one elected a moment ago
		// may not have applied the freeze yet.)
		return &pb.UnfreezeRangeResponse{Range: st.GetRange(), Frozen: true, FrozenIndex: st.GetFrozenIndex(), AppliedIndex: st.GetAppliedIndex()}, nil
	}
	res, err := v.run(ctx, r, pb.CommandKind_COMMAND_KIND_UNFREEZE, &pb.UnfreezeCommand{FreezeIndex: req.GetFreezeIndex()})
	if err != nil {
		return nil, err
	}
	v.s.logger.Info("range unfrozen: its merge was aborted", "range", r.id, "freeze_index", req.GetFreezeIndex(), "took", time.Since(start))
	// Read back once after the apply: frozen, its index and the applied
	// index from one state, so the master's proof is consistent.
	st := r.fsm.State()
	return &pb.UnfreezeRangeResponse{Range: res.Range, Frozen: st.GetFrozen(), FrozenIndex: st.GetFrozenIndex(), AppliedIndex: st.GetAppliedIndex()}, nil
}

// run proposes a reshaping command on r's log and returns its result, with
// errors already translated for the caller.
func (v *service) run(ctx context.Context, r *replica, kind pb.CommandKind, m proto.Message) (*fsm.Result, error) {
	data, err := fsm.EncodeFor(r.span(), kind, m)
	if err != nil {
		return nil, err
	}
	res, err := r.propose(ctx, data, v.s.cfg.ApplyTimeout)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, toStatus(r, err)
	}
	announceCommit(r.raft)
	return res, nil
}

// announceCommit makes the followers learn the commit of the entry the
// leader just applied at once, rather than on raft's next commit tick
// (RaftCommitTimeout, up to twice that on an otherwise idle range): it
// appends a barrier, whose AppendEntries carries the leader's commit index.
// Reshaping waits on the followers' apply: the master waits until every
// replica applied a merge's freeze (the write pause), and a split's
// followers start the new range, whose first election needs them, when
// they apply the split. The barrier is not waited for (its enqueue at most
// a second).
func announceCommit(r *raft.Raft) {
	_ = r.Barrier(time.Second)
}

// ChangeReplicas adds (as a voter or a non-voter, or promotes a
// non-voter) and/or removes one member, then records the voters in the
// descriptor through the log. Adding a non-voter leaves the voters, and so
// the descriptor, as they are: nothing is recorded.
func (v *service) ChangeReplicas(ctx context.Context, req *pb.ChangeReplicasRequest) (*pb.ChangeReplicasResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("change-replicas").Observe(time.Since(start).Seconds()) }()
	r, err := v.leaderReplica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	for id, a := range req.GetRaftAddrs() {
		v.s.addrs.set(id, a)
	}
	timeout := v.s.cfg.ApplyTimeout
	mode := req.GetAddMode()
	if err := r.lockMembers(ctx); err != nil {
		return nil, toStatus(r, err)
	}
	defer r.unlockMembers()
	if r.frozen() {
		// The record of the change would be refused (fsm
		// applySetReplicas, if any span of the group is frozen):
		// refused before the configuration changes,
		// as not ready (the caller asks again once the merge ended), not
		// as a stale range, which the range client would retry.
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonNotReady,
			fmt.Sprintf("range %d is frozen for a merge: no membership change until the merge ends", r.id), nil)
	}
	if add := req.GetAddServerId(); add != "" {
		addr, _ := v.s.addrs.get(add)
		suffrage, member, err := r.suffrage(add)
		if err != nil {
			return nil, toStatus(r, raftErr(err))
		}
		switch {
		case !member && mode == pb.AddMode_ADD_MODE_PROMOTE:
			return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonInvalidInput,
				fmt.Sprintf("%s is not a non-voter of range %d", add, r.id), nil)
		case member && (mode == pb.AddMode_ADD_MODE_NONVOTER || (mode == pb.AddMode_ADD_MODE_PROMOTE && suffrage == raft.Voter)):
			// A retried request (or an add of a voter as a non-voter,
			// which AddNonvoter would leave a voter anyway): the
			// configuration has it already.
		case member:
			// A non-voter's promotion (it has the log already), or a
			// voter's address refreshed.
			if err := r.raft.AddVoter(raft.ServerID(add), raft.ServerAddress(addr), 0, timeout).Error(); err != nil {
				return nil, toStatus(r, raftErr(err))
			}
		default:
			// A new member takes a snapshot of the state rather than the
			// whole log.
			if err := r.compact(); err != nil {
				return nil, toStatus(r, fmt.Errorf("compact before adding a member: %w", err))
			}
			f := r.raft.AddVoter
			if mode == pb.AddMode_ADD_MODE_NONVOTER {
				f = r.raft.AddNonvoter
			}
			if err := f(raft.ServerID(add), raft.ServerAddress(addr), 0, timeout).Error(); err != nil {
				return nil, toStatus(r, raftErr(err))
			}
		}
		if mode == pb.AddMode_ADD_MODE_NONVOTER && req.GetRemoveServerId() == "" {
			return &pb.ChangeReplicasResponse{Range: r.fsm.Descriptor()}, nil
		}
	}
	if rm := req.GetRemoveServerId(); rm != "" {
		if rm == v.s.id {
			return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonInvalidInput, "transfer leadership before removing the leader", nil)
		}
		if req.GetRemoveOnlyNonvoter() {
			suffrage, member, err := r.suffrage(rm)
			if err != nil {
				return nil, toStatus(r, raftErr(err))
			}
			if member && suffrage == raft.Voter {
				return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonInvalidInput,
					fmt.Sprintf("%s is a voter of range %d, not a non-voter", rm, r.id), nil)
			}
			if !member {
				// Removed already (the other clean-up, or a retry): the
				// voters, and so the descriptor, are as they are.
				return &pb.ChangeReplicasResponse{Range: r.fsm.Descriptor()}, nil
			}
		}
		if err := r.raft.RemoveServer(raft.ServerID(rm), 0, timeout).Error(); err != nil {
			return nil, toStatus(r, raftErr(err))
		}
	}
	// A crash here leaves the configuration ahead of the descriptor
	// (tests arm it: the master's check records it).
	if err := failpoint.Inject("partitionserver/change-replicas/before-record"); err != nil {
		return nil, toStatus(r, err)
	}
	reps, err := r.voterReplicas()
	if err != nil {
		return nil, toStatus(r, raftErr(err))
	}
	res, err := v.run(ctx, r, pb.CommandKind_COMMAND_KIND_SET_REPLICAS, &pb.SetReplicasCommand{Replicas: reps})
	if err != nil {
		return nil, err
	}
	return &pb.ChangeReplicasResponse{Range: res.Range, Spans: res.Spans}, nil
}

// TransferLeader hands leadership to another voter and waits for it.
func (v *service) TransferLeader(ctx context.Context, req *pb.TransferLeaderRequest) (*pb.TransferLeaderResponse, error) {
	start := time.Now()
	defer func() { reshapeSeconds.WithLabelValues("transfer-leader").Observe(time.Since(start).Seconds()) }()
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	if r.leaderID() == req.GetToServerId() {
		return &pb.TransferLeaderResponse{}, nil
	}
	if !r.isLeader() {
		return nil, toStatus(r, ErrNotLeader)
	}
	if !r.isVoter(req.GetToServerId()) {
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonInvalidInput,
			fmt.Sprintf("%s is not a voter of range %d", req.GetToServerId(), r.id), nil)
	}
	addr := req.GetToRaftAddr()
	if a, ok := v.s.addrs.get(req.GetToServerId()); ok {
		addr = a
	}
	if err := r.transferLeadership(raft.ServerID(req.GetToServerId()), raft.ServerAddress(addr)); err != nil {
		// raft may keep refusing writes after a failed transfer.
		go v.s.watchTransfer(r.member, start)
		return nil, toStatus(r, raftErr(err))
	}
	return &pb.TransferLeaderResponse{}, nil
}

// SplitKey proposes the PartitionKey halving the range by size.
func (v *service) SplitKey(ctx context.Context, req *pb.SplitKeyRequest) (*pb.SplitKeyResponse, error) {
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	key, ok, err := r.fsm.MedianKey()
	if err != nil {
		return nil, toStatus(r, err)
	}
	return &pb.SplitKeyResponse{SplitKey: key, Ok: ok}, nil
}

// raftErr maps raft's membership errors onto the replica layer's.
func raftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return ErrNotLeader
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShuttingDown
	case errors.Is(err, raft.ErrEnqueueTimeout):
		// A configuration change still pending, or a new leader's first
		// entry not yet committed: nothing was proposed.
		return fmt.Errorf("%w: %v", ErrBusy, err)
	}
	return err
}
