package scheduler

import "time"

// Snapshot is everything the policies know about the cluster at one moment.
type Snapshot struct {
	// Now is the time of the snapshot; every duration is measured to it.
	Now time.Time
	// Servers are the registered partition servers, sorted by ID.
	Servers []Server
	// Ranges are sorted by table id, then start key.
	Ranges []*Range
	// InFlight are the operations running now: their ranges are busy and
	// they count against the per-server limits.
	InFlight []Op
	// Recent are operations started within the longest cooldown (At set):
	// balancing and merging wait on them.
	Recent []Op
	// Slots is how many new operations may start.
	Slots int
}

// Server is one partition server.
type Server struct {
	ID string
	// Live: heard from within the master's server timeout.
	Live bool
	// LastSeen is the last heartbeat (zero: never heard from by this
	// master, so neither live nor known to be down).
	LastSeen time.Time
	// Back is when the server last came back: its first heartbeat after a
	// restart (a new incarnation) or after a silence (zero: not since this
	// master leads).
	Back time.Time
	// Silent: live, but not heard from for several heartbeat intervals (a
	// pause, a cut or a crash the server timeout has not caught yet); it
	// receives no leadership (chaos seed 69: a transfer to a server cut
	// off 2.6 s before held the range's writes until it timed out).
	Silent bool
	// Slow: the server's disk commits are persistently slow (the master
	// decides from its heartbeats' medians, with hysteresis). It receives
	// no leadership and the leaderships it holds move to a follower that
	// may lead (the drain policy; issue 10: a server with 150 ms commits
	// led a range whose writes crawled at one entry per commit). SlowMedian
	// is the figure that decided it, for the operations' reasons.
	Slow       bool
	SlowMedian time.Duration
	// SlowCleared is when the server was last found no longer slow: like
	// a server back (Back), it receives no leadership for LeaderSettle, and
	// then the leader-balance policies give it leaderships at their pace.
	SlowCleared time.Time
	// ClockSkewed: the server's clock is off from the others' by more
	// than the master's --max-clock-offset (ClockOffset, for the
	// operations' reasons). Like a slow server it receives no leadership
	// and its leaderships move off, and no draining leader falls back to
	// it: the ranges it leads refuse client writes once it is over a
	// minute off.
	ClockSkewed bool
	ClockOffset time.Duration
	// Draining servers get no new replicas or leaders and have theirs
	// moved off.
	Draining bool
	// Disk is the data directory's free space, size and reserve the
	// server last reported (zero: none; see Disk.State for what follows).
	Disk Disk
	// AttachSpans: the server announces attach_spans in its heartbeats
	// (it applies ATTACH_SPAN and serves AttachSpan). attach-cold plans
	// an attach only when every server of both groups does: an older
	// build cannot apply the entry, and the group's replicas would
	// diverge.
	AttachSpans bool
	// Zone is the server's failure domain (its --zone): the scheduler
	// spreads each range's replicas over distinct zones (zone.go). Empty:
	// none named; the server shares a zone with no other.
	Zone string
}

// Range is one range of a table with what its replicas last reported.
type Range struct {
	ID uint64
	// Group is the Raft group serving the range (rangegroup.GroupOf: the
	// range's own id unless it is a span of another range's group;
	// docs/range-groups.md). A range that shares its group does not have
	// its leadership balanced; a move of it first moves it out of its
	// group (Plan.groupAllows).
	Group   uint64
	TableID uint64
	Table   string
	// Start and End bound the PartitionKeys [Start, End); End "" is +inf.
	Start, End string
	Replicas   []Replica
	// Leader is the server last reported leading ("" unknown).
	Leader string
	// Load is the leader's last report; nil when none arrived yet.
	Load *Load
	// Frozen: a merge froze the range; nothing else may touch it.
	Frozen bool
	// Anchor: the range is an anchor, the one empty range of a reserved
	// table that founds a Raft group for tables to share (the master's
	// isAnchor; docs/range-groups.md, stage 7). Its group is an anchor
	// group; its spans leave it when hot or large (detach_hot.go), the
	// anchor never.
	Anchor bool
	// Pending: the range is recorded in another range's group and not yet
	// added to it (the master's pendingAdd: generation 1). The group does
	// not serve it yet, so its apply's span cap does not count it, nor
	// does detach-over-cap.
	Pending bool
	Trend
}

