package fsm

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// A span-addressed command: the envelope names the group's namesake (0),
// whose record keeps the group's adds.
func init() { register(pb.CommandKind_COMMAND_KIND_ADD_SPAN, applyAddSpan) }

// ErrRangeRetired refuses an add of a range id the group will not take
// again: below its namesake's add floor, or added once and no longer one
// of its spans (detached, merged or deleted since).
var ErrRangeRetired = errors.New("fsm: range id retired from the group")

// ErrGroupFull refuses an add of a new span to a group that already holds
// AddSpanCommand.max_spans live spans: the cap the master read before it
// committed the create may have been passed by creates racing into the
// group since, and only the group's own state counts them all.
var ErrGroupFull = errors.New("fsm: the group holds its most spans")

// addedGeneration is the generation of a span ADD_SPAN stores: past the
// generation 1 the master records a new table's range at, so the map
// adopts the stored descriptor (the namesake's replicas) from the answer
// or a heartbeat whatever replicas the master guessed.
const addedGeneration = 2

// applyAddSpan stores cmd.range, a new table's first range, as a span of
// the group (docs/range-groups.md, stage 7, step 2): its record names the
// group, lists the namesake's replicas (invariant 2 by construction: the
// proposer's copy of the group's membership may be stale), has generation
// 2, the entry's applied index and the namesake's bootstrap flag, and is a
// live span of the batch from this entry on (SpansChanged indexes it). No
// Raft group starts and no row moves: the table is new, its bucket is
// created here, and its spans' prune cursors start over.
//
// Every decision reads the group's replicated state only, never another
// group's records in the file (which differ between servers), so that the
// add applies on every replica or on none:
//   - malformed (no range, id or table id 0, a group_id naming another group, a floor
//     above the id), or an envelope naming a span other than the
//     namesake: ErrBadCommand;
//   - the namesake frozen: ErrRangeFrozen (not live: applyCommand
//     refuses, ErrRangeNotFound);
//   - the id below the namesake's add_floor, or in its added_range_ids and
//     no longer a span of the group: ErrRangeRetired (the fence);
//   - in added_range_ids and still a span: that span's descriptor again,
//     no change (a retry whose answer was lost), whatever the cap;
//   - a cap (max_spans, not 0) and the group's live spans (the namesake
//     and frozen ones included, as the master counts them) that many or
//     more: ErrGroupFull, no change;
//   - the group's name or one of its spans otherwise, or a range whose
//     keys meet an unfrozen span's of the same table: ErrRangeExists.
//
// The fence exists for a deposed master's add that arrives after the span
// left the group (detached, or its table deleted): without it the entry
// would replace the span's record, taking the span from the group serving
// it, on servers whose rows for it differ. The namesake records every id
// it adds at or above the floor; the command's floor (the proposer's
// lowest pending add) raises add_floor, and ids below it leave the list,
// so the list holds only adds still pending at the proposer.
//
// A record of the id stored here that is not a span of the group (another
// group's, created ahead by mistake) is replaced, as applySplitSpan
// replaces one: other replicas do not hold it, so refusing here alone
// would fork the group. Its own group, if open, finds the record naming
// another group at its next batch and drops the span. Rows such a record's
// group wrote stay in the bucket; the span's counters start at 0 on every
// replica (they are replicated state, and those rows are not).
//
// A namesake whose record names no group (group_id 0: "its group's only
// span", so Store.OpenRange would look for no sibling) is rewritten to
// name the group, as cut does for an in-group split; GroupOf reads the
// same, so its generation is kept.
func applyAddSpan(c *applyCtx, payload []byte) *Result {
	var cmd pb.AddSpanCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil {
		return &Result{Err: fmt.Errorf("%w: add span", ErrBadCommand)}
	}
	want := cmd.GetRange()
	id := want.GetRangeId()
	switch {
	case want == nil || id == 0 || want.GetTableId() == 0:
		return &Result{Err: fmt.Errorf("%w: add span without a range", ErrBadCommand)}
	case want.GetGroupId() != 0 && want.GetGroupId() != c.group:
		return &Result{Err: fmt.Errorf("%w: add span of group %d to group %d", ErrBadCommand, want.GetGroupId(), c.group)}
	case cmd.GetFloor() > id:
		return &Result{Err: fmt.Errorf("%w: add span %d with floor %d", ErrBadCommand, id, cmd.GetFloor())}
	case c.state.GetRange().GetRangeId() != c.group:
		return &Result{Err: fmt.Errorf("%w: add span addresses range %d, not group %d's namesake", ErrBadCommand, c.state.GetRange().GetRangeId(), c.group)}
	case c.state.GetFrozen():
		return &Result{Err: fmt.Errorf("%w: group %d cannot add range %d", ErrRangeFrozen, c.group, id)}
	}
	added := slices.Contains(c.state.GetAddedRangeIds(), id)
	span := c.liveSpan(id)
	switch {
	case id < c.state.GetAddFloor() || (added && span == nil):
		return &Result{Err: fmt.Errorf("%w: range %d in group %d (add floor %d)", ErrRangeRetired, id, c.group, c.state.GetAddFloor())}
	case added:
		return &Result{Range: span.state.GetRange()}
	case id == c.group || span != nil:
		return &Result{Err: fmt.Errorf("%w: range %d in group %d", ErrRangeExists, id, c.group)}
	case cmd.GetMaxSpans() > 0 && len(c.spans) >= int(cmd.GetMaxSpans()):
		return &Result{Err: fmt.Errorf("%w: group %d holds %d spans, at most %d", ErrGroupFull, c.group, len(c.spans), cmd.GetMaxSpans())}
	}
	if o := c.overlapping(want); o != 0 {
		// Two spans of the group would own the same keys (invariant 1).
		return &Result{Err: fmt.Errorf("%w: range %d overlaps range %d of group %d", ErrRangeExists, id, o, c.group)}
	}
	if _, err := tableBucket(c.tx, want.GetTableId(), true); err != nil {
		return &Result{Err: err}
	}
	names := c.state.GetRange()
	if names.GetGroupId() == 0 {
		names = proto.Clone(names).(*pb.RangeDescriptor)
		names.GroupId = c.group
		c.state.Range = names
	}
	desc := &pb.RangeDescriptor{
		RangeId: id, GroupId: c.group, Table: want.GetTable(), TableId: want.GetTableId(),
		Start: want.GetStart(), End: want.GetEnd(), Generation: addedGeneration, Replicas: names.GetReplicas(),
	}
	rs := &pb.RangeState{Range: desc, AppliedIndex: c.log.Index, Bootstrap: c.state.GetBootstrap()}
	// Stored now, not only with the batch's spans at its end, so that a
	// later entry of the batch reading the file finds it.
	if err := putState(c.tx, rs); err != nil {
		return &Result{Err: err}
	}
	c.addSpan(rs)
	c.state.AddFloor = max(c.state.GetAddFloor(), cmd.GetFloor())
	c.state.AddedRangeIds = slices.DeleteFunc(append(c.state.GetAddedRangeIds(), id), func(a uint64) bool { return a < c.state.GetAddFloor() })
	// The new table's cursors start over, and a replaced record's Range
	// here kept one for its own span.
	c.store.tablePrune(want.GetTableId()).invalidate()
	return &Result{Range: desc}
}

// overlapping is the id of an unfrozen span of the batch in d's table
// whose keys meet d's, 0 when none. Frozen spans are left out: whether one
// is still in the batch differs between replicas while another group's
// merge takes it (applyDetachSpan), and a frozen span serves nothing.
func (c *applyCtx) overlapping(d *pb.RangeDescriptor) uint64 {
	for _, sp := range c.spans {
		o := sp.state.GetRange()
		if sp.state.GetFrozen() || o.GetTableId() != d.GetTableId() {
			continue
		}
		// [a, b) and [c, d) meet when a < d and c < b ("" ends: none).
		if (d.GetEnd() == "" || o.GetStart() < d.GetEnd()) && (o.GetEnd() == "" || d.GetStart() < o.GetEnd()) {
			return sp.r.id
		}
	}
	return 0
}

// liveSpan is the batch's live span of range id, nil when the group does
// not serve it. Read only, as splitSpanAlready reads the batch's spans.
func (c *applyCtx) liveSpan(id uint64) *spanApply {
	for _, sp := range c.spans {
		if sp.r.id == id {
			return sp
		}
	}
	return nil
}
