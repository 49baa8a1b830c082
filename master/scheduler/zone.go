package scheduler

import (
	"fmt"
	"sort"
)

// The zone rule: a range's replicas go to as many distinct failure domains
// (Server.Zone: a rack, an availability zone) as there are, so that losing
// one zone loses at most one replica of each range where the cluster has a
// zone per replica. This file owns it; every rule that picks where a
// replica goes asks it:
//
//   - re-replication, a drain and a full disk's shedding (replicaTarget):
//     among the servers that pass the other rules, one in a zone none of
//     the range's other replicas is in, if any; only then the others;
//   - replica balancing (movableReplica, balanceReplicas): a move that
//     would leave the range in fewer zones is not made (keepsZones);
//   - zone repair (zoneDiversity, rule zone-diversity): a range two of
//     whose replicas share a zone while a server in a zone it lacks can
//     take one moves one there;
//   - a new table's first range (Spread, from the master's placement);
//   - the master's replica reconciliation (ZoneShared): its added voter
//     goes to a zone the range lacks if it can, its removed one is in a
//     zone another replica shares if it can.
//
// A server that names no zone ("", the default) shares a zone with no
// other: a cluster without zones plans exactly as it did before zones
// existed, and in a cluster where only some servers name one, an unnamed
// server is not taken for the same domain as anything. The repair moves a
// replica only into a named zone, though: an unnamed server is not known
// to be another domain either, and during a rollout of --zone moving
// replicas to servers that are about to be named would only move them
// twice.
//
// Leadership has no zone preference: every replica of a range is in the
// same Raft group, and the leader's zone matters only for latency, which
// the leader-load rules already weigh.
//
// Merges keep the left range's replicas (the right one's move onto them):
// a merged range is as diverse as its left part was, and the repair
// takes it from there.

// sameZone reports whether a and b are in one failure domain: both name
// the same zone.
func sameZone(a, b *serverStat) bool { return zoneEq(a.zone, b.zone) }

func zoneEq(a, b string) bool { return a != "" && a == b }

// ZoneShared reports whether zone is one of others by the zone rule (a
// zone that is "" is shared with none): the rule for code that works on
// server ids rather than a Plan (the master's replica reconciliation,
// which adds or removes a voter outside the scheduler's moves).
func ZoneShared(zone string, others []string) bool {
	for _, o := range others {
		if zoneEq(zone, o) {
			return true
		}
	}
	return false
}

// zoneHeld reports whether a replica of r, other than st's own and
// except's, is on a server in st's zone.
func (p *Plan) zoneHeld(r *Range, st *serverStat, except string) bool {
	if st.zone == "" {
		return false
	}
	for _, rep := range r.Replicas {
		if rep.Server == except || rep.Server == st.id {
			continue
		}
		if o := p.stat(rep.Server); o != nil && sameZone(o, st) {
			return true
		}
	}
	return false
}

// keepsZones reports whether moving r's replica from from to to leaves r
// in at least as many zones: to's zone is one r's other replicas lack, or
// from's was shared anyway. Replica balancing makes no other move, so it
// never undoes what re-replication and the repair spread.
func (p *Plan) keepsZones(r *Range, from, to *serverStat) bool {
	return !p.zoneHeld(r, to, from.id) || p.zoneHeld(r, from, from.id)
}

// crowded returns the replica of r to move for zone diversity: a follower
// (a leader's move would move the leadership too; a shared zone has a
// follower in it anyway) whose zone another replica shares, on a server
// with a move to spare, the one holding the most replicas (ties: the
// smaller id). Nil when r's replicas are all in distinct zones.
func (p *Plan) crowded(r *Range) *serverStat {
	var best *serverStat
	for _, rep := range r.Replicas {
		st := p.stat(rep.Server)
		if st == nil || rep.Server == r.Leader || st.moving >= p.cfg.MaxPerServer || !p.zoneHeld(r, st, "") {
			continue
		}
		if best == nil || st.replicas > best.replicas || (st.replicas == best.replicas && st.id < best.id) {
			best = st
		}
	}
	return best
}

// zoneHosts lists, per named zone, the servers that can host a replica
// now (canHost), fewest replicas first (ties: by id): the repair's
// candidate targets, rebuilt after each planned move (the counts and the
// moves in flight change).
func (p *Plan) zoneHosts() map[string][]*serverStat {
	out := map[string][]*serverStat{}
	for _, st := range p.order {
		if st.zone != "" && p.canHost(st) {
			out[st.zone] = append(out[st.zone], st)
		}
	}
	for _, l := range out {
		sort.SliceStable(l, func(i, j int) bool { return l[i].replicas < l[j].replicas })
	}
	return out
}

