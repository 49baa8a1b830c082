package master

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// ErrMergeAborted: the merge froze its right-hand range and the decision
// recorded for that freeze is ABORT (this master's, because a replica did
// not apply the freeze within mergeFreezeWait, or one read back: another
// master's, or a freeze older than the recorded one). The range is
// unfrozen, or will be by resumeMerges if the unfreeze failed. Merge
// returns it alongside ErrNotReady (both wrapped; gRPC Aborted, reason
// MERGE_ABORTED), so a later request or policy pass tries again, with a
// new freeze.
var ErrMergeAborted = errors.New("master: merge aborted")

// ErrNoUnfreeze: a replica of the right range did not apply the freeze in
// time, but a server of the range said in its heartbeat that it does not
// apply unfreezes (an older build, during a rolling upgrade), or fewer
// than a majority said they do (reports.canAbort), so the merge is left
// undecided and the range frozen (the next pass waits again). It wraps
// ErrNotReady: nothing to do but ask later.
var ErrNoUnfreeze = fmt.Errorf("%w: not aborted: a server of the right range does not apply unfreezes", ErrNotReady)

// A merge's outcome is decided once per freeze of its right range and
// recorded in the master's log before anyone acts on it (CockroachDB's
// merge transaction: the right-hand side is unfrozen only once the merge
// is known aborted). Only after a recorded COMMIT does a master send
// MergeRange, only after a recorded ABORT an UnfreezeRange, and a
// recorded decision is final: whichever master proposes second reads the
// first one's decision back and acts on it. So the left range never takes
// over the keys of a range that was, or may yet be, unfrozen.

// applyMergeDecision records a decision for a freeze of a range unless
// the range has one for that freeze already (it stands) or for a later
// freeze. A range's freezes are entries of its own log, so their indexes
// grow; a later freeze exists only once the range was unfrozen, which
// happens only after an ABORT of every earlier freeze: a decision for an
// earlier freeze is answered as aborted. The result's decision is the
// one in force for the freeze named.
func applyMergeDecision(s *state, payload []byte) *applyResult {
	var c pb.MergeDecisionCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	d := c.GetDecision()
	switch d.GetOutcome() {
	case pb.MergeOutcome_MERGE_OUTCOME_COMMIT, pb.MergeOutcome_MERGE_OUTCOME_ABORT:
	default:
		return &applyResult{err: ErrBadCommand}
	}
	if d.GetRightRangeId() == 0 || d.GetFreezeIndex() == 0 {
		return &applyResult{err: ErrBadCommand}
	}
	if _, ok := s.ranges[d.GetRightRangeId()]; !ok {
		return &applyResult{err: ErrRangeNotFound}
	}
	d = attachCommitFit(s, d)
	old := s.mergeDecisions[d.GetRightRangeId()]
	switch {
	case old.GetFreezeIndex() == d.GetFreezeIndex():
		return &applyResult{decision: old}
	case old.GetFreezeIndex() > d.GetFreezeIndex():
		return &applyResult{decision: &pb.MergeDecision{
			RightRangeId: d.GetRightRangeId(), FreezeIndex: d.GetFreezeIndex(), Outcome: pb.MergeOutcome_MERGE_OUTCOME_ABORT,
		}}
	}
	s.mergeDecisions[d.GetRightRangeId()] = d
	return &applyResult{decision: d, recorded: true}
}

// attachCommitFit turns a COMMIT that attaches the range to the group of
// an anchor that is gone (no anchor, or its table deleted, by the time
// the decision commits) into an ABORT: no group would take the range, and
// a recorded COMMIT is final, so the range stayed frozen for good. The
// master's own check (attachUnfit) runs before the proposal and reads a
// map that may change before the decision commits; this one is the log's,
// alike on every master. Pure over s.
func attachCommitFit(s *state, d *pb.MergeDecision) *pb.MergeDecision {
	if d.GetAttachGroup() == 0 || d.GetOutcome() != pb.MergeOutcome_MERGE_OUTCOME_COMMIT || s.liveAnchor(d.GetAttachGroup()) != nil {
		return d
	}
	out := proto.Clone(d).(*pb.MergeDecision)
	out.Outcome = pb.MergeOutcome_MERGE_OUTCOME_ABORT
	return out
}

// dropLeftAttach forgets range old's decision when the map records it
// (d, the same range) leaving the group a recorded attach took it into
// (a detach: a group of its own again, whose log starts afresh). That
// decision was for a freeze in the range's log before the attach; the
// new log's freezes have indexes of their own, which the old decision
// would answer as aborted (mergeDecision) for as long as they stay below
// its index. While the range is a span of that group the decision stays:
// it tells a resuming master the attach is done (resumeAlone).
func (s *state) dropLeftAttach(old, d *pb.RangeDescriptor) {
	dec := s.mergeDecisions[d.GetRangeId()]
	g := dec.GetAttachGroup()
	if g != 0 && old != nil && rangegroup.GroupOf(old) == g && rangegroup.GroupOf(d) != g {
		delete(s.mergeDecisions, d.GetRangeId())
	}
}

// abortedThrough is the highest freeze index of range id that the
// recorded decisions make an aborted one (0: none): every freeze up to it
// was aborted (an earlier one than the recorded freeze, or the recorded
// one if its outcome is ABORT), so no Merge naming it is ever proposed. A
// replica of the range frozen at such an index awaits no merge
// (DeleteReplicaRequest.aborted_through).
func (s *state) abortedThrough(id uint64) uint64 {
	d, ok := s.mergeDecisions[id]
	switch {
	case !ok:
		return 0
	case d.GetOutcome() == pb.MergeOutcome_MERGE_OUTCOME_ABORT:
		return d.GetFreezeIndex()
	}
	return d.GetFreezeIndex() - 1
}

// mergeDecision is the decision recorded for a range's freeze at index,
// if any (a freeze before the latest recorded one counts as aborted).
func (s *state) mergeDecision(rangeID, index uint64) (pb.MergeOutcome, bool) {
	d, ok := s.mergeDecisions[rangeID]
	switch {
	case !ok || d.GetFreezeIndex() < index:
		return pb.MergeOutcome_MERGE_OUTCOME_UNSPECIFIED, false
	case d.GetFreezeIndex() > index:
		return pb.MergeOutcome_MERGE_OUTCOME_ABORT, true
	}
	return d.GetOutcome(), true
}
