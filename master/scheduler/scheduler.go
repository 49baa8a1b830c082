package scheduler

import (
	"sort"
	"time"
	"unsafe"
)

// Policy is one rule of the scheduler. Schedule looks at the plan's
// snapshot and adds operations to the plan; Plan.Add refuses operations on
// busy ranges or beyond the free slots, so a policy need not check either.
type Policy interface {
	Name() string
	Schedule(p *Plan)
}

// Policies are the policies in the order they run: data safety first
// (re-replication, draining), then load (a hot or large span leaving its
// anchor group before any split, then the spans of a group over its cap,
// then splits, merges, a cold table's own group joining an anchor
// group), then zone diversity (zoneDiversity), then balance.
func Policies() []Policy {
	return []Policy{
		reReplicate{}, drain{}, detachHot{}, detachOverCap{}, splitLoad{}, splitSize{}, mergeCold{}, attachCold{}, zoneDiversity{},
		balanceLeaderLoad{}, balanceLeaderFill{}, splitBalance{}, balanceLeaderCount{}, balanceReplicas{},
	}
}

// Schedule runs every policy over snap and returns the operations to start,
// at most snap.Slots of them, none on a range already busy.
func Schedule(cfg Config, snap *Snapshot) []Op {
	p := NewPlan(cfg, snap)
	for _, pol := range Policies() {
		if p.Full() {
			break
		}
		pol.Schedule(p)
	}
	return p.Ops()
}

// Plan is a snapshot with the figures the policies share (per-server
// counts and load, which ranges are busy) and the operations planned so
// far. Adding an operation updates the figures as if it were done, so that
// later decisions of the same run build on it.
type Plan struct {
	cfg     Config
	snap    *Snapshot
	out     []Op
	busy    idSet
	servers map[string]*serverStat
	order   []*serverStat // as in snap.Servers
	held    map[string][]*Range
	led     map[string][]*Range
	// groups holds the Raft groups (Range.GroupID) that serve a range other
	// than their namesake, with their ranges; nil when no group does
	// (countGroups).
	groups map[uint64]*groupStat
	// hot, big and cold index the ranges (in snapshot order) the split and
	// merge policies can act on, found in NewPlan's one pass over the
	// ranges: at 100,000 ranges a pass per policy dominated a run.
	hot  []*Range // load report and HotSince set
	big  []*Range // over SplitBytes (SplitBytes > 0)
	cold []int    // indices of ranges cold for MergeCooldown and under MergeBytes
	// moved holds the ranges whose leadership a balancing rule moved
	// within LeaderMoveCooldown, and movedGroups the Raft groups of
	// several ranges it moved (Op.Group): a group stays cooling when the
	// range a transfer named has left it since.
	moved, movedGroups idSet
	// splitAt is when each range was last split (as the left half, which
	// keeps its id), from the operations in flight and recent: when the
	// split finished (Op.Last), since its report is the old range's until
	// the leader reports after that.
	splitAt map[uint64]time.Time
	// sizeFailed holds the ranges whose size split failed within the
	// recent window (Snapshot.Recent): see splitSize.
	sizeFailed idSet
	// mergedAt is when each range last took over its right neighbour
	// (the merged range keeps the left part's id), likewise.
	mergedAt map[uint64]time.Time
	// detachedAt is when each range was last taken out of an anchor
	// group by an isolate (Op.Last), from the operations recent:
	// attach-cold waits MergeCooldown after it (attachHistory).
	detachedAt map[uint64]time.Time
	// zones is how many distinct zones the servers name (zone.go).
	zones int
	// anyBroken: a replica of some range is reported broken (reReplicate).
	anyBroken bool
	cache     [4096]statCache
}

// statCache remembers which serverStat a server id string (by its bytes'
// address) resolved to: a snapshot usually repeats the same few id strings
// across many replicas, and hashing each of them dominates large runs.
type statCache struct {
	ptr *byte
	n   int
	st  *serverStat
}

// stat returns the figures of server id (nil: not in the snapshot).
func (p *Plan) stat(id string) *serverStat {
	ptr := unsafe.StringData(id)
	e := &p.cache[(uintptr(unsafe.Pointer(ptr))>>3)%uintptr(len(p.cache))]
	if e.ptr == ptr && e.n == len(id) && ptr != nil {
		return e.st
	}
	st := p.servers[id]
	*e = statCache{ptr: ptr, n: len(id), st: st}
	return st
}

