package partitionserver

import (
	"errors"

	"tablestore/partitionserver/raftlog"
	pb "tablestore/proto/tablestorepb"
)

// A replica of a range that misses a split's log entry (its server cut
// off, the log compacted meanwhile) is caught up by a snapshot taken
// after the split: the left half only. The split's entry is what creates
// the right half on every replica of the parent, so this server has no
// replica of the new range, and the Join placement (joinassigned.go)
// waits for the new range's leader to give a join floor. With another
// member of the new range down, nobody can be elected, and the range
// takes no write while a majority of its servers is up (chaos seed 2181,
// reliability.md 38: 7.97 s).
//
// The snapshot's state carries the parent's last splits
// (RangeState.recent_splits; fsm.MissedSplits picks those this replica
// skipped). For such a split, this server's own history proves more than
// a floor from the leader would: its replica of the parent was, right
// before the snapshot, a continuous history that had not applied the
// split, so this server never hosted the new range (a split's apply
// creates it; a move onto it changes its generation). A member that
// never held a term, a vote or an entry of the group is what Raft
// assumes of a server that has not started yet: its first vote, from an
// empty log, cannot elect a candidate that lacks a committed entry,
// because no commit ever counted it (every majority that committed one
// holds another voter, and Raft's election restriction does the rest).
// The danger the join floor guards against (reliability.md 19) is a
// server that did hold the group's entries and lost them; planMissedSplit
// refuses whenever that cannot be excluded.

// birthFloor is the log position every member of a split-born range holds
// from its birth: the configuration raft.BootstrapCluster writes at index
// 1 of term 1. A replica created from a missed split takes it as its join
// floor: it refuses its vote to a candidate with no log at all (another
// member created empty), which no election needs.
var birthFloor = joinFloor{term: 1, index: 1}

// bornHereKey marks, in a group's stable keys, a replica this server
// bootstrapped (replica.go: a new table's range, or a split's new range on
// a replica of its parent): its history here began at the range's birth.
// Positive evidence, so that what cannot be dated is refused: a replica
// joined without a floor, and every replica an older build created, carry
// neither this mark nor a floor (planMissedSplit).
var bornHereKey = []byte("BornHere")

// markBornHere records that the group was bootstrapped here.
func markBornHere(logs *raftlog.Log) error {
	return logs.Set(bornHereKey, []byte{1})
}

