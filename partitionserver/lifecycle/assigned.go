package lifecycle

// Assignment is what the server knows of a range the master assigns to it
// (its heartbeat answer's assigned descriptors).
type Assignment struct {
	// Hosted: a replica of the range is registered here.
	Hosted bool
	// Generation is the assigned descriptor's.
	Generation uint64
	// Started: the master says the range, at generation 1, has started
	// (it had a leader; HeartbeatResponse unstarted_range_ids does not
	// list it). Never set by a master that records no starts.
	Started bool
	// Stored: the state file holds the range (a split applied here that
	// has not started it yet).
	Stored bool
	// Stranded: Stored, no replica of the range (not even one being
	// removed) has been registered here for longer than a split takes to
	// start its new range, and the file is readable: the split applied
	// here, but starting the range failed (RangeCreated: reading its state,
	// registering it), and nothing but a restart would open it.
	Stranded bool
	// Parent: a replica here of the same table still covers the range's
	// start key (the split that creates the range has yet to reach it,
	// through its log or a snapshot); ParentQuiet: that replica is quiet.
	Parent, ParentQuiet bool
	// OfGroup: the range is a span of another range's Raft group (its
	// descriptor's group_id names another range: docs/range-groups.md), so
	// only that group's log creates it on a replica (ADD_SPAN, SPLIT_SPAN)
	// or a snapshot of the group brings it. GroupHosted: a replica of that
	// group is registered here (not being removed); GroupQuiet: it is
	// quiet.
	OfGroup, GroupHosted, GroupQuiet bool
}

// Placement is what to do about an assigned range.
type Placement int

// The placements.
const (
	// Keep: hosted already.
	Keep Placement = iota
	// Bootstrap: create it with the descriptor's voters. A range still at
	// generation 1 has its initial voters, so every member bootstrapping
	// the same configuration is safe, as long as the range never started:
	// a bootstrapped member is empty past log entry 1 and votes for any
	// candidate whose log is longer, among them one that missed
	// acknowledged writes (reliability.md, "A floor for generation-1
	// re-creations"). A started one Joins.
	Bootstrap
	// Join: create it empty, without bootstrapping, with a join floor;
	// the leader sends its log or a snapshot. A generation-1 range that
	// has started; or no replica here will ever apply the split that
	// created it
	// (a replica down across the split that caught its parent up by a
	// snapshot taken after it, or added to the parent by a move whose
	// snapshot already held the split).
	Join
	// WakeParent: the quiet replica that covers the range's start must
	// apply the split: quiet, it never would (after a restart or a cut-off
	// it may lack the entries its quiet peers hold, and nobody talks to a
	// quiet range until a request comes). Woken, it campaigns: it wins if
	// its log is current, or its vote request opens the others, whose
	// longer log wins and replicates the split to it.
	WakeParent
	// AwaitSplit: the split comes through this server's own replica of
	// the parent (creating the range earlier would fork it).
	AwaitSplit
	// OpenStored: open the stored range as a start finds it (Stranded):
	// what a restart would do, without the restart.
	OpenStored
	// AwaitGroup: a span of another group (OfGroup) comes through that
	// group's log or a snapshot of it, never by a create of its own:
	// bootstrapped or stored here, its record would be written outside the
	// group's log (a span added to a group starts at generation 1, and
	// would be bootstrapped). When the group is not hosted here, the
	// server joins it through the group's namesake, whose own assignment
	// lists the same servers.
	AwaitGroup
	// WakeGroup: as AwaitGroup, but the group's replica here is quiet, and
	// would never apply the entry that creates the span (as WakeParent).
	WakeGroup
)

func (p Placement) String() string {
	return [...]string{"keep", "bootstrap", "join", "wake-parent", "await-split", "open-stored", "await-group", "wake-group"}[p]
}

// Assigned decides what to do about an assigned range.
func Assigned(a Assignment) Placement {
	switch {
	case a.Hosted:
		return Keep
	case a.OfGroup && a.GroupHosted && a.GroupQuiet:
		return WakeGroup
	case a.OfGroup:
		return AwaitGroup
	case a.Generation == 1 && a.Started:
		return Join
	case a.Generation == 1:
		return Bootstrap
	case !a.Stored && !a.Parent:
		return Join
	case a.Parent && a.ParentQuiet:
		return WakeParent
	case a.Stored && a.Stranded && !a.Parent:
		return OpenStored
	default:
		return AwaitSplit
	}
}