// serverStat is what the plan knows of one server.
type serverStat struct {
	id             string
	live, draining bool
	downFor        time.Duration // > 0: known down this long
	back           time.Time     // came back then (Server.Back)
	silent         bool          // Server.Silent
	slow           bool          // Server.Slow
	slowMedian     time.Duration // Server.SlowMedian
	slowCleared    time.Time     // Server.SlowCleared
	skewed         bool          // Server.ClockSkewed
	attachSpans    bool          // Server.AttachSpans
	clockOffset    time.Duration // Server.ClockOffset
	replicas       int
	leaders        int
	leaderLoad     float64
	moving         int       // replica moves in flight into or out of it
	coolUntil      time.Time // leader balancing leaves it alone until then
	disk           Disk      // Server.Disk, less what the plan's moves write there
	diskState      DiskState // disk.State()
	zone           string    // Server.Zone
}

// NewPlan indexes snap for the policies.
func NewPlan(cfg Config, snap *Snapshot) *Plan {
	p := &Plan{cfg: cfg, snap: snap, servers: make(map[string]*serverStat, len(snap.Servers))}
	for _, s := range snap.Servers {
		st := &serverStat{id: s.ID, live: s.Live, draining: s.Draining, back: s.Back, silent: s.Silent,
			slow: s.Slow, slowMedian: s.SlowMedian, slowCleared: s.SlowCleared,
			skewed: s.ClockSkewed, clockOffset: s.ClockOffset, disk: s.Disk, diskState: s.Disk.State(), zone: s.Zone,
			attachSpans: s.AttachSpans}
		if !s.Live && !s.LastSeen.IsZero() {
			st.downFor = max(snap.Now.Sub(s.LastSeen), time.Nanosecond)
		}
		p.servers[s.ID] = st
		p.order = append(p.order, st)
	}
	p.zones = countZones(p.order)
	merging := mergingIn(snap.InFlight)
	grouped := false
	for i, r := range snap.Ranges {
		p.countRange(i, r, merging)
		grouped = grouped || r.GroupID() != r.ID
	}
	if grouped {
		p.countGroups()
	}
	for _, o := range snap.InFlight {
		p.occupy(o)
		p.noteSplit(o)
		if a, b, ok := colocating(o); ok && merging[a] != nil && merging[b] != nil {
			p.occupyColocation(merging[a], merging[b])
		}
	}
	if grouped {
		p.occupyTransferred(snap.InFlight)
	}
	for _, o := range snap.Recent {
		p.noteRecent(o)
	}
	return p
}

// noteRecent folds in o, an operation started within the recent window:
// the splits and merges it made, the servers it cools, the range it moved
// for balance, a size split that failed.
func (p *Plan) noteRecent(o Op) {
	p.noteSplit(o)
	p.noteDetach(o)
	if o.Kind == Split && o.Key == "" && o.Failed {
		p.sizeFailed.add(o.Range)
	}
	p.cool(o, o.At)
	if o.Kind == TransferLeader && o.balancing() && p.snap.Now.Sub(o.At) < p.cfg.LeaderMoveCooldown {
		p.moved.add(o.Range)
		if o.Group != 0 {
			p.movedGroups.add(o.Group)
		}
	}
}

// mergingIn returns the ids of the ranges of the merges in inflight (nil
// when none), for NewPlan's one pass over the ranges to fill in: their
// co-location moves count against MaxPerServer (occupyColocation).
func mergingIn(inflight []Op) map[uint64]*Range {
	var merging map[uint64]*Range
	for _, o := range inflight {
		if a, b, ok := colocating(o); ok {
			if merging == nil {
				merging = map[uint64]*Range{}
			}
			merging[a], merging[b] = nil, nil
		}
	}
	return merging
}

// colocating returns the ranges whose co-location o runs (the master
// moves b's replicas onto a's servers first): a merge's left and right,
// an attach's anchor and range.
func colocating(o Op) (a, b uint64, ok bool) {
	switch {
	case o.Kind == Merge && o.Right != 0:
		return o.Range, o.Right, true
	case o.Kind == Attach && o.Group != 0:
		return o.Group, o.Range, true
	}
	return 0, 0, false
}

