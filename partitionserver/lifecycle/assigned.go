package lifecycle

// Assignment is what the server knows of a range the master assigns to it
// (its heartbeat answer's assigned descriptors).
type Assignment struct {
	// Hosted: a replica of the range is registered here.
	Hosted bool
	// Generation is the assigned descriptor's.
	Generation uint64
	// Stored: the state file holds the range (a split applied here that
	// has not started it yet).
	Stored bool
	// Parent: a replica here of the same table still covers the range's
	// start key (the split that creates the range has yet to reach it,
	// through its log or a snapshot); ParentQuiet: that replica is quiet.
	Parent, ParentQuiet bool
	// ParentStale: every replica here that covers the range's start is of
	// a range the master no longer assigns to this server (a later
	// generation removed it, a move off this server), and predates the
	// range (its generation is below the range's). It is outside its
	// range's configuration: no leader sends it the split any more.
	ParentStale bool
}

// Placement is what to do about an assigned range.
type Placement int

// The placements.
const (
	// Keep: hosted already.
	Keep Placement = iota
	// Bootstrap: create it with the descriptor's voters. A range still at
	// generation 1 has its initial voters, so every member bootstrapping
	// the same configuration is safe.
	Bootstrap
	// Join: create it empty, without bootstrapping; the leader sends a
	// snapshot. No replica here will ever apply the split that created it
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
	// DropStale: delete the stale replica that covers the range's start
	// (only at the generation seen: one a move re-created since is a
	// voter and stays), then join empty as Join does. Deleting it first
	// is what makes the join safe: the stale replica can no longer apply
	// the split and fork the range. Waiting for the master to collect it
	// (replica GC, a 2 s grace after the server's first report) left a
	// split-born range a voter short for seconds after a heal (chaos seed
	// 299: a server cut off across a split and the move that took it off
	// the parent right after; docs/reliability.md, session 9).
	DropStale
)

func (p Placement) String() string {
	return [...]string{"keep", "bootstrap", "join", "wake-parent", "await-split", "drop-stale"}[p]
}

// Assigned decides what to do about an assigned range.
func Assigned(a Assignment) Placement {
	switch {
	case a.Hosted:
		return Keep
	case a.Generation == 1:
		return Bootstrap
	case !a.Stored && !a.Parent:
		return Join
	case a.Parent && a.ParentStale && !a.Stored:
		// Woken, a stale parent would campaign for ever (no member
		// answers it) and never apply the split.
		return DropStale
	case a.Parent && a.ParentQuiet:
		return WakeParent
	default:
		return AwaitSplit
	}
}
