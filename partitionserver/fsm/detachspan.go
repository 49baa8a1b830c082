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
// (its id names this group), and so does a group's only span (it is
// already alone; moving it would leave a group with nothing to record the
// move in): ErrSpanStays. A frozen span stays too (ErrRangeFrozen): a
// cross-group merge is taking it over.
//
// A span that stays records the move as a birth (recent_splits, the
// namesake's when it is a live span, else the lowest id's): a replica
// that misses the entry and catches the group up by a snapshot, which
// deletes every span the group had there (the moved one's record still
// names the group there), learns from it to create the new group's
// replica (SplitsMissed), as for a missed split.
//
// Decided from the group's replicated state only, so that it applies on
// every replica or on none. A repeat after it applied names a span the
// group no longer has: applyCommand refuses it (ErrRangeNotFound) and the
// proposer answers from the span's record (the server's DetachRange).
func applyDetachSpan(c *applyCtx, payload []byte) *Result {
	var cmd pb.DetachSpanCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil {
		return &Result{Err: fmt.Errorf("%w: detach span", ErrBadCommand)}
	}
	desc := c.state.GetRange()
	id := desc.GetRangeId()
	switch {
	case id == c.group:
		return &Result{Err: fmt.Errorf("%w: range %d names group %d", ErrSpanStays, id, c.group)}
	case len(c.spans) < 2:
		return &Result{Err: fmt.Errorf("%w: range %d is group %d's only span", ErrSpanStays, id, c.group)}
	case c.state.GetFrozen():
		return &Result{Err: fmt.Errorf("%w: range %d cannot leave its group", ErrRangeFrozen, id)}
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
	stay := c.spans[0]
	for _, sp := range c.spans {
		if sp.r.id == c.group {
			stay = sp
		}
	}
	stay.state.RecentSplits = recordSplit(stay.state.GetRecentSplits(), c.log.Index, moved)
	c.created = append(c.created, created{parent: stay.r.id, desc: moved, preferredLeader: cmd.GetPreferredLeader()})
	// The span's cursor is its old Range's; the new group's starts over.
	c.tablePrune().invalidate()
	return &Result{Range: moved}
}