// noteDetach remembers when o, a recent isolate, took its range out of
// its group (a failed one counts too: it may have applied before it
// failed, and waiting costs only time).
func (p *Plan) noteDetach(o Op) {
	if o.Kind != Isolate {
		return
	}
	if p.detachedAt == nil {
		p.detachedAt = map[uint64]time.Time{}
	}
	if t := o.Last(); t.After(p.detachedAt[o.Range]) {
		p.detachedAt[o.Range] = t
	}
}

// countRange adds range i to the per-server figures and the policies'
// indexes, and to merging if a merge in flight names it.
func (p *Plan) countRange(i int, r *Range, merging map[uint64]*Range) {
	if merging != nil {
		if _, ok := merging[r.ID]; ok {
			merging[r.ID] = r
		}
	}
	for _, rep := range r.Replicas {
		if st := p.stat(rep.Server); st != nil {
			st.replicas++
		}
		p.anyBroken = p.anyBroken || rep.Broken
	}
	if st := p.stat(r.Leader); st != nil {
		st.leaders++
		st.leaderLoad += r.entitiesPerSec()
	}
	p.index(i, r)
}

// noteSplit remembers when o split or merged its range.
func (p *Plan) noteSplit(o Op) {
	var at *map[uint64]time.Time
	switch o.Kind {
	case Split:
		at = &p.splitAt
	case Merge:
		at = &p.mergedAt
	default:
		return
	}
	if *at == nil {
		*at = map[uint64]time.Time{}
	}
	if t := o.Last(); t.After((*at)[o.Range]) {
		(*at)[o.Range] = t
	}
}

// hotFor is how long r has carried more than SplitLoad as it is now: since
// its trend turned hot or since it was last split, whichever is later. Until
// its leader reports again, a split range's report and trend describe the
// range before the split (the left half keeps the id), so a window begun
// before the split says nothing of the half.
func (p *Plan) hotFor(r *Range) time.Duration {
	since := r.HotSince
	if t := p.splitAt[r.ID]; t.After(since) {
		since = t
	}
	return p.snap.Now.Sub(since)
}

// justSplit reports whether r was split within SplitWindow: its report
// may still describe the range before the split.
func (p *Plan) justSplit(r *Range) bool {
	t, ok := p.splitAt[r.ID]
	return ok && p.snap.Now.Sub(t) < p.cfg.SplitWindow
}

// justMerged reports whether r took over its right neighbour within
// SplitWindow (or the merge is still running): until its leader reports
// again, r's report and trend are those of the left part alone, whose
// bytes leave out the part it took over.
func (p *Plan) justMerged(r *Range) bool {
	t, ok := p.mergedAt[r.ID]
	return ok && p.snap.Now.Sub(t) < p.cfg.SplitWindow
}

// index files range i in the lists of the policies that may act on it.
func (p *Plan) index(i int, r *Range) {
	if r.Load == nil {
		return
	}
	if !r.HotSince.IsZero() {
		p.hot = append(p.hot, r)
	}
	if p.cfg.SplitBytes > 0 && r.Load.Bytes > p.cfg.SplitBytes {
		p.big = append(p.big, r)
	}
	if r.Load.Bytes <= p.cfg.MergeBytes && p.coldFor(r) {
		p.cold = append(p.cold, i)
	}
}

// Ops returns the operations planned.
func (p *Plan) Ops() []Op { return p.out }

// Full reports whether every slot is taken.
func (p *Plan) Full() bool { return len(p.out) >= p.snap.Slots }

// Now is the snapshot's time.
func (p *Plan) Now() time.Time { return p.snap.Now }

// Add plans o unless a slot or one of its ranges is not free. It reports
// whether o was planned.
func (p *Plan) Add(o Op) bool {
	for _, r := range p.snap.Ranges {
		if r.ID == o.Range {
			return p.add(r, o)
		}
	}
	return false
}

