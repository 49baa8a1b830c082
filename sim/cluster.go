package sim

import (
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"time"

	"tablestore/master/scheduler"
)

// epoch is simulated time zero, for the scheduler's clock.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// srange is one simulated range.
type srange struct {
	sched  scheduler.Range
	load   scheduler.Load
	lo, hi uint64
	mass   float64 // share of the workload's shape on [lo, hi)
	// leader is the index of the leading server (-1: none, an election
	// is under way until electAt).
	leader  int
	electAt time.Duration
	// eps is the entities/s offered since the last full pass; grown is
	// the last step whose writes load.Bytes includes (bytes grow lazily:
	// most steps change no range's load).
	eps   float64
	grown int
}

// cluster is the simulated cluster's state.
type cluster struct {
	cfg     Config
	rng     *rand.Rand
	servers []scheduler.Server
	index   map[string]int
	ranges  []*srange // in key order
	byID    map[uint64]*srange
	view    []*scheduler.Range
	dirty   bool // ranges changed shape: view and masses must be rebuilt
	nextID  uint64
	// grouped: some range is a span of another range's Raft group (an
	// in-group split, --shared-host), so leadership transfers and moves
	// act on groups (sameGroup, isolate).
	grouped bool
	// groupCount is groups()'s answer while groupsStale is false.
	groupCount  int
	groupsStale bool
	// leaderless counts ranges waiting for an election.
	leaderless int
	// moved: a leadership changed since the last full pass.
	moved bool
	// step is the current step; stepBytes the bytes one entity/s writes
	// in a step.
	step      int
	stepBytes float64
}

// grow adds to x.load.Bytes the writes of the steps after x.grown up to
// step, at x.eps: the same sum as adding each step's writes at that step.
func (c *cluster) grow(x *srange, step int) {
	if n := step - x.grown; n > 0 {
		x.load.Bytes += uint64(x.eps*c.stepBytes) * uint64(n)
		x.grown = step
	}
}

func serverID(i int) string { return fmt.Sprintf("s%04d", i) }

func keyOf(pos uint64) string {
	if pos == 0 {
		return ""
	}
	return fmt.Sprintf("%08x", pos)
}

func posOf(key string) (uint64, bool) {
	if key == "" {
		return 0, true
	}
	p, err := strconv.ParseUint(key, 16, 64)
	return p, err == nil && p < keySpace
}

// newCluster places cfg.Ranges equal ranges on cfg.Servers servers: every
// server leads the same number of ranges and holds the same number of
// replicas, with followers spread at random.
func newCluster(cfg Config, rng *rand.Rand) *cluster {
	c := &cluster{cfg: cfg, rng: rng, index: map[string]int{}, byID: map[uint64]*srange{}, nextID: 1, dirty: true,
		step: -1, stepBytes: 512 * cfg.Step.Seconds()} // half the entities are 1 KiB writes
	for i := 0; i < cfg.Servers; i++ {
		c.addServer(0)
	}
	slots := placement(cfg.Servers, cfg.Ranges, rng)
	width := uint64(keySpace / cfg.Ranges)
	// One allocation each for the ranges and their replicas, in key order:
	// the scheduler's pass over 100,000 ranges then reads memory in order.
	slab := make([]srange, cfg.Ranges)
	reps := make([]scheduler.Replica, 3*cfg.Ranges)
	for i := 0; i < cfg.Ranges; i++ {
		hi := uint64(i+1) * width
		if i == cfg.Ranges-1 {
			hi = keySpace
		}
		r := &slab[i]
		*r = srange{lo: uint64(i) * width, hi: hi, leader: slots[0][i], grown: -1}
		// Server ids are the servers' own strings, shared by every replica.
		r.sched = scheduler.Range{ID: c.nextID, TableID: 1, Table: "sim", Start: keyOf(r.lo), End: endKey(hi), Leader: c.servers[slots[0][i]].ID}
		r.sched.Replicas = reps[3*i : 3*i : 3*i+3]
		for j := range slots {
			r.sched.Replicas = append(r.sched.Replicas, scheduler.Replica{Server: c.servers[slots[j][i]].ID})
		}
		r.load.Bytes = cfg.RangeBytes
		c.nextID++
		c.ranges = append(c.ranges, r)
		c.byID[r.sched.ID] = r
	}
	return c
}

func endKey(hi uint64) string {
	if hi >= keySpace {
		return ""
	}
	return keyOf(hi)
}

