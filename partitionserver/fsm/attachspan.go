package fsm

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// Group-wide: the proposer addresses the group's namesake, but the entry
// reads and changes no span of its own group's but the one it adds, and
// all of them list the group's replicas (docs/range-groups.md, stage 8).
func init() { registerGroupWide(pb.CommandKind_COMMAND_KIND_ATTACH_SPAN, applyAttachSpan) }

// ErrNotOwnGroup refuses an attach of a range the command names as a span
// of another range's Raft group: only the only range of a group of its own
// attaches (the master isolates a range first), since the attach ends the
// right range's group on every server.
var ErrNotOwnGroup = errors.New("fsm: the range is not the only range of a Raft group of its own")

// AttachHooks is the optional part of Hooks told that range right, until
// now the only span of a Raft group of its own (named by right), became a
// span of group (ATTACH_SPAN, or a snapshot of group that carried the
// attach to a replica that missed it): right's own group ends on this
// server, but right's record and rows stay, group's now. Called after the
// change is committed to the file, on the apply goroutine: it must not
// block.
type AttachHooks interface {
	RangeAttached(group, right uint64)
}

// attachedSpan is a range an ATTACH_SPAN of the batch took into the group,
// for the hooks.
type attachedSpan struct{ group, right uint64 }

// applyAttachSpan makes cmd.right, the only range of a Raft group of its
// own, frozen at cmd.right_freeze_index, a span of this group without
// copying a row (docs/range-groups.md, stage 8): on every server holding
// a replica of this group, right's replica shares the state file, has
// applied the freeze (the master waited for every replica of right before
// it recorded the decision, and the apply loop waits again, waitMerges),
// and cannot change after it, so its entities and request records, keyed
// by table and PartitionKey, already sit where the span reads them. The
// entry rewrites right's record to name this group: generation past
// right's, this group's replicas, unfrozen, the applied index this
// entry's, its entity count, bytes and clock kept. Right's own group sees
// at its next batch that no record names it (liveSpans: gone), and
// AttachHooks.RangeAttached stops it on this server.
//
// Decided from this group's replicated state and the command only, so
// that it applies on every replica or on none:
//   - malformed (no right, id or table id 0, no freeze index, right is
//     this group's id): ErrBadCommand;
//   - right already a span of this group: its descriptor again, no change
//     (a repeat whose answer was lost);
//   - right named as a span of another range's group: ErrNotOwnGroup;
//   - right's keys meet an unfrozen span of this group of its table:
//     ErrRangeExists (invariant 1).
//
// The group's span cap is not checked: the master checks room before it
// records the decision, and a refusal after that COMMIT would leave right
// frozen for good (nothing unfreezes a committed freeze).
//
// What the entry takes from right's replica here (its counters, clock,
// generation and span) is what the freeze left, alike on every server:
// past its freeze right's log changes none of it (writes, splits,
// merges, detaches, adds and membership changes are refused on a frozen
// range). A deleted table's later freeze (table_deleted) and the applied
// index may differ between servers, so neither is read. Right's births
// (recent_splits) are entries of its own log and its add floor and list
// a namesake's, so neither goes with the span.
func applyAttachSpan(c *applyCtx, payload []byte) *Result {
	var cmd pb.AttachSpanCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil || cmd.GetRight() == nil {
		return &Result{Err: fmt.Errorf("%w: attach span", ErrBadCommand)}
	}
	want := cmd.GetRight()
	id := want.GetRangeId()
	switch {
	case id == 0 || want.GetTableId() == 0 || cmd.GetRightFreezeIndex() == 0:
		return &Result{Err: fmt.Errorf("%w: attach span without a range or a freeze index", ErrBadCommand)}
	case id == c.group:
		return &Result{Err: fmt.Errorf("%w: attach of range %d to its own group", ErrBadCommand, id)}
	}
	if sp := c.liveSpan(id); sp != nil {
		return &Result{Range: sp.state.GetRange()}
	}
	if g := rangegroup.GroupOf(want); g != id {
		return &Result{Err: fmt.Errorf("%w: range %d is named a span of group %d", ErrNotOwnGroup, id, g)}
	}
	if o := c.overlapping(want); o != 0 {
		return &Result{Err: fmt.Errorf("%w: range %d overlaps range %d of group %d", ErrRangeExists, id, o, c.group)}
	}
	rs, err := getState(c.tx, id)
	if err != nil || !rs.GetFrozen() || rs.GetAppliedIndex() < cmd.GetRightFreezeIndex() ||
		rs.GetFrozenIndex() != cmd.GetRightFreezeIndex() || rangegroup.GroupOf(rs.GetRange()) != id ||
		rs.GetRange().GetTableId() != want.GetTableId() ||
		rs.GetRange().GetStart() != want.GetStart() || rs.GetRange().GetEnd() != want.GetEnd() {
		// applyMerge's reasoning holds here word for word: the master
		// proposes an attach only once every replica of right applied
		// the freeze on this group's servers, and after recording the
		// decision COMMIT for that freeze, so right is never unfrozen
		// from it and every replica here is frozen at exactly that index
		// from then on. Without it this replica cannot take the rows
		// over, and going on would diverge.
		//
		// It panics rather than refuse: a refusal is safe only if every
		// replica of this group decides alike, and this reads right's
		// replica on this server, which is not this group's log: each
		// server's replica of it may have applied a different prefix of
		// its own log (one still frozen at the freeze, another past an
		// unfreeze), so some replicas would attach and others refuse,
		// and the group would diverge silently. The leader checks before
		// proposing (partitionserver's AttachSpan: colocated,
		// checkMergeFreeze) instead.
		panic(fmt.Sprintf("fsm: group %d: attach of range %d at freeze index %d, but its replica here is %v (err %v)",
			c.group, id, cmd.GetRightFreezeIndex(), rs, err))
	}
	names := c.carrier().state // the namesake when live: every span lists the group's replicas
	d := proto.Clone(rs.GetRange()).(*pb.RangeDescriptor)
	d.GroupId = c.group
	d.Generation = max(rs.GetRange().GetGeneration(), want.GetGeneration()) + 1
	d.Replicas = names.GetRange().GetReplicas()
	st := &pb.RangeState{
		Range: d, AppliedIndex: c.log.Index, LastTimestampUnixNano: rs.GetLastTimestampUnixNano(),
		EntityCount: rs.GetEntityCount(), Bytes: rs.GetBytes(), Bootstrap: names.GetBootstrap(),
	}
	// Stored now, not only with the batch's spans at its end: a later
	// entry of the batch reading the file finds it, and the record no
	// longer names right's own group.
	if err := putState(c.tx, st); err != nil {
		return &Result{Err: err}
	}
	c.addSpan(st)
	if ns := c.span(c.group); ns != nil && ns.state.GetRange().GetGroupId() == 0 {
		// A namesake whose record names no group ("its group's only
		// span": Store.OpenRange would look for no sibling, and a
		// restart would open the group without the span) names it now,
		// as applyAddSpan rewrites it; GroupOf reads the same, so its
		// generation is kept.
		st := ns.edit(c)
		st.Range = proto.Clone(st.GetRange()).(*pb.RangeDescriptor)
		st.Range.GroupId = c.group
	}
	// The span's cursor was its old Range's; the table's prunes rescan.
	c.store.tablePrune(d.GetTableId()).invalidate()
	c.attached = append(c.attached, attachedSpan{group: c.group, right: id})
	return &Result{Range: d}
}