// add is Add for policies, which know o's range.
func (p *Plan) add(r *Range, o Op) bool {
	if p.Full() {
		return false
	}
	for _, id := range o.Ranges() {
		if p.busy.has(id) {
			return false
		}
	}
	o.At = p.snap.Now
	if !p.groupAllows(r, o) {
		return false
	}
	if o.Kind == Split && p.cfg.SharedHost {
		// One machine: the right half stays with its leader, in its
		// group while the group is under its cap.
		o.To = r.Leader
		if o.InGroup = p.groupSize(r) < p.cfg.MaxGroupSpans; o.InGroup {
			p.joinGroup(r)
		}
	}
	if o.Kind == TransferLeader {
		if p.shared(r) {
			o.Group = r.GroupID()
		}
		if o.balancing() {
			p.moved.add(o.Range)
		}
		p.occupyGroup(r, o.balancing())
	}
	p.occupyGroupOf(r, o)
	p.occupy(o)
	p.noteSplit(o)
	p.cool(o, o.At)
	p.apply(r, o)
	p.out = append(p.out, o)
	return true
}

// groupAllows reports whether o may run on r's Raft group as it is
// (docs/range-groups.md): a transfer moves the leadership of every range
// of the group, so the balancing rules move a shared group's leadership
// only as one unit (wholeGroup: through its first range, weighing the
// sum of its ranges' load and their count), never one span at a time,
// which would count the group as one range and send it back and forth.
// Leaderships leave a slow, skewed or draining server with the whole
// group too. Moves are allowed: a move without Op.Whole has the master
// first move the range out of its group (a group split, Server.isolate),
// then move it alone; the scheduler's own rules plan a shared group's
// moves whole (moveUnit).
// (Merges are allowed too: of two spans of one group, one entry in its
// log; of ranges of two groups, the freeze and take-over as ever, when
// it adds no group: mergeable, addsNoGroup.)
func (p *Plan) groupAllows(r *Range, o Op) bool {
	return o.Kind != TransferLeader || !o.balancing() || !p.shared(r) || p.wholeGroup(r)
}

func (p *Plan) occupy(o Op) {
	for _, id := range o.Ranges() {
		p.busy.add(id)
	}
	if o.Kind == Move {
		for _, s := range []string{o.From, o.To} {
			if st := p.servers[s]; st != nil {
				st.moving++
			}
		}
	}
}

// colocation lists the servers a merge of a and b moves replicas into
// (a's servers b lacks) and out of (b's servers a lacks): before the
// merge the master moves b's replicas onto a's servers, one at a time,
// each a snapshot like any move.
func colocation(a, b *Range) (into, out []string) {
	for _, rep := range a.Replicas {
		if !b.HasReplica(rep.Server) {
			into = append(into, rep.Server)
		}
	}
	for _, rep := range b.Replicas {
		if !a.HasReplica(rep.Server) {
			out = append(out, rep.Server)
		}
	}
	return into, out
}

// colocationFree reports whether every server a merge of a and b moves a
// replica into or out of has a move to spare (MaxPerServer).
func (p *Plan) colocationFree(a, b *Range) bool {
	into, out := colocation(a, b)
	for _, s := range append(into, out...) {
		if st := p.servers[s]; st != nil && st.moving >= p.cfg.MaxPerServer {
			return false
		}
	}
	return true
}

// occupyColocation counts a merge's co-location moves against the servers
// they touch, for as long as the merge runs.
func (p *Plan) occupyColocation(a, b *Range) {
	into, out := colocation(a, b)
	for _, s := range append(into, out...) {
		if st := p.servers[s]; st != nil {
			st.moving++
		}
	}
}

// narrows reports whether moving load l from a server leading from to one
// leading to leaves the target more than half of LeaderMinGap below the
// source's old load: the hysteresis of every leader-load move. With only
// to+l < from, a move could take the busiest server down by 1 entity/s
// and make the target the busier one, and reports wobbling by more than
// that sent the leadership back once per LeaderMoveCooldown (scenario
// leader_load_margin).
func (p *Plan) narrows(from, to, l float64) bool {
	return to+l < from-p.cfg.LeaderMinGap/2
}

// movable reports whether a balancing rule may move r's leadership: it is
// free and was not moved for balance within LeaderMoveCooldown, and, when
// it shares its Raft group, it stands for the whole group (wholeGroup).
func (p *Plan) movable(r *Range) bool {
	return p.free(r) && !p.moved.has(r.ID) && (!p.shared(r) || p.wholeGroup(r))
}

// shared reports whether r shares its Raft group with other ranges
// (groupAllows).
func (p *Plan) shared(r *Range) bool { return p.groupSize(r) > 1 }