// placement returns, for each of three replica slots, the server of every
// range: each slot is a shuffled round of all servers, so counts are even;
// collisions within a range are swapped away.
func placement(servers, ranges int, rng *rand.Rand) [3][]int {
	var slots [3][]int
	for j := range slots {
		for len(slots[j]) < ranges {
			slots[j] = append(slots[j], rng.Perm(servers)...)
		}
		slots[j] = slots[j][:ranges]
	}
	clash := func(i, j int) bool {
		for k := 0; k < j; k++ {
			if slots[k][i] == slots[j][i] {
				return true
			}
		}
		return false
	}
	// Rounds of servers follow key order; shuffle ranges so that
	// neighbouring ranges are not led by distinct servers by construction.
	order := rng.Perm(ranges)
	for j := range slots {
		shuffled := make([]int, ranges)
		for i, k := range order {
			shuffled[i] = slots[j][k]
		}
		slots[j] = shuffled
	}
	for j := 1; j < 3; j++ {
		for i := 0; i < ranges; i++ {
			for tries := 0; clash(i, j) && tries < 100; tries++ {
				k := rng.Intn(ranges)
				slots[j][i], slots[j][k] = slots[j][k], slots[j][i]
				if clash(k, j) {
					slots[j][i], slots[j][k] = slots[j][k], slots[j][i]
				}
			}
		}
	}
	return slots
}

func (c *cluster) addServer(now time.Duration) {
	id := serverID(len(c.servers))
	c.index[id] = len(c.servers)
	c.servers = append(c.servers, scheduler.Server{ID: id, Live: true, LastSeen: epoch.Add(now)})
}

// fail stops server i: its leaderships go to a live follower after an
// election.
func (c *cluster) fail(i int, now time.Duration) {
	c.servers[i].Live = false
	c.servers[i].LastSeen = epoch.Add(now)
	for _, r := range c.ranges {
		if r.leader == i {
			r.leader, r.electAt = -1, now+3*time.Second
			r.sched.Leader = ""
			c.leaderless++
			c.moved = true
		}
	}
}

// elect gives leaderless ranges whose election is due a live replica as
// leader.
func (c *cluster) elect(now time.Duration) {
	if c.leaderless == 0 {
		return
	}
	for _, r := range c.ranges {
		if r.leader >= 0 || now < r.electAt {
			continue
		}
		for _, rep := range r.sched.Replicas {
			if i := c.index[rep.Server]; c.servers[i].Live {
				r.leader, r.sched.Leader = i, c.servers[i].ID
				c.leaderless--
				c.moved = true
				break
			}
		}
	}
}

// rebuild refreshes the scheduler's view and the ranges' masses after
// splits and merges or a change of the workload's shape.
func (c *cluster) rebuild(sh *shape) {
	c.view = c.view[:0]
	for _, r := range c.ranges {
		r.mass = sh.mass(r.lo, r.hi)
		c.view = append(c.view, &r.sched)
	}
	c.dirty = false
}

func (c *cluster) find(id uint64) (int, *srange) {
	r := c.byID[id]
	if r == nil {
		return -1, nil
	}
	return sort.Search(len(c.ranges), func(i int) bool { return c.ranges[i].lo >= r.lo }), r
}

// apply carries out a finished operation; it reports whether it could.
func (c *cluster) apply(o scheduler.Op) bool {
	i, r := c.find(o.Range)
	if r == nil {
		return false
	}
	switch o.Kind {
	case scheduler.Split:
		return c.split(i, r, o)
	case scheduler.Merge:
		return c.merge(i, r, o.Right)
	case scheduler.Move:
		return c.move(r, o.From, o.To, o.Whole)
	case scheduler.Isolate:
		// A span leaves its anchor group (the master's isolate).
		c.isolate(r)
	case scheduler.TransferLeader:
		t, ok := c.index[o.To]
		if !ok || !c.servers[t].Live || !r.sched.HasReplica(o.To) || r.leader < 0 {
			return false
		}
		// The leadership is the Raft group's: every span of it moves.
		for _, x := range c.sameGroup(r) {
			x.leader, x.sched.Leader = t, c.servers[t].ID
		}
		c.moved = true
	}
	return true
}

// sameGroup lists the ranges of r's Raft group, r among them.
func (c *cluster) sameGroup(r *srange) []*srange {
	if !c.grouped {
		return []*srange{r}
	}
	var out []*srange
	for _, x := range c.ranges {
		if x.sched.GroupID() == r.sched.GroupID() {
			out = append(out, x)
		}
	}
	return out
}

// isolate has r leave its Raft group before a move or a merge across
// groups, as the master does (a group split): a span born in the group
// leaves it; for the group's namesake, its siblings leave instead, each a
// group of its own.
func (c *cluster) isolate(r *srange) {
	for _, x := range c.sameGroup(r) {
		if scheduler.LeavesOnIsolate(&r.sched, &x.sched) {
			x.sched.Group, c.groupsStale = 0, true
		}
	}
}

// groups counts the Raft groups serving the ranges: one per namesake, since
// a group never outlives the range it is named after (a merge across
// groups takes its right range alone; an in-group merge keeps the left,
// and a group's namesake is its leftmost span).
func (c *cluster) groups() int {
	if !c.grouped {
		return len(c.ranges)
	}
	if !c.groupsStale {
		return c.groupCount
	}
	c.groupsStale = false
	n := 0
	for _, x := range c.ranges {
		if x.sched.GroupID() == x.sched.ID {
			n++
		}
	}
	c.groupCount = n
	return c.groupCount
}

