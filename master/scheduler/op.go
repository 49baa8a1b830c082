package scheduler

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Kind is the kind of an operation.
type Kind int

// The operations the master knows how to run.
const (
	Split Kind = iota + 1
	Merge
	Move
	TransferLeader
	// Isolate takes Range, a span of an anchor group (a Raft group founded
	// by an anchor for tables to share; docs/range-groups.md, stage 7),
	// out of that group into a group of its own on the same replicas
	// (the master's isolate; detach_hot.go). Group names the group left.
	Isolate
	// Attach takes Range, the only range of its table and of a Raft group
	// of its own, into the anchor group Group (the anchor's range id) as a
	// span, its rows where they are (docs/range-groups.md, stage 8;
	// attach_cold.go): the master co-locates Range's replicas onto the
	// group's servers, freezes it and has the group's leader apply
	// AttachSpan. Both Range and the anchor are occupied (Ranges), so
	// that no new table's add (which claims the anchor) raises the
	// group's count meanwhile.
	Attach
)

func (k Kind) String() string {
	switch k {
	case Split:
		return "split"
	case Merge:
		return "merge"
	case Move:
		return "move"
	case TransferLeader:
		return "transfer-leader"
	case Isolate:
		return "isolate"
	case Attach:
		return "attach"
	}
	return "unknown"
}

// Rules name why an operation was planned; events and metrics carry them.
const (
	RuleReReplicate       = "re-replicate"
	RuleDrainLeader       = "drain-leader"
	RuleDrainReplica      = "drain-replica"
	RuleSlowDiskLeader    = "slow-disk-leader"
	RuleClockSkewLeader   = "clock-skew-leader"
	RuleDiskFullLeader    = "disk-full-leader"
	RuleDiskFullReplica   = "disk-full-replica"
	RuleZoneDiversity     = "zone-diversity"
	RuleSplitLoad         = "split-load"
	RuleSplitSize         = "split-size"
	RuleDetachHot         = "detach-hot"
	RuleDetachLarge       = "detach-large"
	RuleDetachOverCap     = "detach-over-cap"
	RuleMergeCold         = "merge-cold"
	RuleAttachCold        = "attach-cold"
	RuleBalanceLeaderLoad = "balance-leader-load"
	RuleBalanceLeaderFill = "balance-leader-fill"
	RuleSplitBalance      = "split-balance"
	RuleBalanceLeaders    = "balance-leader-count"
	RuleBalanceReplicas   = "balance-replica-count"
)

// Op is one operation with the rule and figures that caused it.
type Op struct {
	Kind  Kind
	Range uint64
	// Right is the right neighbour a Merge absorbs.
	Right uint64
	// Key is the split key; "" with a size split (the range picks its
	// size median).
	Key string
	// From and To are the servers of a Move or TransferLeader; a Split's To
	// is the replica that should lead the new right-hand range and its
	// From the range's leader when planned (the server the load moves
	// off).
	From, To string
	Rule     string
	Reason   string
	Figures  map[string]float64
	// At is when the operation started (set by whoever runs it).
	At time.Time
	// Done is when it finished (zero while it runs, or when the runner
	// does not say): a split's or merge's range carries the report of its
	// old shape until its leader reports after that.
	Done time.Time
	// Failed: it finished with an error (set with Done).
	Failed bool
	// InGroup: a Split that keeps the right-hand range in the range's
	// Raft group (Config.SharedHost); To is then the range's leader.
	InGroup bool
	// Group: a TransferLeader of a range that shares its Raft group names
	// the group whose leadership it moves (0 otherwise), so that the
	// group's cooldown outlives Range leaving it; an Isolate names the
	// anchor group Range leaves (every range of it busy while it runs),
	// an Attach the anchor group Range joins (likewise).
	Group uint64
	// Whole: a Move of a range whose Raft group serves several ranges
	// moves the group whole (one membership change for every span; the
	// master's moveGroup), not the range alone (which the master first
	// takes out of its group: Server.isolate). Planned through the
	// group's namesake by the rules that must move a replica off its
	// server (re-replication, drain, zone diversity, a full disk), every
	// range of the group occupied.
	Whole bool
}

// Last is when the operation was last known under way: Done when set,
// else At.
func (o Op) Last() time.Time {
	if o.Done.After(o.At) {
		return o.Done
	}
	return o.At
}

// Ranges are the ranges the operation occupies.
func (o Op) Ranges() []uint64 {
	if o.Kind == Merge && o.Right != 0 {
		return []uint64{o.Range, o.Right}
	}
	if o.Kind == Attach && o.Group != 0 {
		return []uint64{o.Range, o.Group}
	}
	return []uint64{o.Range}
}

// balancing reports whether the op moves a leader for balance (and so
// starts the cooldown of its servers).
func (o Op) balancing() bool {
	switch o.Rule {
	case RuleBalanceLeaderLoad, RuleBalanceLeaderFill, RuleBalanceLeaders, RuleSplitBalance:
		return true
	}
	return false
}

// String renders the op on one line, figures in name order: the form of
// the golden files and of the logs.
func (o Op) String() string {
	var b strings.Builder
	switch o.Kind {
	case Split:
		if o.Key == "" {
			fmt.Fprintf(&b, "split r%d at its size median", o.Range)
		} else {
			fmt.Fprintf(&b, "split r%d at %q", o.Range, o.Key)
		}
		switch {
		case o.InGroup:
			b.WriteString(", in its group")
		case o.To != "":
			fmt.Fprintf(&b, ", right led by %s", o.To)
		}
	case Merge:
		fmt.Fprintf(&b, "merge r%d + r%d", o.Range, o.Right)
	case Isolate:
		fmt.Fprintf(&b, "isolate r%d from anchor group %d", o.Range, o.Group)
	case Attach:
		fmt.Fprintf(&b, "attach r%d to anchor group %d", o.Range, o.Group)
	default:
		fmt.Fprintf(&b, "%s r%d %s -> %s", o.Kind, o.Range, o.From, o.To)
		if o.Whole {
			b.WriteString(", its Raft group whole")
		}
	}
	fmt.Fprintf(&b, " [%s]", o.Rule)
	names := make([]string, 0, len(o.Figures))
	for n := range o.Figures {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%.4g", n, o.Figures[n])
	}
	return b.String()
}