// groupStat is a Raft group serving several ranges, as the plan sees it.
type groupStat struct {
	// n counts its ranges, with those the pass's in-group splits add.
	n int
	// spans are its ranges in the snapshot, in snapshot order.
	spans []*Range
}

// groupSize is how many ranges r's Raft group serves.
func (p *Plan) groupSize(r *Range) int {
	if g := p.group(r); g != nil {
		return g.n
	}
	return 1
}

// isolateAdds is how many Raft groups the master adds when it takes r out
// of its group before moving r or merging it away (Server.isolate): each
// range that leaves becomes a group of its own, and which ones leave is
// LeavesOnIsolate's rule (none for a range alone in its group, r itself
// when born in its group, every other range for the namesake of a
// group of n: n-1). A group is what a range costs on the request path
// (its own entries, log stream and heartbeats; docs/range-groups.md), so
// merge rule weighs it (a move never isolates: moveUnit).
func (p *Plan) isolateAdds(r *Range) int {
	g := p.group(r)
	if g == nil {
		return 0
	}
	n := 0
	for _, x := range g.spans {
		if LeavesOnIsolate(r, x) {
			n++
		}
	}
	return n
}

// group is r's Raft group when the plan indexed it (it serves a range
// other than its namesake), else nil: a group of r alone.
func (p *Plan) group(r *Range) *groupStat {
	if p.groups == nil {
		return nil
	}
	return p.groups[r.GroupID()]
}

// wholeGroup reports whether a balancing rule may move the leadership of
// r's shared group through r: r is the group's first range (one range
// stands for the group, so a pass weighs it once), no range of the group
// is busy, frozen or was moved for balance within LeaderMoveCooldown, no
// split of this pass adds to it, and every range reports the same leader
// (after a transfer, until each span's report has caught up, the group's
// leader is not known for all of them).
func (p *Plan) wholeGroup(r *Range) bool {
	g := p.group(r)
	if g == nil || len(g.spans) == 0 || g.spans[0] != r || g.n != len(g.spans) {
		return false
	}
	if p.movedGroups.has(r.GroupID()) {
		return false
	}
	for _, sp := range g.spans {
		if !p.free(sp) || p.moved.has(sp.ID) || sp.Leader != r.Leader {
			return false
		}
	}
	return true
}

// leadUnit is what a transfer of r's leadership moves, as the plan
// counts leaders: how many ranges and their load, of every range of r's
// group that the plan counts as led where r is (all of them when the
// reports agree, as wholeGroup requires; a drain's or a slow server's
// transfer may meet them disagreeing), with the ranges this pass's
// in-group splits add (their load is still in their left half's report).
func (p *Plan) leadUnit(r *Range) (ranges int, load float64) {
	if !p.shared(r) {
		return 1, r.entitiesPerSec()
	}
	g := p.group(r)
	for _, sp := range g.spans {
		if sp.Leader == r.Leader {
			ranges++
			load += sp.entitiesPerSec()
		}
	}
	return ranges + g.n - len(g.spans), load
}

// leadLoad is leadUnit's load.
func (p *Plan) leadLoad(r *Range) float64 {
	_, l := p.leadUnit(r)
	return l
}

// groupFigures adds to a leadership transfer's figures how many ranges
// move with it when r shares its Raft group.
func (p *Plan) groupFigures(r *Range, f map[string]float64) map[string]float64 {
	if n := p.groupSize(r); n > 1 {
		f["group_ranges"] = float64(n)
	}
	return f
}

// occupyGroup marks busy, and when balancing moved, every range of r's
// shared group (a transfer of r's leadership moves them all): no other
// operation of the pass may count them as led where they were.
func (p *Plan) occupyGroup(r *Range, balancing bool) {
	if !p.shared(r) {
		return
	}
	for _, sp := range p.group(r).spans {
		p.busy.add(sp.ID)
		if balancing {
			p.moved.add(sp.ID)
		}
	}
}

// occupyTransferred marks busy every range of a group whose leadership a
// transfer in flight is moving, that a move in flight moves whole, or
// that an isolate in flight takes a span out of or an attach in flight
// brings one into (Op.Group; the master
// also lists every range it has claimed as a transfer, with no group,
// which marks only that range).
func (p *Plan) occupyTransferred(inflight []Op) {
	for _, o := range inflight {
		if g := p.groups[o.Group]; (o.Kind == TransferLeader || o.Whole || o.Kind == Isolate || o.Kind == Attach) && o.Group != 0 && g != nil {
			p.occupySpans(g)
		}
	}
}

