package fsm

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// A span-addressed command: the envelope names the span that leaves.
func init() { register(pb.CommandKind_COMMAND_KIND_DETACH_SPAN, applyDetachSpan) }

// applyDetachSpan moves the addressed span out of the group into a group
// of its own on the same replicas (docs/range-groups.md, stage 4): in the
// entry's transaction its record is rewritten as a split writes its right
// range's (group_id 0, generation + 1, applied index 0, bootstrap), the
// span leaves the batch (its state is not written back with the group's),
// and after the commit RangeCreated starts its group on every replica, as
// for a split's right range. No row moves: the span's rows and request
// records are in its keys, which its own group writes from now on.
//
// The new group is named by the span's range id, which names no other
// group: a span that is not its group's namesake was born in the group
// (SPLIT_SPAN), and range ids are never reused. So the namesake stays
// (its id names this group), and so does a span with no unfrozen sibling
// (it is alone, or will be once a merge takes the frozen ones; moving it
// would leave a group with no span to record the move in): ErrSpanStays.
// A frozen span stays too (ErrRangeFrozen): a cross-group merge is taking
// it over.
//
// Decided from the group's replicated state only, so that it applies on
// every replica or on none. Which spans a batch holds is not that: a
// frozen span another group's merge took is gone on the replicas that
// applied the merge and still here, frozen, on the others (spanID's
// comment). So frozen spans are left out of every decision: whether a
// sibling stays, and which span records the birth. Frozen is the log's
// (FREEZE and UNFREEZE are entries of this log), and a span is taken
// only once frozen.
//
// A span that stays records the move as a birth (recent_splits, the
// namesake's when it is an unfrozen span, else the lowest unfrozen id's):
// a replica that misses the entry and catches the group up by a snapshot,
// which deletes every span the group had there (the moved one's record
// still names the group there), learns from it to create the new group's
// replica (SplitsMissed), as for a missed split. The record keeps the
// last maxRecentSplits births: a replica that missed more detaches than
// that behind one snapshot (the master isolating the namesake of a large
// group detaches every sibling) joins the oldest new groups at their
// leaders' join floors instead, as before births were recorded.
//
// A repeat after it applied names a span the group no longer has:
// applyCommand refuses it (ErrRangeNotFound), and the proposer answers
// from the span's own group (the server's DetachRange).
func applyDetachSpan(c *applyCtx, payload []byte) *Result {
	var cmd pb.DetachSpanCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil {
		return &Result{Err: fmt.Errorf("%w: detach span", ErrBadCommand)}
	}
	desc := c.state.GetRange()
	id := desc.GetRangeId()
	stay := c.stayingSpan(id)
	switch {
	case id == c.group:
		return &Result{Err: fmt.Errorf("%w: range %d names group %d", ErrSpanStays, id, c.group)}
	case c.state.GetFrozen():
		return &Result{Err: fmt.Errorf("%w: range %d cannot leave its group", ErrRangeFrozen, id)}
	case stay == nil:
		return &Result{Err: fmt.Errorf("%w: range %d is group %d's only unfrozen span", ErrSpanStays, id, c.group)}
	}
	moved := proto.Clone(desc).(*pb.RangeDescriptor)
	moved.GroupId = 0
	moved.Generation++
	rs := &pb.RangeState{
		Range: moved, LastTimestampUnixNano: c.state.GetLastTimestampUnixNano(),
		EntityCount: c.state.GetEntityCount(), Bytes: c.state.GetBytes(), Bootstrap: true,
	}
	if err := putState(c.tx, rs); err != nil {
		return &Result{Err: err}
	}
	c.dropSpan(slices.IndexFunc(c.spans, func(sp *spanApply) bool { return sp.r.id == id }))
	st := stay.edit(c)
	st.RecentSplits = recordSplit(st.GetRecentSplits(), c.log.Index, moved)
	c.created = append(c.created, created{parent: stay.r.id, desc: moved, preferredLeader: cmd.GetPreferredLeader()})
	// The span's cursor is its old Range's; the new group's starts over.
	c.tablePrune().invalidate()
	return &Result{Range: moved}
}

// stayingSpan is the span that records a detach of span id: the
// namesake when it is an unfrozen span of the batch, else the unfrozen
// span of lowest id other than id; nil when there is none. Frozen spans
// are not candidates: whether one is still in the batch differs between
// replicas (applyDetachSpan).
func (c *applyCtx) stayingSpan(id uint64) *spanApply {
	var stay *spanApply
	for _, sp := range c.spans { // in range id order
		if sp.r.id == id || sp.state.GetFrozen() {
			continue
		}
		if stay == nil || sp.r.id == c.group {
			stay = sp
		}
	}
	return stay
}
