package scheduler

import "fmt"

// Disk is a partition server's data directory file system as its last
// heartbeat reported it: the bytes free to the server, the file system's
// size, and the server's --disk-reserve. Capacity 0 means no figures (a
// server older than the report, or one that cannot tell): such a server
// counts as having space, as every server did before the master knew
// disks.
type Disk struct {
	Available, Capacity, Reserve uint64
}

// DiskState is what a server's free space allows the scheduler to do with
// it.
type DiskState int

// The disk states, by Disk.State.
const (
	// DiskOK: room for new replicas (or no figures).
	DiskOK DiskState = iota
	// DiskLow: free space under the low mark; the server gets no new
	// replica (a move, re-replication, a merge's co-location) and keeps
	// what it holds.
	DiskLow
	// DiskFull: free space under the server's reserve, where the ranges
	// it leads refuse client writes (503 ServerBusy); its leaderships move
	// to followers with space, then its replicas move to servers with
	// space, and it takes part in no split or merge meanwhile.
	DiskFull
)

func (s DiskState) String() string {
	switch s {
	case DiskLow:
		return "low"
	case DiskFull:
		return "full"
	}
	return "ok"
}

// diskLowShare is the share of a file system's size under which free space
// is low: CockroachDB's allocator sheds replicas from a store over 95 %
// full; here that is where new replicas stop (shedding starts only at the
// reserve, where writes are refused).
const diskLowShare = 20 // 1/20: 5 %

// LowMark is the free space under which the server takes no new replica:
// the larger of twice its reserve and 5 % of the file system. A margin
// above the reserve, so that what a server receives does not take it
// straight to the reserve (where its leaders refuse writes and the master
// moves everything off again: no thrash between the two rules), and a
// server shedding replicas for being full stops at its reserve but is
// given none back before the low mark. Twice the reserve where 5 % is
// less than that (a small disk: 5 % of 4 GiB is under the 256 MiB
// default reserve).
func (d Disk) LowMark() uint64 { return max(2*d.Reserve, d.Capacity/diskLowShare) }

// State is the disk rule, the one every placement and shedding decision
// reads: full under the reserve (the partition server's own write guard
// refuses writes there), low under LowMark, else OK; OK without figures.
func (d Disk) State() DiskState {
	switch {
	case d.Capacity == 0:
		return DiskOK
	case d.Available < d.Reserve:
		return DiskFull
	case d.Available < d.LowMark():
		return DiskLow
	}
	return DiskOK
}

// roomFor is the placement side of the disk rule: whether st's disk can
// take a new replica of r (nil: of some range). The disk is OK (State),
// and stays over its low mark with r's bytes written twice (the snapshot
// a move installs is kept beside the state file's copy); a range without
// a size report counts as empty. A server without figures always can.
// Every rule that picks where a replica goes asks it: canHost, and with
// the range, replicaTarget (re-replication, drain, full disks),
// replica balancing and a merge's co-location.
func (st *serverStat) roomFor(r *Range) bool {
	d := st.disk
	if d.Capacity == 0 {
		return true
	}
	var need uint64
	if r != nil {
		need = 2 * r.bytes()
	}
	// Over the low mark after the write is OK by State (the mark is at
	// least the reserve).
	return d.Available >= need && d.Available-need >= d.LowMark()
}

// take charges st's disk with the bytes a planned move of r writes there,
// so that later decisions of the same run see them (Plan.apply; roomFor
// let the move in, so the state stays OK).
func (st *serverStat) take(r *Range) {
	st.disk.Available -= min(st.disk.Available, 2*r.bytes())
}

// unsplittable reports whether r must not be split now for the state of
// its replicas: one on a full disk (onFullDisk), or one reported broken (a
// split would leave the new right-hand range's replica on that server
// waiting, reported missing, not broken, so never replaced; re-replication
// replaces the broken one first, as merges wait for it: allStaying), or
// r is a span of an anchor group (anchorSpan: it leaves the group first,
// detach_hot.go, or waits there; a split would keep its left half in the
// shared group), or an anchor (empty, never written: a report that says
// otherwise is wrong).
func (p *Plan) unsplittable(r *Range) bool {
	return p.onFullDisk(r) || r.anyBroken() || r.Anchor || p.anchorSpan(r)
}

// onFullDisk reports whether a replica of r is on a server whose disk is
// full: such a range is not split (the new range's snapshot is written on
// every replica, and the range's replicas are leaving that server) nor
// merged (its co-location and freeze hold the range while its replica
// should move).
func (p *Plan) onFullDisk(r *Range) bool {
	for _, rep := range r.Replicas {
		if st := p.stat(rep.Server); st != nil && st.diskState == DiskFull {
			return true
		}
	}
	return false
}

// diskFigures are an operation's figures for st's disk.
func diskFigures(st *serverStat, into map[string]float64) map[string]float64 {
	into["available_bytes"] = float64(st.disk.Available)
	into["reserve_bytes"] = float64(st.disk.Reserve)
	return into
}

// diskReason is the reason of an operation that takes a leadership or a
// replica off st, whose disk is full.
func diskReason(st *serverStat) string {
	return fmt.Sprintf("disk full: server %s has %d MiB free, under its reserve of %d MiB", st.id, st.disk.Available>>20, st.disk.Reserve>>20)
}

// shedFullReplicas moves replicas off the servers whose disk is full, to
// servers with room (replicaTarget), one move per server at a time
// (MaxPerServer) like a drain. A range a full server still leads waits
// for its leadership to move first (drain's first pass): the move of a
// leader's replica would have to move the leadership anyway, and writes
// come back sooner when leaderships go first.
func (p *Plan) shedFullReplicas() {
	for _, r := range p.snap.Ranges {
		if p.Full() {
			return
		}
		if !p.free(r) {
			continue
		}
		for _, rep := range r.Replicas {
			st := p.servers[rep.Server]
			if st == nil || st.diskState != DiskFull || !st.live || st.draining || st.moving >= p.cfg.MaxPerServer || r.Leader == st.id {
				continue
			}
			p.shedFullReplica(r, st)
			break
		}
	}
}

// shedFullReplica plans the move of r's replica off st, whose disk is
// full, to a server with room: for a range that shares its Raft group,
// the group whole (moveUnit), its bytes the sum of its ranges'.
func (p *Plan) shedFullReplica(r *Range, st *serverStat) {
	unit, whole := p.moveUnit(r)
	if unit == nil {
		return
	}
	if to := p.replicaTarget(unit, st.id); to != nil {
		p.addMove(r, whole, Op{Kind: Move, Range: r.ID, From: st.id, To: to.id, Rule: RuleDiskFullReplica,
			Reason:  diskReason(st),
			Figures: diskFigures(st, map[string]float64{"range_bytes": float64(unit.bytes())})})
	}
}