// Replica is one member of a range's Raft group.
type Replica struct {
	Server string
	// Applied is the Raft index the replica last reported applied.
	Applied uint64
	// Missing: the replica's server is live but does not report hosting
	// it (it was never created, or was lost); it may not lead.
	Missing bool
	// Broken: the replica's server reports it broken (its open found its
	// files damaged). It may not lead, its range is neither split nor
	// merged, and re-replication replaces it as it does a replica on a
	// down server.
	Broken bool
}

// Load is a leader's load report of a range.
type Load struct {
	EntitiesPerSec float64
	Bytes          uint64
	// HotKeys are the busiest PartitionKeys; Sample is a load-weighted
	// sample in key order (each key with the load since the previous).
	HotKeys []KeyLoad
	Sample  []KeyLoad
}

// KeyLoad is the load on one PartitionKey.
type KeyLoad struct {
	Key            string
	EntitiesPerSec float64
}

// Trend remembers since when a range's load stayed above the split
// threshold (HotSince), above half of it (WarmSince: a span of an anchor
// group leaves the group then, detach_hot.go) or below the merge
// threshold (ColdSince); zero when it is not.
type Trend struct {
	HotSince, WarmSince, ColdSince time.Time
}

// Observe folds one load report taken at now into the trend.
func (t *Trend) Observe(cfg Config, entitiesPerSec float64, now time.Time) {
	// Written only on a change: the simulator observes 100,000 ranges a
	// step, and rewriting unchanged times dirtied all their memory.
	if hot := entitiesPerSec >= cfg.SplitLoad; hot == t.HotSince.IsZero() {
		t.HotSince = pick(hot, now)
	}
	if warm := entitiesPerSec >= cfg.SplitLoad/2; warm == t.WarmSince.IsZero() {
		t.WarmSince = pick(warm, now)
	}
	if cold := entitiesPerSec <= cfg.MergeLoad; cold == t.ColdSince.IsZero() {
		t.ColdSince = pick(cold, now)
	}
}

// pick is now when on, else the zero time.
func pick(on bool, now time.Time) time.Time {
	if on {
		return now
	}
	return time.Time{}
}

// HasReplica reports whether server holds a replica of r.
func (r *Range) HasReplica(server string) bool {
	return r.replica(server) != nil
}

func (r *Range) replica(server string) *Replica {
	for i := range r.Replicas {
		if r.Replicas[i].Server == server {
			return &r.Replicas[i]
		}
	}
	return nil
}

// anyBroken reports whether a replica of r is reported broken.
func (r *Range) anyBroken() bool {
	for i := range r.Replicas {
		if r.Replicas[i].Broken {
			return true
		}
	}
	return false
}

// GroupID is the Raft group serving r: Group, or r's own id when unset.
func (r *Range) GroupID() uint64 {
	if r.Group != 0 {
		return r.Group
	}
	return r.ID
}

// LeavesOnIsolate reports whether x leaves its Raft group when the master
// takes r out of that group before moving r or its leadership alone
// (master Server.isolate): a range born in the group leaves it; for the
// range the group is named after, every other range leaves instead. The
// simulator and the scenario tests model the master with it.
func LeavesOnIsolate(r, x *Range) bool {
	g := r.GroupID()
	return x.GroupID() == g && x.ID != g && (x == r || r.ID == g)
}

func (r *Range) entitiesPerSec() float64 {
	if r.Load == nil {
		return 0
	}
	return r.Load.EntitiesPerSec
}

func (r *Range) bytes() uint64 {
	if r.Load == nil {
		return 0
	}
	return r.Load.Bytes
}
