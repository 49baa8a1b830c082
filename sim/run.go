package sim

import (
	"math/rand"
	"time"

	"tablestore/master/scheduler"
)

// pending is an operation under way until done.
type pending struct {
	op   scheduler.Op
	done time.Duration
}

// runner is one simulation in progress.
type runner struct {
	cfg      Config
	rng      *rand.Rand
	c        *cluster
	wl       *workload
	now      time.Duration
	inflight []pending
	recent   []scheduler.Op
	rep      *Report
	lead     []float64 // per server: entities/s offered to the ranges it leads
	// offered, total and point are the last full pass's figures: while
	// neither the ranges, their leaders, the total rate nor the hot key
	// change, no range's load does, and a step needs no pass over them.
	offered, total float64
	point          uint64
}

// Run simulates cfg and returns its report.
func Run(cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	r := newRunner(cfg)
	every := int(cfg.ScheduleEvery / cfg.Step)
	for step := 0; r.now <= cfg.Duration; step++ {
		r.c.step = step
		r.event()
		r.finish()
		r.c.elect(r.now)
		r.measure(step%every == 0)
		if step%every == 0 {
			r.schedule()
		}
		r.now += cfg.Step
	}
	r.rep.finish(time.Since(start))
	return r.rep, nil
}

func newRunner(cfg Config) *runner {
	rng := rand.New(rand.NewSource(cfg.Seed))
	r := &runner{cfg: cfg, rng: rng, c: newCluster(cfg, rng), wl: newWorkload(cfg, rng)}
	if r.cfg.Capacity == 0 {
		r.cfg.Capacity = 1.5 * r.wl.base / float64(cfg.Servers)
	}
	r.rep = newReport(r.cfg)
	return r
}

// event applies the workload's event (hot spot, failure, new server).
func (r *runner) event() {
	if r.wl.advance(r.now, r.rng) {
		r.c.dirty = true
	}
	if r.now != r.cfg.EventAt {
		return
	}
	switch r.cfg.Workload {
	case "server-failure":
		r.c.fail(0, r.now)
	case "server-added":
		r.c.addServer(r.now)
	}
}

// finish applies the operations done by now.
func (r *runner) finish() {
	kept := r.inflight[:0]
	for _, p := range r.inflight {
		if p.done > r.now {
			kept = append(kept, p)
			continue
		}
		if !r.c.apply(p.op) {
			r.rep.Failed++
		}
	}
	r.inflight = kept
}

// measure turns the workload into load reports and records what the
// servers served. The ranges are visited only when their loads changed or
// the scheduler is about to read their sizes.
func (r *runner) measure(scheduling bool) {
	c := r.c
	total, point := r.wl.total(r.now), r.wl.pointAt(r.now)
	switch {
	case c.dirty || c.moved || total != r.total || point != r.point || len(r.lead) != len(c.servers):
		if c.dirty {
			c.rebuild(r.wl.shape)
		}
		r.pass(total, point)
	case scheduling:
		for _, x := range c.ranges {
			c.grow(x, c.step)
		}
	}
	served := 0.0
	for i, l := range r.lead {
		if c.servers[i].Live {
			served += min(l, r.cfg.Capacity)
		}
	}
	r.rep.sample(r.now, r.offered, served, r.spread(), len(c.ranges), c.groups())
}

// pass computes every range's load report and every server's load as
// leader.
func (r *runner) pass(total float64, point uint64) {
	c := r.c
	c.moved, r.total, r.point = false, total, point
	if len(r.lead) != len(c.servers) {
		r.lead = make([]float64, len(c.servers))
	}
	for i := range r.lead {
		r.lead[i] = 0
	}
	at := epoch.Add(r.now)
	r.offered = 0
	for _, x := range c.ranges {
		eps := total * x.mass
		if r.wl.pointRate > 0 && point >= x.lo && point < x.hi {
			eps += r.wl.pointRate
		}
		r.offered += eps
		c.grow(x, c.step-1)
		x.eps = eps
		c.grow(x, c.step)
		if x.leader < 0 {
			// No leader (an election after a failure): offered, not served.
			x.sched.Load = nil
			continue
		}
		x.sched.Load = &x.load
		r.lead[x.leader] += eps
		if !r.cfg.ReportServed {
			r.report(x, eps, at)
		}
	}
	if r.cfg.ReportServed {
		// A leader reports what it served: a server over its capacity
		// serves each of its ranges the same share of their demand.
		for _, x := range c.ranges {
			if x.leader >= 0 {
				r.report(x, x.eps*min(1, r.cfg.Capacity/r.lead[x.leader]), at)
			}
		}
	}
}

// report sets x's load report to eps entities/s: its leader's sample (for
// ranges a split policy may look at: split-load, and split-balance above
// twice merge-load) and its trend.
func (r *runner) report(x *srange, eps float64, at time.Time) {
	x.load.EntitiesPerSec = eps
	if eps >= min(r.cfg.Scheduler.SplitLoad, 2*r.cfg.Scheduler.MergeLoad) {
		r.c.sample(x, r.wl.shape, r.total, r.point, r.wl.pointRate)
	} else if len(x.load.Sample) > 0 {
		x.load.Sample, x.load.HotKeys = x.load.Sample[:0], x.load.HotKeys[:0]
	}
	x.sched.Observe(r.cfg.Scheduler, eps, at)
}

// spread is the most-loaded live server's leader load over the mean.
func (r *runner) spread() float64 {
	sum, top, n := 0.0, 0.0, 0
	for i, l := range r.lead {
		if r.c.servers[i].Live {
			sum += l
			top = max(top, l)
			n++
		}
	}
	if sum == 0 {
		return 1
	}
	return top / (sum / float64(n))
}

// schedule runs the scheduler like the master's policy loop and starts
// what it plans.
func (r *runner) schedule() {
	at := epoch.Add(r.now)
	keep := r.cfg.Scheduler.RecentWindow()
	recent := r.recent[:0]
	for _, o := range r.recent {
		if at.Sub(o.At) < keep {
			recent = append(recent, o)
		}
	}
	r.recent = recent
	for _, o := range scheduler.Schedule(r.cfg.Scheduler, r.snapshot()) {
		r.inflight = append(r.inflight, pending{op: o, done: r.now + r.duration(o)})
		r.recent = append(r.recent, o)
		r.rep.op(r.now, o)
	}
}

// snapshot is the scheduler's input now.
func (r *runner) snapshot() *scheduler.Snapshot {
	running := make([]scheduler.Op, 0, len(r.inflight))
	for _, p := range r.inflight {
		running = append(running, p.op)
	}
	return &scheduler.Snapshot{Now: epoch.Add(r.now), Servers: r.c.servers, Ranges: r.c.view, InFlight: running,
		Recent: r.recent, Slots: r.cfg.MaxInFlight - len(r.inflight)}
}

// duration is how long an operation takes in simulated time: a leader
// transfer or an isolate half a second, a split one, a merge two, a move two plus the
// range's snapshot at 100 MB/s.
func (r *runner) duration(o scheduler.Op) time.Duration {
	switch o.Kind {
	case scheduler.TransferLeader, scheduler.Isolate:
		// An isolate is one entry in the group's log, led where it was.
		return 500 * time.Millisecond
	case scheduler.Split:
		return time.Second
	case scheduler.Merge:
		return 2 * time.Second
	}
	bytes := uint64(0)
	if _, x := r.c.find(o.Range); x != nil {
		bytes = x.load.Bytes
	}
	return 2*time.Second + time.Duration(float64(bytes)/(100<<20)*float64(time.Second))
}