// missingZoneTarget returns the server, in a named zone none of r's
// replicas is in, that can take r (roomFor) and holds the fewest replicas
// (ties: the smaller id); nil when there is none.
func (p *Plan) missingZoneTarget(r *Range, hosts map[string][]*serverStat) *serverStat {
	var best *serverStat
	for zone, l := range hosts {
		if p.rangeInZone(r, zone) {
			continue
		}
		for _, st := range l {
			if st.roomFor(r) && !r.HasReplica(st.id) {
				if best == nil || st.replicas < best.replicas || (st.replicas == best.replicas && st.id < best.id) {
					best = st
				}
				break
			}
		}
	}
	return best
}

// rangeInZone reports whether a replica of r is on a server in zone.
func (p *Plan) rangeInZone(r *Range, zone string) bool {
	for _, rep := range r.Replicas {
		if st := p.stat(rep.Server); st != nil && st.zone == zone {
			return true
		}
	}
	return false
}

// zoneDiversity is the repair: a range two of whose replicas share a zone
// while a server in a zone the range lacks can take a replica moves one
// (a follower in the shared zone) there. It runs after splits and merges
// and before every balancing rule (a range already has its three
// replicas: a zone's loss is a risk, not a loss; a hot range waiting for
// a split is one now), at the pace of any move (MaxPerServer, the slots).
// It acts only on healthy ranges (allStaying: every replica on a live,
// heard-from server that is neither draining nor full, whose own rules
// move them first) and only with at least two named zones.
type zoneDiversity struct{}

func (zoneDiversity) Name() string { return RuleZoneDiversity }

func (zoneDiversity) Schedule(p *Plan) {
	if p.zones < 2 {
		return
	}
	var hosts map[string][]*serverStat
	for _, r := range p.snap.Ranges {
		if p.Full() {
			return
		}
		if !p.free(r) || !p.allStaying(r) {
			continue
		}
		unit, whole := p.moveUnit(r) // a shared group moves whole
		if unit == nil {
			continue
		}
		from := p.crowded(r)
		if from == nil {
			continue
		}
		if hosts == nil {
			if hosts = p.zoneHosts(); len(hosts) == 0 {
				return
			}
		}
		to := p.missingZoneTarget(unit, hosts)
		if to == nil {
			continue
		}
		if p.addMove(r, whole, Op{Kind: Move, Range: r.ID, From: from.id, To: to.id, Rule: RuleZoneDiversity,
			Reason:  fmt.Sprintf("zone diversity: %s shares zone %s with another replica; %s is in zone %s, which holds none of its replicas", from.id, from.zone, to.id, to.zone),
			Figures: map[string]float64{"zones": float64(p.zonesOf(r)), "from_replicas": float64(from.replicas), "to_replicas": float64(to.replicas)}}) {
			hosts = nil
		}
	}
}

// zonesOf is how many distinct zones r's replicas are in (a server that
// names none counts as its own).
func (p *Plan) zonesOf(r *Range) int {
	n := 0
	for i, rep := range r.Replicas {
		st := p.stat(rep.Server)
		shared := false
		for _, prev := range r.Replicas[:i] {
			if o := p.stat(prev.Server); st != nil && o != nil && sameZone(st, o) {
				shared = true
				break
			}
		}
		if !shared {
			n++
		}
	}
	return n
}

// Candidate is a server a new range's replica may go to (Spread).
type Candidate struct {
	ID, Zone string
	// Tier orders the candidates before zones do: a candidate of a later
	// tier is taken only when every one of an earlier tier is (the
	// master's placement: servers with room on their disk, then low ones,
	// then full ones).
	Tier int
}

// Spread picks n of cands, which are sorted by Tier and within a tier in
// the caller's order of preference (fewest replicas first), over as many
// zones as it can: each pick is the first candidate of the first tier
// left whose zone none of the picks has, or else that tier's first. It is
// the zone rule of a new range's placement (the master's), which has no
// other replicas to weigh; fewer than n candidates give them all.
func Spread(cands []Candidate, n int) []string {
	used := make([]bool, len(cands))
	var out []string
	var picked []*serverStat
	for len(out) < n && len(out) < len(cands) {
		pick := -1
		for i, c := range cands {
			if used[i] {
				continue
			}
			if pick >= 0 && c.Tier != cands[pick].Tier {
				break
			}
			if pick < 0 {
				pick = i
			}
			if !sharesZone(&serverStat{id: c.ID, zone: c.Zone}, picked) {
				pick = i
				break
			}
		}
		used[pick] = true
		out = append(out, cands[pick].ID)
		picked = append(picked, &serverStat{id: cands[pick].ID, zone: cands[pick].Zone})
	}
	return out
}

// sharesZone reports whether st is in the zone of one of servers.
func sharesZone(st *serverStat, servers []*serverStat) bool {
	for _, o := range servers {
		if sameZone(st, o) {
			return true
		}
	}
	return false
}

// countZones is how many distinct zones servers name.
func countZones(servers []*serverStat) int {
	seen := map[string]bool{}
	for _, st := range servers {
		if st.zone != "" {
			seen[st.zone] = true
		}
	}
	return len(seen)
}