// occupyGroupOf marks busy the ranges of the Raft group o claims as a
// whole besides its own: r's group for a whole move (wholemove.go) and an
// isolate (detach_hot.go), the group an attach joins (attach_cold.go).
func (p *Plan) occupyGroupOf(r *Range, o Op) {
	if (o.Kind == Move && o.Whole) || o.Kind == Isolate {
		p.occupyGroup(r, false)
	}
	if g := p.groups[o.Group]; o.Kind == Attach && g != nil {
		p.occupySpans(g)
	}
}

// occupySpans marks busy every range of g.
func (p *Plan) occupySpans(g *groupStat) {
	for _, sp := range g.spans {
		p.busy.add(sp.ID)
	}
}

// joinGroup counts a range an in-group split of r adds to r's group, so
// that the pass's later operations see the group as it will be.
func (p *Plan) joinGroup(r *Range) {
	if p.groups == nil {
		p.groups = make(map[uint64]*groupStat)
	}
	g := p.group(r)
	if g == nil {
		g = &groupStat{n: 1, spans: []*Range{r}}
		p.groups[r.GroupID()] = g
	}
	g.n++
}

// countGroups indexes the Raft groups that serve a range other than their
// namesake, with their ranges; every other group serves one range, its
// namesake (groupSize). Only called when there is such a range: a group
// of several ranges has at least one whose id is not the group's (ids are
// unique). At 100,000 ranges of which a few share groups, a map of every
// range built at every pass was most of the simulator's time.
func (p *Plan) countGroups() {
	var named idSet
	for _, r := range p.snap.Ranges {
		if k := r.GroupID(); k != r.ID {
			named.add(k)
		}
	}
	p.groups = make(map[uint64]*groupStat)
	for _, r := range p.snap.Ranges {
		k := r.GroupID()
		if !named.has(k) {
			continue
		}
		g := p.groups[k]
		if g == nil {
			g = &groupStat{}
			p.groups[k] = g
		}
		g.n++
		g.spans = append(g.spans, r)
	}
}

// cool leaves the servers o shifts load between (From and To) alone until
// their load reports reflect it: BalanceCooldown after a balancing move,
// and SplitWindow after a split finished (Op.Last), the window in which
// the left half's report may still be the whole old range's (justSplit)
// and the right half, led by To, has none: leader balancing saw the
// range's leader still leading it all and To nothing, and moved the left
// half to To as well (scenario split_servers_rest).
func (p *Plan) cool(o Op, at time.Time) {
	var until time.Time
	if o.balancing() {
		until = at.Add(p.cfg.BalanceCooldown)
	}
	if t := o.Last().Add(p.cfg.SplitWindow); o.Kind == Split && t.After(until) {
		until = t
	}
	for _, s := range []string{o.From, o.To} {
		if st := p.servers[s]; st != nil && until.After(st.coolUntil) {
			st.coolUntil = until
		}
	}
}

// apply updates the per-server figures as if o were done.
func (p *Plan) apply(r *Range, o Op) {
	from, to := p.servers[o.From], p.servers[o.To]
	switch o.Kind {
	case Move:
		// A whole move moves a replica of every range of the group.
		for _, sp := range p.wholeMoveSpans(r, o) {
			if from != nil {
				from.replicas--
			}
			if to != nil {
				to.replicas++
				to.take(sp)
			}
		}
	case TransferLeader:
		n, l := p.leadUnit(r)
		if from != nil {
			from.leaders -= n
			from.leaderLoad -= l
		}
		if to != nil {
			to.leaders += n
			to.leaderLoad += l
		}
	case Split:
		// The right half, about half the load (a load split is at the
		// load median), is led by To: a second split in the same pass
		// must not hand its right half to the same server for being the
		// coolest before the first (scenario split_right_leaders_spread).
		if to == nil {
			return
		}
		l := r.entitiesPerSec() / 2
		if from != nil {
			from.leaderLoad -= l
		}
		to.leaders++
		to.leaderLoad += l
	}
}

