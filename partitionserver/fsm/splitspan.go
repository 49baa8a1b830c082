package fsm

import (
	"cmp"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// A span-addressed command: the envelope names the span to split (or is 0,
// the span named like the group), and applyCommand refuses one naming no
// span of the group.
func init() { register(pb.CommandKind_COMMAND_KIND_SPLIT_SPAN, applySplitSpan) }

// SpanHooks is the optional part of Hooks told when the set of spans a
// group serves changed: a span split off in the group (SPLIT_SPAN), a span
// gone because an entry of another group took its record (a merge, a
// snapshot of the group that serves it now), a snapshot restored with
// other spans. The server keeps its span -> group index by it. Called
// after the change is committed to the file; spans are the group's live
// spans in range id order (none: the group serves nothing any more).
type SpanHooks interface {
	SpansChanged(group uint64, spans []uint64)
}

// applySplitSpan shrinks the addressed span to [start, key) and stores
// [key, end) as a new span of the same group, in the entry's transaction
// (docs/range-groups.md, stage 3). The data stays where it is (spans share
// the table's bucket), no Raft group starts (no RangeCreated), and the new
// span is a live span of the batch from this entry on: later entries of
// the same batch may address it.
//
// Every decision reads the group's replicated state only (its spans as its
// log made them), so that the split applies on every replica or on none:
//   - malformed, or new_range_id 0: ErrBadCommand;
//   - a repeat after it applied (the span ends at the key and the new span
//     is one of the group's, starting there): the result again, no change,
//     as splitAlready does for a split;
//   - the span frozen: ErrRangeFrozen; the key not strictly inside it:
//     ErrBadSplitKey;
//   - new_range_id the group's name or one of its spans: ErrRangeExists.
//     Range ids are never reused, so only a proposer's mistake gets here,
//     and refusing changes nothing; going on would overwrite a span the
//     group's log still governs. (The one input that can differ between
//     replicas is a span of the group frozen for a merge that another
//     group's entry already took away on some of them: an id naming it is
//     a reuse of a retired id, which the allocator never makes.)
//
// A record of new_range_id stored here that is not one of the group's
// live spans (another group's, created ahead by mistake, or one naming
// this group that it never opened) is replaced, as applySplit replaces
// one: other replicas do not hold it, so refusing here alone would fork
// the group. Its own group, if open, finds its record naming another
// group at its next batch and drops the span (ApplyBatch's gone test)
// instead of writing its state back.
//
// The split is not recorded in recent_splits: those tell a replica that a
// snapshot carried past a split which new groups to create
// (SplitsMissed), and an in-group split creates none; the snapshot brings
// the new span itself.
func applySplitSpan(c *applyCtx, payload []byte) *Result {
	var cmd pb.SplitSpanCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil || cmd.GetNewRangeId() == 0 {
		return &Result{Err: fmt.Errorf("%w: split span", ErrBadCommand)}
	}
	desc := c.state.GetRange()
	key, newID := cmd.GetSplitKey(), cmd.GetNewRangeId()
	if right := c.splitSpanAlready(desc, key, newID); right != nil {
		return &Result{Range: desc, Right: right}
	}
	if c.state.GetFrozen() {
		return &Result{Err: fmt.Errorf("%w: range %d cannot split", ErrRangeFrozen, desc.GetRangeId())}
	}
	if key <= desc.GetStart() || !InRange(desc, key) {
		return &Result{Err: fmt.Errorf("%w: %q", ErrBadSplitKey, key)}
	}
	if newID == c.group || c.serves(newID) {
		return &Result{Err: fmt.Errorf("%w: range %d in group %d", ErrRangeExists, newID, c.group)}
	}
	// A group of several spans names itself in every span's record: a
	// record whose group_id is 0 reads as its group's only span.
	left, right, n, size, err := c.cut(key, newID, c.group)
	if err != nil {
		return &Result{Err: err}
	}
	rs := &pb.RangeState{
		Range: right, AppliedIndex: c.log.Index, LastTimestampUnixNano: c.state.GetLastTimestampUnixNano(),
		EntityCount: n, Bytes: size, Bootstrap: c.state.GetBootstrap(),
	}
	// Stored now, not only with the batch's spans at its end, so that a
	// later entry of the batch reading the file finds it.
	if err := putState(c.tx, rs); err != nil {
		return &Result{Err: err}
	}
	c.addSpan(rs)
	// Both spans' cursors must rescan, and a replaced record's Range here
	// kept one for its own span.
	c.tablePrune().invalidate()
	return &Result{Range: left, Right: right}
}

// splitSpanAlready returns the new span of this split if it applied
// before: the span ends at the key and the group serves newID starting
// there. Read from the group's spans; the answer changes nothing, so a
// replica where that span is already gone (frozen, then merged away by
// another group's entry), which refuses the repeat instead, does not
// diverge either.
func (c *applyCtx) splitSpanAlready(desc *pb.RangeDescriptor, key string, newID uint64) *pb.RangeDescriptor {
	if key == "" || key != desc.GetEnd() {
		return nil
	}
	for _, sp := range c.spans {
		if d := sp.state.GetRange(); sp.r.id == newID && d.GetTableId() == desc.GetTableId() && d.GetStart() == key {
			return d
		}
	}
	return nil
}

// addSpan makes a span the command created one of the batch's live spans,
// in range id order, and one of the group's: the next batch starts from
// it. Readers see it once the batch is committed (Group.Span).
func (c *applyCtx) addSpan(st *pb.RangeState) {
	r := c.owner.pendingSpan(st)
	sp := &spanApply{r: r, state: st, edited: true}
	i, _ := slices.BinarySearchFunc(c.spans, r.id, func(s *spanApply, id uint64) int { return cmp.Compare(s.r.id, id) })
	c.spans = slices.Insert(c.spans, i, sp)
	c.edited = append(c.edited, sp)
	c.spansChanged = true
}
