package master

import (
	"slices"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// Range starts (reliability.md, "A floor for generation-1 re-creations").
//
// A server re-creates a replica the map lists but it lacks. For a range
// past generation 1 it joins empty with a join floor (JoinFloor). A range
// still at generation 1 was, before this, re-created by bootstrapping with
// the descriptor's voters and log entry 1: an empty member that votes for
// any candidate whose log is past entry 1, so a member that missed
// acknowledged writes won with its vote. Bootstrapping is needed only
// before the range has ever had a leader: a brand-new range whose
// CreateReplica missed some servers (startRange: "the server will catch
// up by heartbeat"), when no leader exists to give a floor. So the master
// records, in its replicated state, which generation-1 ranges have
// started (a leader was seen), and tells the servers which of their
// assigned generation-1 ranges have not (HeartbeatResponse
// unstarted_range_ids): only those may be bootstrapped.
//
// Only CreateTable makes a range at generation 1 (a split, merge or move
// raises it), so there is at most one such range per table, and one mark.

// startedByReport reports whether a heartbeat's status rs shows that range
// known (the map's descriptor, nil when the map lacks it) has started and
// must be marked: the range is at generation 1 in the map and in the
// report, not marked yet, and the replica leads it or applied entries past
// the bootstrap configuration (index 1), which only a leader's commit
// makes. Pure.
func startedByReport(known *pb.RangeDescriptor, marked bool, rs *pb.RangeStatus) bool {
	if known == nil || marked || known.GetGeneration() != 1 || rs.GetRange().GetGeneration() != 1 {
		return false
	}
	return rs.GetLeader() || rs.GetAppliedIndex() > 1
}

// mayBootstrap reports whether a replica of range d that a server lacks
// may be created by bootstrapping (with d's voters, from log entry 1)
// rather than by joining with a floor: d is at generation 1 and its range
// never started. Pure.
func mayBootstrap(d *pb.RangeDescriptor, started bool) bool {
	return d.GetGeneration() == 1 && !started
}

// applyMarkRangesStarted records that ranges have started. Ids of ranges
// the map lacks or holds past generation 1 are ignored: those need no mark
// (a range past generation 1 never bootstraps), and the map drops a range
// only when its table is deleted or a newer descriptor covers it.
func applyMarkRangesStarted(s *state, payload []byte) *applyResult {
	var c pb.MarkRangesStartedCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	for _, id := range c.GetRangeIds() {
		if d, ok := s.ranges[id]; ok && d.GetGeneration() == 1 {
			s.started[id] = struct{}{}
		}
	}
	return &applyResult{}
}

// startedIDs returns the marks, ascending (for the snapshot).
func (s *state) startedIDs() []uint64 {
	out := make([]uint64, 0, len(s.started))
	for id := range s.started {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// unstartedLed returns the ranges among the reported ones that
// startedByReport says must be marked.
func (f *fsm) unstartedLed(ranges []*pb.RangeStatus) []uint64 {
	var out []uint64
	f.read(func(st *state) {
		for _, rs := range ranges {
			id := rs.GetRangeId()
			_, marked := st.started[id]
			if startedByReport(st.ranges[id], marked, rs) && !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	})
	return out
}

// markStarted records that the ranges ids have started and waits for the
// command: startRange calls it once it saw the new range's leader, before
// CreateTable answers, so that a client's first write, acknowledged after
// that answer, is never lost to a re-bootstrapped replica.
func (s *Server) markStarted(ids []uint64) error {
	_, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_MARK_RANGES_STARTED, &pb.MarkRangesStartedCommand{RangeIds: ids})
	return err
}

// noteStarted marks, in the background, the ranges a heartbeat showed
// started (unstartedLed): one command for all of them, one at a time (a
// heartbeat meanwhile drops its ids; its range is still unmarked, so a
// later report notes it again). This is how ranges whose CreateTable saw
// no leader, and those of a cluster upgraded from a master that kept no
// marks, get theirs: a server reporting a thousand such ranges in one full
// report costs one entry.
func (s *Server) noteStarted(ids []uint64) {
	if len(ids) == 0 {
		return
	}
	s.softMu.Lock()
	if s.marking {
		s.softMu.Unlock()
		return
	}
	s.marking = true
	s.softMu.Unlock()
	go func() {
		defer func() {
			s.softMu.Lock()
			s.marking = false
			s.softMu.Unlock()
		}()
		if err := s.markStarted(ids); err != nil {
			s.logger.Debug("marking started ranges failed", "ranges", len(ids), "err", err)
			return
		}
		s.logger.Debug("ranges marked started from heartbeats", "ranges", ids)
	}()
}

// startedRange records that new range id has a leader, before CreateTable
// answers: a client's first write, acknowledged after that answer, is
// never lost to a re-bootstrapped replica. A failure (the master lost its
// lead) is left to the heartbeats: the leader's report marks the range.
func (s *Server) startedRange(id uint64) {
	if err := s.markStarted([]uint64{id}); err != nil {
		s.logger.Warn("recording a new range's start failed; its leader's report will", "range", id, "err", err)
	}
}
