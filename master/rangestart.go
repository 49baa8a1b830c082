package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"tablestore/internal/failpoint"

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
// rather than by joining with a floor: d is at generation 1, its range
// never started, and it is not a span of another range's group (a table's
// range recorded in a home group: only that group's ADD_SPAN entry starts
// it, never a bootstrap; docs/range-groups.md, stage 7). Pure.
func mayBootstrap(d *pb.RangeDescriptor, started bool) bool {
	return d.GetGeneration() == 1 && !started && !groupSpan(d)
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

// unstarted returns the ranges a server may bootstrap (mayBootstrap):
// at generation 1, not marked started, not spans of another range's
// group; ascending.
func (st *state) unstarted() []uint64 {
	var out []uint64
	for id, d := range st.ranges {
		if _, ok := st.started[id]; mayBootstrap(d, ok) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// UnstartedRanges returns the ranges at generation 1 this master's state
// does not mark started (those a server may bootstrap), ascending.
func (s *Server) UnstartedRanges() []uint64 {
	var out []uint64
	s.fsm.read(func(st *state) { out = st.unstarted() })
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
// started (unstartedLed). The ids join a pending set; one goroutine
// (markPending) at a time turns the set into one command, and loops until
// it is empty, so a report arriving while a command is in flight waits
// for the next one rather than being dropped (an idle range is reported
// again only by a full report). This is how ranges whose CreateTable saw
// no leader, and those of a cluster upgraded from a master that kept no
// marks, get theirs: a server reporting a thousand such ranges in one full
// report costs one entry.
func (s *Server) noteStarted(ids []uint64) {
	if len(ids) == 0 {
		return
	}
	s.softMu.Lock()
	defer s.softMu.Unlock()
	if s.pendingMarks == nil {
		s.pendingMarks = map[uint64]struct{}{}
	}
	for _, id := range ids {
		s.pendingMarks[id] = struct{}{}
	}
	if !s.marking {
		s.marking = true
		go s.markPending()
	}
}

// markPendingRetry is the pause before a failed mark is tried again.
const markPendingRetry = 200 * time.Millisecond

// markPending marks the pending ranges until none is left. Ids of a
// failed command go back to the set, unless this master lost its lead:
// the next leader learns them from its own heartbeats.
func (s *Server) markPending() {
	for {
		s.softMu.Lock()
		if len(s.pendingMarks) == 0 || s.ctx.Err() != nil {
			clear(s.pendingMarks)
			s.marking = false
			s.softMu.Unlock()
			return
		}
		ids := slices.Sorted(maps.Keys(s.pendingMarks))
		clear(s.pendingMarks)
		s.softMu.Unlock()
		err := s.markStarted(ids)
		if err == nil {
			s.logger.Debug("ranges marked started from heartbeats", "ranges", ids)
			continue
		}
		s.logger.Debug("marking started ranges failed", "ranges", len(ids), "err", err)
		if errors.Is(err, ErrNotLeader) {
			continue
		}
		s.noteRetry(ids)
		select {
		case <-s.ctx.Done():
		case <-time.After(markPendingRetry):
		}
	}
}

// noteRetry puts the ids of a failed mark back into the pending set.
func (s *Server) noteRetry(ids []uint64) {
	s.softMu.Lock()
	defer s.softMu.Unlock()
	for _, id := range ids {
		s.pendingMarks[id] = struct{}{}
	}
}

// ErrStartNotRecorded: a new range has a leader but its start could not
// be recorded (the master lost its lead, or the command failed).
// CreateTable answers it as retryable: the client's retry, answered from
// the request record, records the start (startReplayed).
var ErrStartNotRecorded = errors.New("master: the new range's start was not recorded")

// startedRange records that new range id has a leader, before CreateTable
// answers: a client's first write, acknowledged after that answer, is
// never lost to a re-bootstrapped replica. So a failure fails the answer.
func (s *Server) startedRange(id uint64) error {
	err := failpoint.Inject("master/range-start/mark")
	if err == nil {
		err = s.markStarted([]uint64{id})
	}
	if err != nil {
		return fmt.Errorf("%w: range %d: %w", ErrStartNotRecorded, id, err)
	}
	return nil
}

// startReplayed finishes, for a retried CreateTable answered from its
// request record, what the first attempt may have left undone (its answer
// was lost, or it failed with ErrStartNotRecorded): a range still in the
// map at generation 1 and unmarked is marked when its leader is known,
// added to its group when it is a span of another range's group (addSpan),
// and started (startRange) otherwise. Creating replicas with bootstrap is
// no less safe than what the servers do anyway for an unmarked range (a
// server's existing replica makes it a no-op, plus a campaign when the
// range has no leader). It returns the first range's leader as known.
func (s *Server) startReplayed(ctx context.Context, ranges []*pb.RangeDescriptor) (string, error) {
	for _, r := range ranges {
		id := r.GetRangeId()
		var (
			d      *pb.RangeDescriptor
			marked bool
		)
		s.fsm.read(func(st *state) {
			if cur, ok := st.ranges[id]; ok {
				d = proto.Clone(cur).(*pb.RangeDescriptor)
			}
			_, marked = st.started[id]
		})
		switch {
		case d == nil || d.GetGeneration() != 1 || marked:
		case groupSpan(d):
			// Recorded in a home group, not added yet: added, never
			// bootstrapped.
			if _, err := s.addSpan(ctx, d); err != nil {
				return "", err
			}
		case s.reports.leaderOf(id) != "":
			if err := s.startedRange(id); err != nil {
				return "", err
			}
		default:
			if _, err := s.startRange(ctx, d, s.raftAddrs()); err != nil {
				return "", err
			}
		}
	}
	if len(ranges) == 0 {
		return "", nil
	}
	return s.leaderOrGroupLeader(ranges[0]), nil
}

// leaderOrGroupLeader returns range r's reported leader, else, for a span
// of another range's group, that group's (one group, one leader): a new
// master hears a span's leader only from the next report that lists it.
func (s *Server) leaderOrGroupLeader(r *pb.RangeDescriptor) string {
	if l := s.reports.leaderOf(r.GetRangeId()); l != "" || !groupSpan(r) {
		return l
	}
	return s.reports.leaderOf(rangegroupOf(r))
}