// staleLeader reports whether r's leader is a server that is down or
// silent: it stopped reporting, so r's load report is its last one (stale),
// and an operation asked of it (a split) would wait for it until the
// operation's timeout, holding a slot. A live replica that takes over the
// leadership reports afresh.
func (p *Plan) staleLeader(r *Range) bool {
	st := p.stat(r.Leader)
	return st != nil && (!st.live || st.silent)
}

// free reports whether r can be the subject of a new operation.
func (p *Plan) free(r *Range) bool { return !r.Frozen && !p.busy.has(r.ID) }

// idSet is a set of range ids: a bitmap, since ids are dense and every
// policy asks it about every range.
type idSet []uint64

func (s idSet) has(id uint64) bool {
	return id/64 < uint64(len(s)) && s[id/64]&(1<<(id%64)) != 0
}

func (s *idSet) add(id uint64) {
	for uint64(len(*s)) <= id/64 {
		*s = append(*s, 0)
	}
	(*s)[id/64] |= 1 << (id % 64)
}

// canHost reports whether server may receive a new replica now: live,
// not silent (the move's snapshot and conf change would wait on a server
// that may be paused or cut off, holding the slot until the move fails),
// not draining, with a move to spare, and room on its disk (roomFor:
// neither low nor full; the rules that know the range also ask that it
// fits).
func (p *Plan) canHost(st *serverStat) bool {
	return st != nil && st.live && !st.silent && !st.draining && st.moving < p.cfg.MaxPerServer && st.roomFor(nil)
}

// canLead reports whether the replica of r on server may take over r's
// leadership: its server is live, not draining, not slow, its clock not
// skewed (its leaders refuse writes past a minute off), its disk not full (its leaders refuse writes; a low disk may lead), not silent and
// not just back or just cleared of slow (LeaderSettle), it reports the
// replica and not broken, and it is no more than MaxLeaderLag entries behind the leader.
// Every rule that gives leadership asks it (transfers, balancing, a
// split's right-hand leader, drain).
func (p *Plan) canLead(r *Range, server string) bool { return p.leadable(r, server, false) }

// leadable is canLead, slow servers allowed when slowOK (a draining
// leader's last resort: draining outranks slow, see drain).
func (p *Plan) leadable(r *Range, server string, slowOK bool) bool {
	st := p.servers[server]
	rep := r.replica(server)
	if st == nil || rep == nil || !st.live || st.draining || (st.slow && !slowOK) || st.skewed || st.diskState == DiskFull || rep.Missing || rep.Broken || p.settling(st) {
		return false
	}
	if l := r.replica(r.Leader); l != nil && l.Applied > rep.Applied {
		return l.Applied-rep.Applied <= p.cfg.MaxLeaderLag
	}
	return true
}

// coolestFollower returns the replica of r other than avoid that may lead
// and whose server leads the least load (ties: fewest leaders, then id).
func (p *Plan) coolestFollower(r *Range, avoid string) *serverStat {
	return p.coolest(r, avoid, false)
}

// coolest is coolestFollower, slow servers allowed when slowOK.
func (p *Plan) coolest(r *Range, avoid string, slowOK bool) *serverStat {
	var best *serverStat
	for _, rep := range r.Replicas {
		if rep.Server == avoid || !p.leadable(r, rep.Server, slowOK) {
			continue
		}
		st := p.servers[rep.Server]
		if best == nil || less(st, best) {
			best = st
		}
	}
	return best
}

func less(a, b *serverStat) bool {
	if a.leaderLoad != b.leaderLoad {
		return a.leaderLoad < b.leaderLoad
	}
	if a.leaders != b.leaders {
		return a.leaders < b.leaders
	}
	return a.id < b.id
}

// replicaTarget returns the server that may host a new replica of r in
// place of its replica on from (canHost, and r fits: roomFor) and holds
// none: one in a zone none of r's other replicas is in when there is one
// (the zone rule, zone.go), and of those the one with the fewest replicas.
func (p *Plan) replicaTarget(r *Range, from string) *serverStat {
	var best *serverStat
	bestNew := false
	for _, st := range p.order {
		if !p.canHost(st) || !st.roomFor(r) || r.HasReplica(st.id) {
			continue
		}
		isNew := !p.zoneHeld(r, st, from)
		if best == nil || (isNew && !bestNew) || (isNew == bestNew && st.replicas < best.replicas) {
			best, bestNew = st, isNew
		}
	}
	return best
}

