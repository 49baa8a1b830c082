package scheduler

import (
	"fmt"
	"time"
)

// drain takes leaderships off the servers that must not lead and empties
// the draining ones. A range led by a draining or a slow server (Server.Slow:
// its disk commits are persistently slow) has its leadership moved to a
// live, caught-up follower that may lead (canLead: not slow, silent,
// draining, settling or missing the replica), the one leading the least;
// with none, it stays, except that a draining leader falls back to a slow
// follower otherwise eligible (draining outranks slow). Then the replicas of draining servers move to the
// servers holding the fewest (a leader's replica moves once its leadership
// is gone); a slow server keeps its replicas: it still adds to the
// range's durability, and a follower's commits do not hold up writes.
// A server whose disk is full (Disk.State: under its reserve, where the
// ranges it leads refuse client writes) is shed like a draining one, in
// two passes: every leadership first (a transfer restores the range's
// writes at once), then its replicas, at a drain's pace, to servers with
// room (shedFullReplicas); it falls back to no slow follower, which
// would take the writes but not fill the disk any less.
// A clock-skewed server (Server.ClockSkewed) is shed like a slow one,
// with no fallback: the ranges it leads refuse client writes once its
// clock is over a minute off.
// One rule moves leaders off a server for what the server is, so that
// draining, slow, skewed and full disks cannot disagree about where a leadership
// goes.
type drain struct{}

func (drain) Name() string { return "drain" }

func (drain) Schedule(p *Plan) {
	draining, slow, full := p.shedding()
	if !draining && !slow && !full {
		return
	}
	for _, r := range p.snap.Ranges {
		if p.Full() {
			return
		}
		if !p.free(r) || p.shedLeaderOf(r) {
			continue
		}
		if draining {
			p.drainReplica(r)
		}
	}
	if full {
		p.shedFullReplicas()
	}
}

// shedLeaderOf moves r's leadership off its leader if that is draining,
// slow or full. It reports whether r is done with for this run: a
// transfer was planned, or its leader is draining with nowhere to send
// the leadership (its replica moves once the leadership is gone).
func (p *Plan) shedLeaderOf(r *Range) bool {
	st := p.servers[r.Leader]
	if st == nil || !(st.draining || st.slow || st.skewed || st.diskState == DiskFull) {
		return false
	}
	to := p.coolestFollower(r, r.Leader)
	if to == nil && st.draining {
		// Draining outranks slow: a draining server is leaving, and a
		// slow follower still leads better than one that is gone; with
		// no fallback the drain would stall for good.
		to = p.coolest(r, r.Leader, true)
	}
	if to != nil {
		p.add(r, shedLeader(r, st, to))
		return true
	}
	// A slow or full leader with nowhere to go must not hold up the
	// drain of its range's other replicas.
	return st.draining
}

// shedLeader is the transfer of r's leadership off st, which is draining,
// full, clock-skewed or slow, to to.
func shedLeader(r *Range, st, to *serverStat) Op {
	o := Op{Kind: TransferLeader, Range: r.ID, From: st.id, To: to.id,
		Figures: map[string]float64{"entities_per_sec": r.entitiesPerSec()}}
	if st.draining {
		o.Rule, o.Reason = RuleDrainLeader, fmt.Sprintf("drain: server %s is draining", st.id)
		return o
	}
	if st.diskState == DiskFull {
		o.Rule, o.Reason, o.Figures = RuleDiskFullLeader, diskReason(st), diskFigures(st, o.Figures)
		return o
	}
	if st.skewed {
		o.Rule = RuleClockSkewLeader
		o.Reason = fmt.Sprintf("clock skew: server %s's clock is off by %s", st.id, st.clockOffset.Round(time.Millisecond))
		o.Figures["clock_offset_seconds"] = st.clockOffset.Seconds()
		return o
	}
	o.Rule = RuleSlowDiskLeader
	o.Reason = fmt.Sprintf("slow disk: server %s's commits take %.0f ms (median)", st.id, float64(st.slowMedian.Microseconds())/1000)
	o.Figures["commit_median_seconds"] = st.slowMedian.Seconds()
	return o
}

// drainReplica moves r's replica off a draining server, if it has one:
// for a range that shares its Raft group, the group whole (moveUnit).
func (p *Plan) drainReplica(r *Range) {
	unit, whole := p.moveUnit(r)
	if unit == nil {
		return
	}
	for _, rep := range r.Replicas {
		st := p.servers[rep.Server]
		if st == nil || !st.draining || st.moving >= p.cfg.MaxPerServer {
			continue
		}
		if to := p.replicaTarget(unit, st.id); to != nil {
			p.addMove(r, whole, Op{Kind: Move, Range: r.ID, From: st.id, To: to.id, Rule: RuleDrainReplica,
				Reason:  fmt.Sprintf("drain: server %s is draining", st.id),
				Figures: map[string]float64{"from_replicas": float64(st.replicas), "to_replicas": float64(to.replicas)}})
		}
		return
	}
}

// shedding reports whether any server is draining, whether any is slow
// or clock-skewed (neither may lead), and whether any has a full disk.
func (p *Plan) shedding() (draining, slow, full bool) {
	for _, st := range p.order {
		draining = draining || st.draining
		slow = slow || st.slow || st.skewed
		full = full || st.diskState == DiskFull
	}
	return draining, slow, full
}