// bornHere reports whether markBornHere marked the group.
func bornHere(logs *raftlog.Log) (bool, error) {
	_, err := logs.Get(bornHereKey)
	if errors.Is(err, raftlog.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// missedSplit is what planMissedSplit decides from: one split a replica of
// the parent never applied, and what this server knows of its own past.
type missedSplit struct {
	self string
	// oldApplied: the parent replica's applied index just before the
	// snapshot's restore.
	oldApplied uint64
	birth      *pb.SplitBirth
	// parentFloor, parentBorn: the parent replica's join floor, and
	// whether it was bootstrapped here (bornHere).
	parentFloor joinFloor
	parentBorn  bool
	// stored: the new range has a replica, or a stored state, here.
	stored bool
}

// planMissedSplit decides whether this server may create its replica of
// the range a missed split created without asking its leader, and if not,
// why. Pure.
//
// Yes only when this server cannot have hosted the new range before:
//   - the parent replica had a history (oldApplied > 0) that stopped short
//     of the split: a replica that applied the split created the new range;
//   - the parent replica's history here is known to have begun before the
//     split: one re-created (its server lost its data directory, or a move
//     took it off and back) may have applied the split in its earlier life.
//     A re-created replica has a join floor, the leader's commit index when
//     it joined, and the split had committed before any earlier life
//     applied it: a floor at or past the split's index is refused. Without
//     a floor, only a replica bootstrapped here (parentBorn) is dated;
//     anything else (a floorless join, a replica an older build created)
//     is refused;
//   - the split's range lists this server, and has no replica or state here
//     already.
func planMissedSplit(m missedSplit) (bool, string) {
	idx := m.birth.GetIndex()
	switch {
	case m.oldApplied == 0:
		return false, "the parent replica had no state of its own"
	case idx <= m.oldApplied:
		return false, "the parent replica applied the split"
	case !listed(m.birth.GetRight(), m.self):
		return false, "the new range does not list this server"
	case m.stored:
		return false, "the new range is stored here"
	case m.parentFloor.set() && m.parentFloor.index >= idx:
		return false, "the parent replica was created after the split"
	case !m.parentFloor.set() && !m.parentBorn:
		return false, "the parent replica's start here is unknown (no join floor, not bootstrapped by this version)"
	}
	return true, ""
}

// birthJoin reports whether assigned range d may be created at its birth
// floor from the missed split b: d is the range b created, still as
// created (the same generation and servers: no move since, so none onto
// or off this server), and lists this server. Pure.
func birthJoin(b *pb.SplitBirth, d *pb.RangeDescriptor, self string) bool {
	r := b.GetRight()
	if r == nil || r.GetRangeId() != d.GetRangeId() || r.GetGeneration() != d.GetGeneration() || !listed(d, self) {
		return false
	}
	if len(r.GetReplicas()) != len(d.GetReplicas()) {
		return false
	}
	for _, rep := range d.GetReplicas() {
		if !listed(r, rep.GetServerId()) {
			return false
		}
	}
	return true
}

// SplitsMissed records, of the splits a snapshot carried this server's
// replica of group past (fsm's SplitMissedHooks: splits of its spans, and
// spans that left it, DETACH_SPAN), those whose new range planMissedSplit
// lets this server create without its leader's floor. The floor and birth
// mark read are the group's (its log's), whichever span recorded the
// birth. The Join placement creates them (joinFromBirth). It runs on the
// group's restore, so it only reads and records.
func (s *Server) SplitsMissed(group, oldApplied uint64, missed []*pb.SplitBirth) {
	lg := s.logs.Log(group)
	floor, err := storedFloor(lg)
	born, ferr := bornHere(lg)
	if err == nil {
		err = ferr
	}
	for _, b := range missed {
		id := b.GetRight().GetRangeId()
		if err != nil {
			s.logger.Warn("split missed by a snapshot: the parent's join floor unreadable, the new range waits for its leader", "range", id, "group", group, "err", err)
			continue
		}
		stored := s.hosts(id)
		if !stored {
			has, herr := s.store.HasRange(id)
			stored = herr != nil || has
		}
		ok, why := planMissedSplit(missedSplit{self: s.id, oldApplied: oldApplied, birth: b,
			parentFloor: floor, parentBorn: born, stored: stored})
		if !ok {
			s.logger.Info("split missed by a snapshot: the new range waits for its leader's join floor", "range", id, "group", group, "split_index", b.GetIndex(), "why", why)
			continue
		}
		s.births.Store(id, b)
		s.logger.Info("split missed by a snapshot: the new range may be created here at its birth", "range", id, "group", group, "split_index", b.GetIndex(), "parent_applied", oldApplied)
	}
}

// joinFromBirth creates assigned range d at its birth floor when a missed
// split recorded it (SplitsMissed) and birthJoin allows: at once, without
// the master's JoinFloor, which needs the range's leader (joinAssigned
// calls it instead of asking the master). Without a record, or with one
// birthJoin refuses (then dropped), it does nothing: the next reconcile
// asks for the floor as before.
func (s *Server) joinFromBirth(d *pb.RangeDescriptor, raftAddrs map[string]string) {
	id := d.GetRangeId()
	v, found := s.births.LoadAndDelete(id)
	if !found {
		return
	}
	b := v.(*pb.SplitBirth)
	if !birthJoin(b, d, s.id) {
		s.logger.Info("missed split's range changed since its birth: it waits for its leader's join floor", "range", id, "birth_generation", b.GetRight().GetGeneration(), "generation", d.GetGeneration())
		return
	}
	if err := s.createJoined(d, raftAddrs, birthFloor); err != nil {
		if !errors.Is(err, errRemovedHere) {
			// Asked again at the next reconcile (a removal seen here
			// since the birth drops the record: the floor decides).
			s.births.Store(id, b)
		}
		s.logger.Warn("create assigned replica failed", "range", id, "placement", "join", "floor", "birth", "err", err)
		return
	}
	joinAtBirthTotal.Inc()
	s.logger.Info("assigned replica created at its birth floor: a snapshot carried this server past the split that created it", "range", id, "split_index", b.GetIndex())
}