func (c *cluster) split(i int, r *srange, o scheduler.Op) bool {
	pos := r.lo + (r.hi-r.lo)/2
	if o.Key != "" {
		p, ok := posOf(o.Key)
		if !ok {
			return false
		}
		pos = p
	}
	if pos <= r.lo || pos >= r.hi {
		return false
	}
	c.grow(r, c.step-1)
	right := &srange{lo: pos, hi: r.hi, leader: r.leader, grown: c.step - 1}
	right.sched = scheduler.Range{ID: c.nextID, TableID: 1, Table: "sim", Start: keyOf(pos), End: r.sched.End,
		Replicas: append([]scheduler.Replica(nil), r.sched.Replicas...), Leader: r.sched.Leader}
	if o.InGroup {
		// A span of r's group: led with it, whatever o.To says.
		right.sched.Group, c.grouped = r.sched.GroupID(), true
	} else if t, ok := c.index[o.To]; ok && c.servers[t].Live && r.leader >= 0 {
		right.leader, right.sched.Leader = t, c.servers[t].ID
	}
	c.nextID++
	share := float64(pos-r.lo) / float64(r.hi-r.lo)
	right.load.Bytes = uint64(float64(r.load.Bytes) * (1 - share))
	r.load.Bytes -= right.load.Bytes
	r.hi, r.sched.End = pos, keyOf(pos)
	c.ranges = append(c.ranges, nil)
	copy(c.ranges[i+2:], c.ranges[i+1:])
	c.ranges[i+1] = right
	c.byID[right.sched.ID] = right
	c.dirty, c.groupsStale = true, true
	return true
}

func (c *cluster) merge(i int, r *srange, rightID uint64) bool {
	if i+1 >= len(c.ranges) || c.ranges[i+1].sched.ID != rightID {
		return false
	}
	right := c.ranges[i+1]
	if right.sched.GroupID() != r.sched.GroupID() {
		c.isolate(right) // a merge across groups takes its right range alone
	}
	c.grow(r, c.step-1)
	c.grow(right, c.step-1)
	r.hi, r.sched.End = right.hi, right.sched.End
	r.load.Bytes += right.load.Bytes
	c.ranges = append(c.ranges[:i+1], c.ranges[i+2:]...)
	delete(c.byID, rightID)
	c.dirty, c.groupsStale = true, true
	return true
}

// move moves r's replica from from to to: with whole, the replica of
// every range of r's Raft group (the master's moveGroup, one membership
// change for the group); else r's alone, which first leaves its group
// (isolate).
func (c *cluster) move(r *srange, from, to string, whole bool) bool {
	t, ok := c.index[to]
	if !ok || !c.servers[t].Live || r.sched.HasReplica(to) || !r.sched.HasReplica(from) {
		return false
	}
	spans := []*srange{r}
	if whole {
		spans = c.sameGroup(r)
	} else {
		c.isolate(r)
	}
	for _, x := range spans {
		c.moveReplica(x, from, t)
	}
	return true
}

// moveReplica replaces x's replica on from by one on server t.
func (c *cluster) moveReplica(x *srange, from string, t int) {
	reps := make([]scheduler.Replica, 0, len(x.sched.Replicas))
	for _, rep := range x.sched.Replicas {
		if rep.Server == from {
			rep = scheduler.Replica{Server: c.servers[t].ID}
		}
		reps = append(reps, rep)
	}
	x.sched.Replicas = reps
	if x.sched.Leader == from {
		x.leader, x.sched.Leader = t, c.servers[t].ID
		c.moved = true
	}
}

// sample fills a hot range's load sample: sixteen sub-ranges in key order,
// each named by its first key, plus the single hot key if the range holds
// it.
func (c *cluster) sample(r *srange, sh *shape, total float64, point uint64, pointRate float64) {
	r.load.Sample = r.load.Sample[:0]
	const n = 16
	step := (r.hi - r.lo) / n
	for j := uint64(0); j < n && step > 0; j++ {
		lo := r.lo + j*step
		r.load.Sample = append(r.load.Sample, scheduler.KeyLoad{Key: keyOf(lo), EntitiesPerSec: total * sh.mass(lo, lo+step)})
	}
	if pointRate > 0 && point >= r.lo && point < r.hi {
		r.load.Sample = append(r.load.Sample, scheduler.KeyLoad{Key: keyOf(point), EntitiesPerSec: pointRate})
		sort.Slice(r.load.Sample, func(i, j int) bool { return r.load.Sample[i].Key < r.load.Sample[j].Key })
	}
	r.load.HotKeys = append(r.load.HotKeys[:0], r.load.Sample...)
	sort.Slice(r.load.HotKeys, func(i, j int) bool { return r.load.HotKeys[i].EntitiesPerSec > r.load.HotKeys[j].EntitiesPerSec })
	if len(r.load.HotKeys) > 8 {
		r.load.HotKeys = r.load.HotKeys[:8]
	}
}