// eachImbalanced calls fn for each server, not cooling down nor silent
// (its figures are stale, and a transfer or split is asked of the leader,
// which may not answer: a slot held until the operation's timeout), that leads
// clearly more (over) or less than the mean leader load of the eligible
// servers, the furthest from the mean first, while the plan has room. It is
// the walk the leader-balance policies share; it does nothing when leader
// balancing is off or fewer than two servers can take part.
func (p *Plan) eachImbalanced(over bool, fn func(s *serverStat, mean float64)) {
	if !p.cfg.BalanceLeaders {
		return
	}
	key := func(s *serverStat) float64 { return s.leaderLoad }
	off := p.overloaded
	if !over {
		key = func(s *serverStat) float64 { return -s.leaderLoad }
		off = p.underloaded
	}
	servers := p.eligibleLeaders(key)
	if len(servers) < 2 {
		return
	}
	mean := 0.0
	for _, s := range servers {
		mean += s.leaderLoad
	}
	mean /= float64(len(servers))
	for _, s := range servers {
		if p.Full() || !off(s, mean) {
			return
		}
		if !p.resting(s) {
			fn(s, mean)
		}
	}
}

// eligible returns the live servers that are not draining, sorted by key
// descending (ties by id): those replica balancing spreads replicas over.
// A slow server takes part: slowness concerns leadership only, and its
// replicas still add to durability (a follower's commits hold up no write).
func (p *Plan) eligible(key func(*serverStat) float64) []*serverStat {
	return p.sorted(key, func(st *serverStat) bool { return st.live && !st.draining })
}

// eligibleLeaders is eligible without the slow servers, the clock-skewed
// ones and those whose disk is full: those leader balancing spreads leaderships over. Such a
// server may lead nothing, so its empty share must not lower the mean the
// others are balanced to.
func (p *Plan) eligibleLeaders(key func(*serverStat) float64) []*serverStat {
	return p.sorted(key, func(st *serverStat) bool {
		return st.live && !st.draining && !st.slow && !st.skewed && st.diskState != DiskFull
	})
}

// sorted returns the servers keep accepts, sorted by key descending (ties
// by id).
func (p *Plan) sorted(key func(*serverStat) float64, keep func(*serverStat) bool) []*serverStat {
	var out []*serverStat
	for _, st := range p.order {
		if keep(st) {
			out = append(out, st)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		ki, kj := key(out[i]), key(out[j])
		if ki != kj {
			return ki > kj
		}
		return out[i].id < out[j].id
	})
	return out
}

// heldBy returns the ranges server holds a replica of, in snapshot order.
func (p *Plan) heldBy(server string) []*Range {
	if p.held == nil {
		p.held = map[string][]*Range{}
		for _, r := range p.snap.Ranges {
			for _, rep := range r.Replicas {
				p.held[rep.Server] = append(p.held[rep.Server], r)
			}
		}
	}
	return p.held[server]
}

// ledBy returns the ranges server leads, in snapshot order (built on first
// use: most runs of a balanced cluster never need it).
func (p *Plan) ledBy(server string) []*Range {
	if p.led == nil {
		p.led = map[string][]*Range{}
		for _, r := range p.snap.Ranges {
			if r.Leader != "" {
				p.led[r.Leader] = append(p.led[r.Leader], r)
			}
		}
	}
	return p.led[server]
}

// settling reports whether st is silent, or came back or was cleared of
// slow less than LeaderSettle ago.
func (p *Plan) settling(st *serverStat) bool {
	return st.silent || p.within(st.back, p.cfg.LeaderSettle) || p.within(st.slowCleared, p.cfg.LeaderSettle)
}

// within reports whether t is set and less than d before now.
func (p *Plan) within(t time.Time, d time.Duration) bool {
	return !t.IsZero() && p.snap.Now.Sub(t) < d
}

// resting reports whether leader balancing should leave st alone as the
// source of a move: it is cooling down, or silent (see eachImbalanced).
func (p *Plan) resting(st *serverStat) bool { return p.cooling(st) || st.silent }

// cooling reports whether leader balancing should leave st alone.
func (p *Plan) cooling(st *serverStat) bool { return p.snap.Now.Before(st.coolUntil) }
