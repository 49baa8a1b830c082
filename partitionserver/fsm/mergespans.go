package fsm

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// A span-addressed command: the envelope names the left span.
func init() { register(pb.CommandKind_COMMAND_KIND_MERGE_SPANS, applyMergeSpans) }

// applyMergeSpans widens the addressed span over its right neighbour,
// another span of the same group, and deletes the neighbour's record in
// the entry's transaction (docs/range-groups.md, stage 5). Both spans'
// writes are entries of this one log, so every replica applies the merge
// after the same writes to both: nothing needs freezing, and the rows and
// request records are already in the left span's keys (spans share the
// table's bucket). The merged span's generation passes both, its counters
// add up, and its clock is the later of the two.
//
// Decided from the group's replicated state only (its spans as its log
// made them), so that it applies on every replica or on none:
//   - a repeat after it applied (the left span ends where right ended and
//     right is no longer one of the group's spans): the merged span again,
//     no change;
//   - right not a span of this group adjacent to the left one, of another
//     table: ErrNotAdjacent;
//   - either span frozen (a cross-group merge or a dropped table's freeze
//     is in progress on it): ErrRangeFrozen.
func applyMergeSpans(c *applyCtx, payload []byte) *Result {
	var cmd pb.MergeSpansCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil || cmd.GetRight() == nil {
		return &Result{Err: fmt.Errorf("%w: merge spans", ErrBadCommand)}
	}
	desc, want := c.state.GetRange(), cmd.GetRight()
	i := slices.IndexFunc(c.spans, func(sp *spanApply) bool { return sp.r.id == want.GetRangeId() })
	if i < 0 {
		if want.GetTableId() == desc.GetTableId() && desc.GetStart() < want.GetStart() && desc.GetEnd() == want.GetEnd() {
			return &Result{Range: desc} // merged already
		}
		return &Result{Err: fmt.Errorf("%w: range %d is not a span of group %d", ErrNotAdjacent, want.GetRangeId(), c.group)}
	}
	right := c.spans[i].state
	rd := right.GetRange()
	if rd.GetRangeId() == desc.GetRangeId() || rd.GetTableId() != desc.GetTableId() || desc.GetEnd() == "" || rd.GetStart() != desc.GetEnd() {
		return &Result{Err: fmt.Errorf("%w: %q..%q after %q..%q", ErrNotAdjacent, rd.GetStart(), rd.GetEnd(), desc.GetStart(), desc.GetEnd())}
	}
	if c.state.GetFrozen() || right.GetFrozen() {
		return &Result{Err: fmt.Errorf("%w: range %d or %d", ErrRangeFrozen, desc.GetRangeId(), rd.GetRangeId())}
	}
	if err := c.tx.Bucket(bucketRanges).Delete(u64(rd.GetRangeId())); err != nil {
		return &Result{Err: err}
	}
	merged := proto.Clone(desc).(*pb.RangeDescriptor)
	merged.End = rd.GetEnd()
	merged.Generation = max(desc.GetGeneration(), rd.GetGeneration()) + 1
	c.state.Range = merged
	c.state.EntityCount += right.GetEntityCount()
	c.state.Bytes += right.GetBytes()
	c.state.LastTimestampUnixNano = max(c.state.GetLastTimestampUnixNano(), right.GetLastTimestampUnixNano())
	c.dropSpan(i)
	// The span widened over records its cursor skipped.
	c.tablePrune().invalidate()
	return &Result{Range: merged}
}

// dropSpan removes the batch's i-th live span from the group: its record
// is gone, and the batch must not write it back (edited no longer lists
// it either).
func (c *applyCtx) dropSpan(i int) {
	sp := c.spans[i]
	c.dropped = append(c.dropped, sp.r)
	c.spans = slices.Delete(c.spans, i, i+1)
	c.edited = slices.DeleteFunc(c.edited, func(e *spanApply) bool { return e == sp })
	c.spansChanged = true
}
