package partitionserver

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/grouptransport"
	"tablestore/partitionserver/lifecycle"
)

// Quiet reads (issue 9): a linearizable read of a quiet range this server
// led is served from its state file, without opening the Raft member, once
// enough other voters confirm over the group transport that they are still
// at the term and last entry the range went quiet at. A wake costs an
// election (open on three servers, about five fsyncs); a confirmation is
// one round trip with no disk write. Anything short of a confirmation
// falls back to the wake. Why it is safe: docs/architecture.md, "Quiet
// reads"; the decisions: lifecycle.QuietRead and lifecycle.ConfirmQuiet.

// Outcomes of a quiet read attempt, the label of quiet_reads_total.
const (
	quietServed     = "served"
	quietOpened     = "opened"     // the member began to open during the read
	quietNoVoters   = "no_voters"  // no configuration recorded, or this server not a voter in it
	quietRefused    = "refused"    // enough voters said no
	quietUnanswered = "unanswered" // too few answers before the timeout
	// and the lifecycle.QuietReason names: busy (lifecycle.QuietReadsPerWake
	// served, so this read wakes the range), not_leader, …
)

// quietRead tries to serve read (which reads the range's state file) on
// range id's quiet replica. served is false when the read must take the
// normal path (acquire, which wakes the range); read's own error is then
// meaningless. It is not tried for a replica that is open, not hosted,
// or when quiet reads are off.
func (s *Server) quietRead(ctx context.Context, id uint64, read func(*fsm.Range) error) (served bool, err error) {
	if s.cfg.QuietReadTimeout <= 0 {
		return false, nil
	}
	sl := s.slotOf(id)
	if sl == nil || sl.State() != lifecycle.Quiet {
		return false, nil
	}
	sp, ok := sl.group.Span(id)
	if !ok {
		return false, nil
	}
	start := time.Now()
	// No lock: a long scan must not hold up an open (a write's wake, a
	// RequestVote). Instead the mark is loaded before and after the read:
	// an open clears it before the member starts (so before anything is
	// applied) and a close records a new one, so the same mark on both
	// sides, with the state Quiet, means no member ran meanwhile and the
	// state file held exactly the log up to the mark's last index. What
	// wasLeader and quietVoters hold is written before a mark is recorded
	// and not again until after it is cleared, except that a closed vote
	// (voteClosed) sets wasLeader false before it records its new mark:
	// the read then sees the mark change, or refuses (NotLeader).
	m := sl.mark.Load()
	var voters []raft.Server
	var votersAt uint64
	if vp := sl.quietVoters.Load(); vp != nil {
		voters, votersAt = vp.voters, vp.at
	}
	pos, why := lifecycle.QuietRead(sl.State(), m, sl.wasLeader.Load(), votersAt, sl.quietServed.Load())
	if why != lifecycle.QuietOK {
		quietReadsTotal.WithLabelValues(why.String()).Inc()
		return false, nil
	}
	err = read(sp)
	if sl.State() != lifecycle.Quiet || sl.mark.Load() != m {
		quietReadsTotal.WithLabelValues(quietOpened).Inc()
		return false, nil
	}
	var others []raft.Server
	self, n := false, 0
	for _, v := range voters {
		if v.Suffrage != raft.Voter {
			continue
		}
		n++
		if string(v.ID) == s.id {
			self = true
		} else {
			others = append(others, v)
		}
	}
	need, ok := lifecycle.ConfirmsNeeded(n, self)
	if !ok {
		quietReadsTotal.WithLabelValues(quietNoVoters).Inc()
		return false, nil
	}
	// The peers answer for a group (ConfirmQuiet): a span's id is not
	// its group's unless it is the namesake, and a peer asked for it
	// found no group and said no, so every quiet read of another span
	// (a table in an anchor group, an in-group split's right half) woke
	// the group.
	outcome := s.confirmQuiet(ctx, sl.id, others, need, grouptransport.QuietPosition(pos))
	quietReadsTotal.WithLabelValues(outcome).Inc()
	if outcome != quietServed {
		return false, nil
	}
	sl.lastUse.Store(time.Now().UnixNano())
	sl.quietServed.Add(1)
	quietReadSeconds.Observe(time.Since(start).Seconds())
	return true, err
}

// confirmQuiet asks every other voter of group in parallel whether it is at pos and
// returns once need of them said yes (served), or once that can no longer
// happen: enough said no (refused) or did not answer in time (unanswered).
func (s *Server) confirmQuiet(ctx context.Context, group uint64, others []raft.Server, need int, pos grouptransport.QuietPosition) string {
	if need == 0 {
		return quietServed
	}
	if need > len(others) {
		return quietNoVoters
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QuietReadTimeout)
	defer cancel()
	type answer struct {
		yes bool
		err error
	}
	answers := make(chan answer, len(others))
	for _, v := range others {
		addr := string(v.Address)
		if a, ok := s.addrs.get(string(v.ID)); ok {
			addr = a
		}
		go func() {
			yes, err := s.raftNet.ConfirmQuiet(ctx, addr, group, pos)
			answers <- answer{yes, err}
		}()
	}
	yes, no, silent := 0, 0, 0
	for range others {
		a := <-answers
		switch {
		case a.err != nil:
			silent++
		case a.yes:
			yes++
		default:
			no++
		}
		if yes >= need {
			return quietServed
		}
		if len(others)-no-silent < need {
			break
		}
	}
	if no > 0 {
		return quietRefused
	}
	return quietUnanswered
}

// ConfirmQuiet implements grouptransport.Confirmer: whether this server's
// member of group is, right now, at position p. It takes no lock and never
// opens the group: a quiet member answers from the mark it recorded when
// it closed, an open one from its live term and last index.
func (s *Server) ConfirmQuiet(group uint64, p grouptransport.QuietPosition) bool {
	sl := s.groupSlot(group)
	if sl == nil {
		return false
	}
	// The mark read twice around the state: the same mark (a fresh one is
	// recorded at every close, cleared at every open) on both sides of a
	// Quiet state was the mark of that quiet period.
	m1 := sl.mark.Load()
	st := sl.State()
	m2 := sl.mark.Load()
	var open *lifecycle.OpenView
	switch {
	case st == lifecycle.Quiet && m1 != m2:
		st = lifecycle.Opening // changed meanwhile: no
	case st == lifecycle.Active:
		if rep := sl.rep.Load(); rep != nil {
			v := lifecycle.OpenView{TermBefore: rep.raft.CurrentTerm(), LastIndex: rep.raft.LastIndex()}
			v.TermAfter = rep.raft.CurrentTerm()
			// A member closed meanwhile (and maybe another opened) keeps
			// the term it had: only a live one's view counts.
			v.Live = sl.rep.Load() == rep && sl.State() == lifecycle.Active && rep.raft.State() != raft.Shutdown
			open = &v
		}
	}
	yes := lifecycle.ConfirmQuiet(st, m1, open, lifecycle.Position(p))
	if yes {
		quietConfirmsTotal.WithLabelValues("yes").Inc()
	} else {
		quietConfirmsTotal.WithLabelValues("no").Inc()
	}
	return yes
}

// quietVoters is the configuration a member had when it closed at the
// QUIESCE marker at index at. The close can still take in an entry after
// the marker check (a request that found the member open); its mark then
// ends past at, and lifecycle.QuietRead refuses it (NotAtMarker).
type quietVoters struct {
	at     uint64
	voters []raft.Server
}
