package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/internal/durable"
	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/lifecycle"
	pb "tablestore/proto/tablestorepb"
)

// The registry: the one place that decides whether a replica is hosted on
// this server and whether its Raft member runs. Every rule that creates,
// opens, closes, deletes or re-creates a replica is an event fed to the
// replica's lifecycle.Machine here; this file executes the actions the
// machine returns and logs each transition with its cause.

// slot is one hosted replica: its state machine (kept while it is hosted,
// open or quiet) and, while Active, its Raft member.
type slot struct {
	id uint64
	// sem serialises transitions and their actions (a lock that can be
	// given up on: a Raft message waits for an open only so long).
	sem chan struct{}
	m   lifecycle.Machine
	// state mirrors m.State() for readers that do not take sem.
	state atomic.Int32
	rep   atomic.Pointer[member]
	// group is the group's state machine: its spans are the ranges the
	// slot hosts.
	group *fsm.Group
	// mark is set while quiet: what Answer needs of the closed member.
	mark atomic.Pointer[lifecycle.Mark]
	// wasLeader and lastLeader: the member's view when it last closed, so
	// a quiet replica reports the leader that will answer once woken
	// (updated by a closed vote or store).
	wasLeader  atomic.Bool
	lastLeader atomic.Pointer[string]
	// followed: since it closed, the quiet replica granted a vote or
	// stored entries without opening (voteClosed, storeClosed); cleared
	// when it opens.
	followed atomic.Bool
	// closedReports holds, per span, the last status report built while
	// the member was closed (heartbeat.go).
	closedReports sync.Map // range id -> *pb.RangeStatus
	// lastUse is when a request last asked for the replica (Unix ns).
	lastUse atomic.Int64
	// seenIndex, seenAt: the quiesce scan's view of the last log index.
	seenIndex uint64
	seenAt    time.Time
	// abortedThrough is the delete's DeleteReplicaRequest.aborted_through,
	// set under the slot's lock for the DeleteState action it runs.
	abortedThrough uint64
	quiescing      atomic.Bool
	// closing: this leader committed a QUIESCE marker and waits for its
	// followers to learn that before it closes (onQuiesced); the quiesce
	// loop proposes no other marker meanwhile.
	closing atomic.Bool
	// quietAt is the index of the QUIESCE marker the member closed at.
	quietAt atomic.Uint64
	// quietVoters is the member's configuration when it closed at a
	// QUIESCE marker: whom a quiet read asks (quietread.go), and whom a
	// closed vote may go to. Cleared with mark when the member opens, and
	// at close when the member took an entry after the marker (its
	// configuration may have changed).
	quietVoters atomic.Pointer[quietVoters]
	// quietServed counts the reads served quietly since the replica last
	// went quiet (lifecycle.QuietReadsPerWake); reset when it opens.
	quietServed atomic.Uint64
	// openFailures counts the opens that failed since the last that
	// succeeded (under the slot's lock), for the logs.
	openFailures int

	// meters are the group's ranges' meters; they outlive the Raft
	// member.
	meters *spanMeters
}

func newSlot(id uint64, g *fsm.Group, cfg *Config) *slot {
	return &slot{id: id, sem: make(chan struct{}, 1), group: g, meters: newSpanMeters(cfg.PartitionThrottle)}
}

// generation is the highest generation of the group's spans: above 1, the
// group was born of a split (or reshaped since).
func (sl *slot) generation() uint64 {
	var g uint64
	for _, sp := range sl.spans() {
		g = max(g, sp.Descriptor().GetGeneration())
	}
	return g
}

func (sl *slot) lock()   { sl.sem <- struct{}{} }
func (sl *slot) unlock() { <-sl.sem }

// lockWithin takes the slot's lock unless d passes first.
func (sl *slot) lockWithin(d time.Duration) bool {
	select {
	case sl.sem <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case sl.sem <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

// spans are the group's spans; none for a slot made only to remove an
// interrupted delete's leftovers (no state machine).
func (sl *slot) spans() []*fsm.Range {
	if sl == nil || sl.group == nil {
		return nil
	}
	return sl.group.Spans()
}

// otherSpans are the ids of the group's spans other than its namesake.
func (sl *slot) otherSpans() []uint64 {
	var ids []uint64
	for _, sp := range sl.spans() {
		if sp.ID() != sl.id {
			ids = append(ids, sp.ID())
		}
	}
	return ids
}

// span is the group's span of range id, nil if it serves no such range.
func (sl *slot) span(id uint64) *fsm.Range {
	if sl == nil || sl.group == nil {
		return nil
	}
	sp, _ := sl.group.Span(id)
	return sp
}

// primary is the span the group is named after, or its first span when
// that range was merged away: what the group's own start reads (its
// bootstrap flag, its voters) is alike in every span.
func (sl *slot) primary() *fsm.Range {
	if sp := sl.span(sl.id); sp != nil {
		return sp
	}
	spans := sl.spans()
	if len(spans) == 0 {
		return nil // every span merged away
	}
	return spans[0]
}

// closedReport is span id's last report built while the member was
// closed, nil if none.
func (sl *slot) closedReport(id uint64) *pb.RangeStatus {
	v, _ := sl.closedReports.Load(id)
	rs, _ := v.(*pb.RangeStatus)
	return rs
}

func (sl *slot) keepClosedReport(rs *pb.RangeStatus) { sl.closedReports.Store(rs.GetRangeId(), rs) }

// covers reports whether a span of the slot's group serves the
// PartitionKey pk of table table.
func (sl *slot) covers(table uint64, pk string) bool {
	for _, sp := range sl.spans() {
		if d := sp.Descriptor(); d.GetTableId() == table && fsm.InRange(d, pk) {
			return true
		}
	}
	return false
}

func (sl *slot) State() lifecycle.State { return lifecycle.State(sl.state.Load()) }

// open returns the running member, nil when not Active.
func (sl *slot) open() *member {
	if sl.State() != lifecycle.Active {
		return nil
	}
	return sl.rep.Load()
}

// Errors of the registry.
var (
	ErrRangeNotHosted = errors.New("partitionserver: range not hosted here")
	errWakeTimeout    = errors.New("partitionserver: range did not open in time")
	// errSpanOfGroup: a range to delete shares its group with others.
	errSpanOfGroup = errors.New("partitionserver: the range shares its Raft group with other ranges")
	// errRemovalPending: the replica's removal failed part-way and has not
	// been run to its end (the next delete runs it again).
	errRemovalPending = errors.New("partitionserver: the range's removal has not finished")
	// ErrLateDelete: a delete ordered for an older generation of a replica
	// that a later change re-created.
	ErrLateDelete = errors.New("partitionserver: late replica delete refused")
)

// openSpec is how an Open action starts the member.
type openSpec struct {
	bootstrap bool
	voters    []raft.Server
	fast      bool
	// floor: the join floor of a replica a move creates (joinfloor.go);
	// a reopen reads the recorded one.
	floor joinFloor
}

// step feeds one event to sl's machine and executes its actions; the
// caller holds sl's lock. spec is used by Open actions (nil: from the
// stored state).
func (s *Server) step(sl *slot, in lifecycle.Input, cause string, spec *openSpec) (lifecycle.Output, error) {
	out := sl.m.Step(in)
	sl.state.Store(int32(out.To))
	if out.Changed() || len(out.Actions) > 0 {
		s.logger.Debug("replica lifecycle", "range", sl.id, "event", in.Event.String(), "cause", cause, "transition", out.String())
		if out.Changed() {
			lifecycleTransitionsTotal.WithLabelValues(out.To.String()).Inc()
		}
	}
	var err error
	for _, a := range out.Actions {
		if err = s.execute(sl, a, spec); err != nil {
			break
		}
	}
	// Opening, Closing and Removing end with the action that began them.
	switch out.To {
	case lifecycle.Opening:
		if err != nil || sl.rep.Load() == nil {
			if err == nil {
				err = errWakeTimeout
			}
			s.openFailed(sl, err, cause)
		} else {
			sl.openFailures = 0
			s.finish(sl, lifecycle.Input{Event: lifecycle.Opened}, cause)
		}
	case lifecycle.Closing:
		s.finish(sl, lifecycle.Input{Event: lifecycle.Closed}, cause)
	case lifecycle.Removing:
		// Only a removal that ran (every one drops the log) and
		// succeeded ends it: a request, a create or a raft message that
		// meets a removal a failed action left part-way changes nothing,
		// and must not report it done with the state still stored.
		if err == nil && slices.Contains(out.Actions, lifecycle.DropLog) {
			s.finish(sl, lifecycle.Input{Event: lifecycle.Removed}, cause)
			s.mu.Lock()
			if s.slots[sl.id] == sl {
				delete(s.slots, sl.id)
				s.unindexSpans(sl.id)
			}
			s.mu.Unlock()
		}
	}
	return out, err
}

// finish feeds the event that ends a transient state.
func (s *Server) finish(sl *slot, in lifecycle.Input, cause string) {
	out := sl.m.Step(in)
	sl.state.Store(int32(out.To))
	if out.Changed() {
		lifecycleTransitionsTotal.WithLabelValues(out.To.String()).Inc()
	}
	s.logger.Debug("replica lifecycle", "range", sl.id, "event", in.Event.String(), "cause", cause, "transition", out.String())
}

// openFailed ends a failed open: the replica goes back to Quiet (the next
// request or Raft message tries again) or, when the open found its files
// damaged (fsm.ErrCorruptSnapshot), to Broken, said once at error level:
// it is no longer opened, and its report tells the master to replace it
// (as CockroachDB and TiKV replace a corrupt replica). Only damage breaks
// a replica: any other failure, however often repeated, says nothing of
// the replica's own files; most causes are the server's (a full disk, too
// many open files, wrong permissions, a shared-log read error) and strike
// every replica at once, and breaking them all would have the master
// replace (in place: wipe) every replica of the server for a fault that
// freeing space or fixing permissions ends.
func (s *Server) openFailed(sl *slot, err error, cause string) {
	broken := errors.Is(err, fsm.ErrCorruptSnapshot)
	sl.openFailures++
	s.logger.Warn("opening replica failed", "range", sl.id, "cause", cause, "failures", sl.openFailures, "err", err)
	if broken {
		// Before the state is published: a heartbeat reads the state and
		// the leader flag without the slot's lock, and must never see a
		// broken replica that still claims the leadership it led with
		// when it closed.
		sl.wasLeader.Store(false)
		none := ""
		sl.lastLeader.Store(&none)
	}
	s.finish(sl, lifecycle.Input{Event: lifecycle.OpenFailed, Broken: broken}, cause)
	if broken {
		s.logger.Error("replica broken: its files are damaged; it is no longer opened and is reported broken for the master to replace",
			"range", sl.id, "failures", sl.openFailures, "err", err)
	}
}

// execute performs one action.
func (s *Server) execute(sl *slot, a lifecycle.Action, spec *openSpec) error {
	switch a {
	case lifecycle.Open, lifecycle.OpenCampaign:
		// Close takes its list of members to close after marking the
		// server closed: a member opened after that (a split's hook, a
		// late CreateReplica) would outlive the shared log it writes.
		s.mu.RLock()
		closed := s.closed
		s.mu.RUnlock()
		if closed {
			return ErrShuttingDown
		}
		if spec == nil {
			p := sl.primary()
			if p == nil {
				// Every span merged away: its removal follows.
				return fmt.Errorf("%w: group %d serves no range", ErrRangeNotHosted, sl.id)
			}
			st := p.State()
			spec = &openSpec{bootstrap: st.GetBootstrap(), voters: s.voters(st.GetRange())}
		}
		sl.mark.Store(nil)
		sl.quietVoters.Store(nil)
		sl.followed.Store(false)
		sl.quietServed.Store(0)
		// Always the normal timeouts: a member that must lead at once (a
		// new range's first replica, a split's preferred leader, a woken
		// range) campaigns by a local TimeoutNow instead of the 40 ms
		// "fast" timeouts, whose 40 ms leader lease (raft cannot reload
		// it) was lost again and again under load: the election storm of
		// issue 9.
		rep, err := openReplica(s.deps(), sl, spec.bootstrap, spec.voters, spec.floor)
		if err != nil {
			return err
		}
		sl.rep.Store(rep)
		if a == lifecycle.OpenCampaign {
			if err := rep.transport.Campaign(time.Second); err != nil {
				s.logger.Debug("campaign after wake failed", "range", sl.id, "err", err)
			}
		}
	case lifecycle.Close:
		rep := sl.rep.Swap(nil)
		if rep == nil {
			return nil
		}
		sl.wasLeader.Store(rep.isLeader())
		l := rep.leaderID()
		sl.lastLeader.Store(&l)
		if err := rep.close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
			s.logger.Warn("closing raft member", "range", sl.id, "err", err)
		}
	case lifecycle.RecordQuiet:
		mark, err := s.readMark(sl)
		if err != nil {
			// Without a mark every message wakes it: correct, only
			// slower.
			s.logger.Warn("reading a quiet replica's raft state", "range", sl.id, "err", err)
			return nil
		}
		if vp := sl.quietVoters.Load(); vp != nil && vp.at != mark.LastIndex {
			sl.quietVoters.Store(nil)
		}
		sl.mark.Store(mark)
	case lifecycle.DeleteState:
		if err := failpoint.Inject("partitionserver/delete/state"); err != nil {
			return err
		}
		// Every span of the group, the one it is named after last: a
		// crash part-way leaves the group's slot found again at start.
		for _, id := range append(sl.otherSpans(), sl.id) {
			if err := s.store.DeleteRange(id, sl.abortedThrough); err != nil && !errors.Is(err, fsm.ErrRangeNotFound) {
				return err
			}
		}
	case lifecycle.DropLog:
		if err := failpoint.Inject("partitionserver/delete/drop-log"); err != nil {
			return err
		}
		if err := s.logs.Drop(sl.id); err != nil {
			return err
		}
		// The transport's lease state of the group goes with the raft
		// state it guards (grouptransport's leases.forget).
		if s.raftNet != nil {
			s.raftNet.ForgetGroup(sl.id)
		}
		if err := durable.RemoveAll(replicaDir(s.cfg.DataDir, sl.id)); err != nil {
			return err
		}
	case lifecycle.Wait:
		// Under the slot's lock only a removal left part-way by a failed
		// action is seen waiting (a create meeting it).
		return fmt.Errorf("%w: range %d", errRemovalPending, sl.id)
	case lifecycle.Refuse:
		return fmt.Errorf("%w: range %d", ErrRangeNotHosted, sl.id)
	}
	return nil
}

// readMark reads the closed member's durable Raft state.
func (s *Server) readMark(sl *slot) (*lifecycle.Mark, error) {
	lg := s.logs.Log(sl.id)
	term, err := lg.GetUint64([]byte("CurrentTerm"))
	if err != nil {
		return nil, err
	}
	last, err := lg.LastIndex()
	if err != nil {
		return nil, err
	}
	m := &lifecycle.Mark{Term: term, LastIndex: last, Applied: sl.group.AppliedIndex()}
	if q := sl.quietAt.Load(); q != 0 && q <= last {
		m.Applied = max(m.Applied, q)
	}
	if last > 0 {
		var l raft.Log
		if err := lg.GetLog(last, &l); err != nil {
			return nil, err
		}
		m.LastTerm = l.Term
	}
	return m, nil
}

// slotOf returns the slot of the group that serves range id here, nil if
// the range is not hosted.
func (s *Server) slotOf(id uint64) *slot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if g, ok := s.spanGroup[id]; ok {
		return s.slots[g]
	}
	return nil
}

// groupSlot returns the slot of group id, nil if not hosted.
func (s *Server) groupSlot(id uint64) *slot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.slots[id]
}

// indexSpans records, under s.mu, which group serves each of sl's spans.
func (s *Server) indexSpans(sl *slot) {
	for _, sp := range sl.spans() {
		s.spanGroup[sp.ID()] = sl.id
	}
}

// indexSpan records that group serves range id.
func (s *Server) indexSpan(id, group uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots[group] != nil {
		s.spanGroup[id] = group
	}
}

var _ fsm.SpanHooks = (*Server)(nil)

// SpansChanged implements fsm.SpanHooks: group's spans are now spans (a
// span split off in the group, one merged away or taken by a snapshot).
func (s *Server) SpansChanged(group uint64, spans []uint64) {
	s.mu.Lock()
	sl := s.slots[group]
	if sl == nil {
		s.mu.Unlock()
		return
	}
	var gone []uint64
	for r, g := range s.spanGroup {
		if g == group && !slices.Contains(spans, r) {
			gone = append(gone, r)
		}
	}
	for _, r := range spans {
		s.spanGroup[r] = group
	}
	s.mu.Unlock()
	s.dropSpans(sl, gone)
}

// dropSpans forgets that sl's group serves ranges ids (each still indexed
// to it), with their meters and reports.
func (s *Server) dropSpans(sl *slot, ids []uint64) {
	s.mu.Lock()
	for _, r := range ids {
		if s.spanGroup[r] == sl.id {
			delete(s.spanGroup, r)
		}
	}
	s.mu.Unlock()
	for _, r := range ids {
		sl.meters.forget(r)
		sl.closedReports.Delete(r)
	}
}

// unindexSpans forgets, under s.mu, the spans served by group id.
func (s *Server) unindexSpans(id uint64) {
	for r, g := range s.spanGroup {
		if g == id {
			delete(s.spanGroup, r)
		}
	}
}

// slotList returns every slot.
func (s *Server) slotList() []*slot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*slot, 0, len(s.slots))
	for _, sl := range s.slots {
		out = append(out, sl)
	}
	return out
}

// hosts reports whether the range is hosted here (open or quiet).
func (s *Server) hosts(id uint64) bool { return s.slotOf(id) != nil }

// addSlot returns the slot of the group that serves a stored range,
// creating it (Absent) if needed; nil when shutting down.
func (s *Server) addSlot(id uint64) (*slot, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, ErrShuttingDown
	}
	if g, ok := s.spanGroup[id]; ok && s.slots[g] != nil {
		return s.slots[g], false, nil
	}
	rfsm, err := s.store.OpenRange(id, s.logger.With("range", id))
	if err != nil {
		return nil, false, err
	}
	g := rfsm.Group()
	if sl := s.slots[g.ID()]; sl != nil {
		// The group is hosted, and the range became its span since.
		s.indexSpans(sl)
		return sl, false, nil
	}
	sl := newSlot(g.ID(), g, &s.cfg)
	s.slots[g.ID()] = sl
	s.indexSpans(sl)
	return sl, true, nil
}

// found registers a range the start found in the state file: quiet unless
// it must run now (a bootstrap not yet written, or quiescence off).
func (s *Server) found(st *pb.RangeState) error {
	d := st.GetRange()
	sl, added, err := s.addSlot(d.GetRangeId())
	if err != nil {
		return err
	}
	if !added {
		// A span of a group found through another of its spans.
		return nil
	}
	sl.lock()
	defer sl.unlock()
	must := st.GetBootstrap() || s.cfg.QuiesceAfter == 0
	_, err = s.step(sl, lifecycle.Input{Event: lifecycle.Found, MustOpen: must}, "start", &openSpec{bootstrap: st.GetBootstrap(), voters: s.voters(d)})
	if err != nil && sl.State() == lifecycle.Broken {
		// A damaged replica (openFailed logged why) must not keep the
		// whole server down: it stays hosted, broken, for the master to
		// replace. Any other failure fails the start, loudly, as before
		// broken replicas: it is most likely the server's (permissions
		// on ranges/, the shared log), and a server that started "ready"
		// with every replica failing would serve nothing.
		return nil
	}
	return err
}

// acquire returns the running member of a hosted range for a request,
// opening a quiet one (which then campaigns, so it answers as leader).
func (s *Server) acquire(id uint64) (*member, error) {
	sl := s.slotOf(id)
	if sl == nil {
		return nil, ErrRangeNotHosted
	}
	sl.lastUse.Store(time.Now().UnixNano())
	if rep := sl.open(); rep != nil {
		return rep, nil
	}
	start := time.Now()
	rep, err := s.wake(sl, lifecycle.Request, "request", s.wakeWait())
	if err != nil {
		return nil, err
	}
	// Wait (bounded) for the election it started, so the request finds a
	// leader rather than bouncing with NOT_LEADER.
	deadline := start.Add(s.wakeWait())
	for rep.leaderID() == "" && time.Now().Before(deadline) && rep.raft.State() != raft.Shutdown {
		time.Sleep(500 * time.Microsecond)
	}
	wakeSeconds.Observe(time.Since(start).Seconds())
	return rep, nil
}

// settledLeader is the leader range id's member here knows. With wait
// (it campaigned), it first waits, bounded like a wake, for the election
// to settle: the master then learns a new range's leader from the create
// itself instead of polling every replica for it.
func (s *Server) settledLeader(ctx context.Context, id uint64, wait bool) string {
	sl := s.slotOf(id)
	if sl == nil {
		return ""
	}
	rep := sl.open()
	if rep == nil {
		return ""
	}
	if wait {
		deadline := time.Now().Add(s.wakeWait())
		for rep.leaderID() == "" && time.Now().Before(deadline) && ctx.Err() == nil && rep.raft.State() != raft.Shutdown {
			time.Sleep(500 * time.Microsecond)
		}
	}
	return rep.leaderID()
}

// wakeWait bounds how long a request or Raft message waits for a quiet
// range to open and elect.
func (s *Server) wakeWait() time.Duration { return max(time.Second, 2*s.cfg.RaftElectionTimeout) }

// wake opens a quiet replica for ev (Request: it campaigns; RaftMessage:
// it follows).
func (s *Server) wake(sl *slot, ev lifecycle.Event, cause string, within time.Duration) (*member, error) {
	if !sl.lockWithin(within) {
		return nil, errWakeTimeout
	}
	defer sl.unlock()
	if rep := sl.open(); rep != nil {
		return rep, nil
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil, ErrShuttingDown
	}
	// A request opens it with a campaign unless it already follows a
	// member that campaigned or leads (lifecycle.Input.Followed).
	in := lifecycle.Input{Event: ev, Followed: ev == lifecycle.Request && sl.followed.Load()}
	if _, err := s.step(sl, in, cause, nil); err != nil {
		return nil, err
	}
	if rep := sl.open(); rep != nil {
		return rep, nil
	}
	return nil, ErrRangeNotHosted
}

// Answer implements grouptransport.Dormant: a quiet replica acknowledges
// the traffic of the leader that quiesced it without opening, and grants
// the vote of, and stores the entries from, the member a request opened
// (lifecycle.Answer and AnswerVote say when).
func (s *Server) Answer(group uint64, msg any) any {
	ae, isAppend := msg.(*raft.AppendEntriesRequest)
	pv, isPreVote := msg.(*raft.RequestPreVoteRequest)
	rv, isVote := msg.(*raft.RequestVoteRequest)
	if !isAppend && !isPreVote && !isVote {
		return nil
	}
	sl := s.groupSlot(group)
	if sl == nil {
		return nil
	}
	if sl.State() == lifecycle.Closing {
		// The quiescing leader's next heartbeat often arrives while a
		// follower closes: wait for the close rather than reopen.
		if !sl.lockWithin(s.wakeWait()) {
			return nil
		}
		sl.unlock()
	}
	if sl.State() != lifecycle.Quiet {
		return nil
	}
	m := sl.mark.Load()
	if m == nil {
		return nil
	}
	// The join floor holds for a closed member too (a vote granted, or a
	// stale leader's heartbeat acknowledged, here would bypass the gate):
	// what the floor refuses opens the member, whose gate answers.
	if f, err := storedFloor(s.logs.Log(group)); err != nil || floorRefusal(f, msg) != nil {
		return nil
	}
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(s.id), Addr: []byte(s.RaftAddr())}
	switch {
	case isPreVote:
		if lifecycle.AnswerPreVote(*m, pv.LastLogIndex) != lifecycle.Deny {
			return nil
		}
		quietAnswersTotal.Inc()
		return &raft.RequestPreVoteResponse{RPCHeader: header, Term: m.Term, Granted: false}
	case isVote:
		return s.voteClosed(sl, header, rv)
	}
	a := appendOf(ae)
	switch lifecycle.Answer(*m, a) {
	case lifecycle.Ack:
		quietAnswersTotal.Inc()
		return &raft.AppendEntriesResponse{RPCHeader: header, Term: m.Term, LastLog: m.LastIndex, Success: true}
	case lifecycle.Store:
		return s.storeClosed(sl, header, ae, a)
	}
	return nil
}

// appendOf is the part of an AppendEntries lifecycle.Answer decides on.
func appendOf(ae *raft.AppendEntriesRequest) lifecycle.Append {
	a := lifecycle.Append{Term: ae.Term, PrevLogEntry: ae.PrevLogEntry, PrevLogTerm: ae.PrevLogTerm,
		LeaderCommit: ae.LeaderCommitIndex, Entries: len(ae.Entries)}
	if len(ae.Entries) == 0 {
		return a
	}
	first, last := ae.Entries[0], ae.Entries[len(ae.Entries)-1]
	a.First, a.Last, a.LastTerm = first.Index, last.Index, last.Term
	a.Plain = true
	for i, e := range ae.Entries {
		switch e.Type {
		case raft.LogCommand, raft.LogNoop, raft.LogBarrier:
		default:
			a.Plain = false
		}
		if i > 0 && (e.Index != ae.Entries[i-1].Index+1 || e.Term < ae.Entries[i-1].Term) {
			a.Plain = false
		}
	}
	return a
}

// voteClosed grants rv on a quiet replica without opening it, when
// lifecycle.AnswerVote says a running member would grant it; nil otherwise
// (the request then opens the member). The decision is taken again under
// the replica's lock, against the mark the vote replaces and the voters
// recorded at the close, and the new mark is recorded before the answer
// leaves: a quiet read on this server or a confirmation asked of it
// (quietread.go) sees the term move.
func (s *Server) voteClosed(sl *slot, header raft.RPCHeader, rv *raft.RequestVoteRequest) any {
	if len(rv.ID) == 0 {
		return nil
	}
	v := lifecycle.Vote{Term: rv.Term, LastLogIndex: rv.LastLogIndex, LastLogTerm: rv.LastLogTerm, Voter: true}
	if m := sl.mark.Load(); m == nil || lifecycle.AnswerVote(*m, v) != lifecycle.Grant {
		return nil
	}
	if !sl.lockWithin(s.wakeWait()) {
		return nil
	}
	defer sl.unlock()
	v.Voter = false
	if vp := sl.quietVoters.Load(); vp != nil {
		for _, srv := range vp.voters {
			if srv.ID == raft.ServerID(rv.ID) && srv.Suffrage == raft.Voter {
				v.Voter = true
			}
		}
	}
	m := sl.mark.Load()
	if sl.State() != lifecycle.Quiet || m == nil || lifecycle.AnswerVote(*m, v) != lifecycle.Grant {
		return nil
	}
	candidate := rv.RPCHeader.Addr
	if len(candidate) == 0 {
		candidate = rv.Candidate
	}
	if err := s.logs.Log(sl.id).SetVote(rv.Term, candidate); err != nil {
		s.logger.Warn("recording a vote on a quiet replica", "range", sl.id, "err", err)
		return nil
	}
	// Whatever it led, it no longer does: a later term has a candidate.
	sl.wasLeader.Store(false)
	none := ""
	sl.lastLeader.Store(&none)
	next := m.Voted(rv.Term)
	sl.mark.Store(&next)
	if !sl.followed.Swap(true) {
		s.checkClosedLater(sl)
	}
	s.logger.Debug("quiet replica voted closed", "range", sl.id, "term", rv.Term, "candidate", string(rv.ID))
	quietAnswersTotal.Inc()
	quietVotesTotal.Inc()
	return &raft.RequestVoteResponse{RPCHeader: header, Term: rv.Term, Granted: true}
}

// storeClosed appends ae's entries to a quiet replica's log without opening
// it (lifecycle.Answer said Store); nil when that is no longer right under
// the replica's lock, or the write failed (the request then opens it).
// A commit index past what the replica applied is not acted on here: the
// leader's next commit tick (an AppendEntries every one to two
// CommitTimeouts; raft's heartbeats carry no commit index) carries it too
// and opens the replica, after the write that brought the entries was
// answered.
func (s *Server) storeClosed(sl *slot, header raft.RPCHeader, ae *raft.AppendEntriesRequest, a lifecycle.Append) any {
	if !sl.lockWithin(s.wakeWait()) {
		return nil
	}
	defer sl.unlock()
	m := sl.mark.Load()
	if sl.State() != lifecycle.Quiet || m == nil || lifecycle.Answer(*m, a) != lifecycle.Store {
		return nil
	}
	if err := s.logs.Log(sl.id).StoreLogs(ae.Entries); err != nil {
		s.logger.Warn("storing entries on a quiet replica", "range", sl.id, "err", err)
		return nil
	}
	// It follows that leader now, as its open member would (RangeInfo).
	if leader := string(ae.RPCHeader.ID); leader != "" {
		sl.lastLeader.Store(&leader)
	}
	next := m.Stored(a)
	sl.mark.Store(&next)
	if !sl.followed.Swap(true) {
		s.checkClosedLater(sl)
	}
	quietAnswersTotal.Inc()
	quietStoredTotal.Add(float64(len(ae.Entries)))
	return &raft.AppendEntriesResponse{RPCHeader: header, Term: next.Term, LastLog: next.LastIndex, Success: true}
}

// checkClosedLater (armed by the first closed vote or store since the
// replica closed: it stays unsettled until it opens) opens sl, as a
// follower, if a wake wait from now it is
// still quiet with a vote or entries it took closed and never opened for
// (lifecycle.Mark.Unsettled): the member it voted for, or whose entries it
// stored, died before its commit tick reached this replica. Open, the
// replica times out without a leader and the range elects among the
// survivors, as it would had the vote opened it; without this the range
// would wait for its next request.
func (s *Server) checkClosedLater(sl *slot) {
	time.AfterFunc(s.wakeWait(), func() {
		if s.ctx == nil || s.ctx.Err() != nil || sl.State() != lifecycle.Quiet {
			return
		}
		if m := sl.mark.Load(); m != nil && m.Unsettled() {
			s.logger.Debug("quiet replica opens: what it took closed was never committed to it", "range", sl.id)
			s.Wake(sl.id)
		}
	})
}

// absentWait is how long a Raft message for a range not hosted here waits
// for it to be created.
const absentWait = 250 * time.Millisecond

// Wake implements grouptransport.Dormant: a Raft message the quiet answer
// cannot give opens the group (without a campaign: someone else is).
func (s *Server) Wake(group uint64) bool {
	sl := s.groupSlot(group)
	// A new range's first vote request can arrive before this server's
	// CreateReplica (or its apply of the split) created the replica:
	// hold it briefly rather than fail it into an election timeout.
	for deadline := time.Now().Add(absentWait); sl == nil && time.Now().Before(deadline); {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-s.ctx.Done():
			return false
		}
		sl = s.groupSlot(group)
	}
	if sl == nil {
		return false
	}
	_, err := s.wake(sl, lifecycle.RaftMessage, "raft message", s.wakeWait())
	return err == nil
}

// createReplica stores the range and starts its Raft member; it is a no-op
// when the replica is already hosted here, except that a set floor is
// raised on it. floor is the join floor of a replica a move creates (zero
// for none).
func (s *Server) createReplica(desc *pb.RangeDescriptor, bootstrap, campaign bool, raftAddrs map[string]string, floor joinFloor) error {
	defer s.lockRange(desc.GetRangeId())()
	return s.createReplicaLocked(desc, bootstrap, campaign, raftAddrs, floor)
}

// exists reports whether path names a file or directory (an error other
// than its absence counts as present: removing it will tell).
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// createReplicaLocked is createReplica with the range's lock held.
func (s *Server) createReplicaLocked(desc *pb.RangeDescriptor, bootstrap, campaign bool, raftAddrs map[string]string, floor joinFloor) error {
	for id, a := range raftAddrs {
		s.addrs.set(id, a)
	}
	id := desc.GetRangeId()
	campaign = campaign && bootstrap
	if g := rangegroup.GroupOf(desc); g != id {
		// A span of another range's group (docs/range-groups.md, stage
		// 7): only that group's log stores its record here, or a snapshot
		// of the group. Bootstrapped, it would be a group of its own
		// started outside that log (a span added to a group is at
		// generation 1 until the entry applies); stored while the group
		// is hosted here, a record written ahead of the entry. Hosted
		// already, it goes on below (a retried move's floor is raised).
		if bootstrap {
			return fmt.Errorf("%w: range %d of group %d", ErrSpanOfAnotherGroup, id, g)
		}
		if !s.hosts(id) && s.groupSlot(g) != nil {
			return nil
		}
	}
	if sl := s.slotOf(id); sl != nil && sl.State() == lifecycle.Removing {
		// A removal a failed action left part-way: it is not a replica to
		// keep (its member is closed, its state or log half gone), and a
		// create that found it "hosted" answered success with nothing
		// created. Its removal runs again first.
		if err := s.deleteReplicaLocked(id, 0, 0); err != nil {
			return fmt.Errorf("partitionserver: range %d: finish the removal of the earlier replica before creating it again: %w", id, err)
		}
	}
	if s.hosts(id) {
		// Only with a floor: a leftover with a log replaced by an empty
		// replica without one (an older master sends none) would be worse
		// than keeping it.
		if !floor.set() || !s.removedLeftover(id, desc) {
			// A retried CreateReplica of a move whose first attempt
			// created the replica but failed to open it (or crashed
			// before its floor was recorded) must not leave it floorless:
			// raising a floor is always safe, it is a verified committed
			// position.
			if err := s.raiseHostedFloor(id, floor); err != nil {
				return err
			}
			if campaign {
				s.campaignLeaderless(id)
			}
			return nil
		}
		// A move back onto this server while the delete of its earlier
		// replica (removed at a generation below desc's) had not run yet:
		// kept, that replica would be deleted by the late delete a moment
		// later (its generation is below the delete's), leaving the new
		// voter without a replica and a four-voter range one server from
		// no quorum (TestRecreatedMemberRefusesStaleMember hung on it). It
		// is deleted now, and created again empty with the floor.
		if err := s.deleteReplicaLocked(id, desc.GetGeneration(), 0); err != nil {
			return fmt.Errorf("partitionserver: range %d: delete the replica a move removed before creating it again: %w", id, err)
		}
		s.logger.Info("replica a move removed deleted before it is created again", "range", id, "generation", desc.GetGeneration())
	}
	// A directory left by an earlier replica of the range here (a delete
	// that crashed after removing its state, before the directory) holds
	// that replica's snapshots: the new one starts empty, not from them
	// (openReplica restores a stored snapshot the file is behind, and an
	// old one's span may now be another range's here).
	// The Raft state and the directory are the group's, named by desc
	// (its namesake, or a range an older master merged away): a live
	// group of that name serves other ranges here, and its directory
	// stays.
	g := rangegroup.GroupOf(desc)
	if has, err := s.store.HasRange(id); err != nil {
		return err
	} else if dir := replicaDir(s.cfg.DataDir, g); !has && s.groupSlot(g) == nil && exists(dir) {
		if err := durable.RemoveAll(dir); err != nil {
			return fmt.Errorf("partitionserver: range %d: remove the directory of an earlier replica: %w", id, err)
		}
	}
	// The floor goes into the group's stable keys before the range is
	// stored: a crash in between leaves an orphan group (dropped at
	// start), never a stored range without its floor.
	if _, err := raiseFloor(s.logs.Log(g), floor); err != nil {
		return fmt.Errorf("partitionserver: range %d join floor: %w", id, err)
	}
	if err := s.store.CreateRange(desc, bootstrap); err != nil && !errors.Is(err, fsm.ErrRangeExists) {
		return err
	}
	campaigned, err := s.create(desc, bootstrap, campaign, campaign, "master", floor)
	if err == nil && campaign && !campaigned {
		s.campaignLeaderless(id)
	}
	if err == nil {
		s.forgetRemoval(id, desc.GetGeneration()) // joinassigned.go
		s.births.Delete(id)                       // missedsplit.go: hosted now
	}
	return err
}

// rangeLock is the lock createReplica and deleteReplica hold for one
// range id, with the number of callers holding or waiting for it.
type rangeLock struct {
	mu   sync.Mutex
	refs int
}

// lockRange takes range id's create/delete lock and returns its release.
func (s *Server) lockRange(id uint64) (unlock func()) {
	s.rangeLocksMu.Lock()
	if s.rangeLocks == nil {
		s.rangeLocks = map[uint64]*rangeLock{}
	}
	l := s.rangeLocks[id]
	if l == nil {
		l = &rangeLock{}
		s.rangeLocks[id] = l
	}
	l.refs++
	s.rangeLocksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.rangeLocksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.rangeLocks, id)
		}
		s.rangeLocksMu.Unlock()
	}
}

// rangeLockUsers is how many callers hold or wait for range id's lock.
func (s *Server) rangeLockUsers(id uint64) int {
	s.rangeLocksMu.Lock()
	defer s.rangeLocksMu.Unlock()
	if l := s.rangeLocks[id]; l != nil {
		return l.refs
	}
	return 0
}

// raiseHostedFloor raises the join floor of the hosted replica id to f (a
// no-op for the zero floor) and puts the floor in force on its running
// member's transport gate.
func (s *Server) raiseHostedFloor(id uint64, f joinFloor) error {
	sl := s.slotOf(id)
	if !f.set() || sl == nil {
		return nil
	}
	sl.lock()
	defer sl.unlock()
	cur, err := raiseFloor(s.logs.Log(sl.id), f) // the group's log
	if err != nil {
		return fmt.Errorf("partitionserver: range %d join floor: %w", id, err)
	}
	if rep := sl.rep.Load(); rep != nil {
		rep.setFloor(cur)
	}
	return nil
}

// listed reports whether desc lists a replica on server id.
func listed(desc *pb.RangeDescriptor, id string) bool {
	for _, r := range desc.GetReplicas() {
		if r.GetServerId() == id {
			return true
		}
	}
	return false
}

// splitLeftover reports whether a range state found at start is the
// leftover of a split whose new range has no replica here: the split's
// apply on a parent member its descriptor did not list stores the new
// range's state (bootstrap, with the descriptor's voters), and
// RangeCreated deletes it after the commit, unless a crash came between.
// Opened, it would bootstrap a member outside its own configuration,
// which no leader feeds and the replica GC never collects (the map holds
// the same generation). ran (the range has a group in the shared log, or
// a directory, where an older build kept its log) means the replica did
// run here: a member whose applied descriptor no longer lists it may
// still be in the group's configuration (a voter), and only the master's
// replica GC decides about it.
func splitLeftover(st *pb.RangeState, self string, ran bool) bool {
	return st.GetBootstrap() && !ran && !listed(st.GetRange(), self)
}

// removedLeftover reports whether this server's replica of desc's range is
// one an earlier move removed: desc (a move's CreateReplica names the range
// as it is, without this server) does not list this server, and the
// replica's descriptor is older than desc.
func (s *Server) removedLeftover(id uint64, desc *pb.RangeDescriptor) bool {
	if listed(desc, s.id) {
		return false
	}
	sp := s.slotOf(id).span(id)
	return sp != nil && sp.Descriptor().GetGeneration() < desc.GetGeneration()
}

// campaignLeaderless makes the open member of a new range campaign if it is
// a follower that knows no leader. The master asks one replica of a new
// range to campaign, but the servers also create the replicas they are
// assigned from their heartbeats' answers, without a campaign: when that
// reconcile ran between the master's commit and its CreateReplica, the
// range had no candidate until an election timeout (500 ms – 1 s; the
// CreateTable outliers of ~600 ms). A candidate or a member that knows a
// leader is left alone: a second TimeoutNow would restart its election.
func (s *Server) campaignLeaderless(id uint64) {
	sl := s.slotOf(id)
	if sl == nil {
		return
	}
	rep := sl.open()
	if rep == nil || rep.raft.State() != raft.Follower || rep.leaderID() != "" {
		return
	}
	if err := rep.transport.Campaign(time.Second); err != nil {
		s.logger.Debug("campaign of a new range opened without one failed", "range", id, "err", err)
	}
}

// create registers and opens a stored range; campaigned reports whether
// this call opened it with a campaign.
func (s *Server) create(desc *pb.RangeDescriptor, bootstrap, campaign, fast bool, cause string, floor joinFloor) (campaigned bool, err error) {
	sl, _, err := s.addSlot(desc.GetRangeId())
	if err != nil {
		return false, err
	}
	sl.lock()
	defer sl.unlock()
	out, err := s.step(sl, lifecycle.Input{Event: lifecycle.Create, Campaign: campaign || fast}, cause,
		&openSpec{bootstrap: bootstrap, voters: s.voters(desc), fast: fast, floor: floor})
	if err == nil && out.Changed() {
		s.logger.Info("replica created", "range", desc.GetRangeId(), "table", desc.GetTable(), "bootstrap", bootstrap, "cause", cause)
	}
	return err == nil && slices.Contains(out.Actions, lifecycle.OpenCampaign), err
}

// RangeCreated starts the Raft group of a split's right-hand range. Every
// replica of the left range applies the split and bootstraps the same
// voters; the preferred leader (else the left range's leader) campaigns at
// once.
//
// It runs inside the state store's commit (an after-commit hook), which a
// caller holding a lock of the registry can trigger, so everything happens
// in the goroutine.
func (s *Server) RangeCreated(parent uint64, desc *pb.RangeDescriptor, preferredLeader string) {
	go func() {
		fast := preferredLeader == s.id
		if p := s.slotOf(parent); preferredLeader == "" && p != nil {
			if rep := p.open(); rep != nil && rep.isLeader() {
				fast = true
			}
		}
		if s.hosts(desc.GetRangeId()) {
			return
		}
		if !listed(desc, s.id) {
			// A member of the parent the descriptor does not list (a
			// split settles the members first: another master's change
			// raced it): the new range has no replica here. The split's
			// apply stored its state here anyway, which a restart would
			// open: it goes (and if a crash comes first, the start does
			// it: splitLeftover).
			if failpoint.Inject("partitionserver/split/keep-unlisted") != nil {
				return // tests: the crash before this delete
			}
			unlock := s.lockRange(desc.GetRangeId())
			var err error
			if !s.hosts(desc.GetRangeId()) {
				// Not a replica a move created here meanwhile.
				err = s.deleteReplicaLocked(desc.GetRangeId(), 0, 0)
			}
			unlock()
			s.logger.Warn("split range lists no replica on this server: not started, its state deleted", "range", desc.GetRangeId(), "parent", parent, "err", err)
			return
		}
		err := failpoint.Inject("partitionserver/split/start-fails") // tests: a start that fails without a crash
		if err == nil {
			_, err = s.create(desc, true, fast, fast, "split", joinFloor{})
		}
		if err != nil {
			if !errors.Is(err, ErrShuttingDown) {
				s.logger.Error("starting split range failed", "range", desc.GetRangeId(), "err", err)
			}
			return
		}
		s.logger.Info("split range started", "range", desc.GetRangeId(), "parent", parent, "start", desc.GetStart(), "end", desc.GetEnd())
	}()
}

// openStored opens a range the state file holds and no replica here serves
// as a start would (splitLeftover, found): a split's new range whose start
// failed here (RangeCreated logged why), which the master assigns to this
// server (lifecycle.OpenStored). Without it, only a restart opened it.
func (s *Server) openStored(id uint64) error {
	defer s.lockRange(id)()
	if s.slotOf(id) != nil {
		return nil // opened meanwhile
	}
	st, err := s.store.RangeState(id)
	if err != nil || st == nil {
		return err
	}
	g := rangegroup.GroupOf(st.GetRange()) // the Raft state is the group's
	ran := slices.Contains(s.logs.Groups(), g) || exists(replicaDir(s.cfg.DataDir, g))
	if splitLeftover(st, s.id, ran) {
		s.logger.Warn("split range lists no replica on this server: its stored state deleted", "range", id)
		return s.deleteReplicaLocked(id, 0, 0)
	}
	if err := s.found(st); err != nil {
		return err
	}
	sl := s.slotOf(id)
	if sl == nil {
		// found registered nothing for it: its record names a group
		// hosted here that does not serve it (or a merge took it since).
		return fmt.Errorf("%w: range %d: its stored record names group %d, which does not serve it here", ErrRangeNotHosted, id, st.GetRange().GetGroupId())
	}
	strandedOpenedTotal.Inc()
	s.logger.Warn("stored range no replica here served opened (its start had failed)", "range", id, "state", sl.State().String())
	return nil
}

// servesOthers reports whether sl's group has spans besides range id whose
// state the file still holds.
func (s *Server) servesOthers(sl *slot, id uint64) bool {
	for _, sp := range sl.spans() {
		if sp.ID() == id {
			continue
		}
		if ok, err := s.store.HasRange(sp.ID()); ok || err != nil {
			return true
		}
	}
	return false
}

// RangeMerged stops the group of a range its left neighbour took over here
// (the merge already deleted its state) and removes its Raft files.
func (s *Server) RangeMerged(into, right uint64) {
	go func() {
		sl := s.slotOf(right)
		if sl == nil {
			// Its group's own batch may have dropped the span first (the
			// merge deleted its record): a merge's right range is alone
			// in the group it names, which still runs.
			sl = s.groupSlot(right)
		}
		if sl == nil {
			return
		}
		if s.servesOthers(sl, right) {
			// Its group goes on serving its other spans (a quiet group
			// learns of the loss at no batch of its own: SpansChanged).
			s.dropSpans(sl, []uint64{right})
			return
		}
		sl.lock()
		defer sl.unlock()
		if _, err := s.step(sl, lifecycle.Input{Event: lifecycle.Merged}, "merge", nil); err != nil {
			s.logger.Warn("removing a merged range's raft log failed", "range", right, "err", err)
			return
		}
		s.logger.Info("range merged into its left neighbour here", "range", right, "into", into)
	}()
}

// deleteReplica stops a replica and removes its data, its group of the
// shared Raft log and its snapshots. A frozen replica whose left neighbour
// here has yet to apply the merge stays (fsm.ErrMergePending): the merge
// takes it over.
//
// before, when not zero, is the descriptor generation of the change that
// removed this server: a replica at that generation or later was
// re-created by a later move and is a voter, and wiping its log and vote
// could lose committed writes (a delete queued to a stopped process runs
// when it resumes), so the delete is refused with ErrLateDelete.
//
// abortedThrough (the master's merge decisions, DeleteReplicaRequest): a
// frozen replica whose freeze is at or below it awaits no merge.
func (s *Server) deleteReplica(id, before, abortedThrough uint64) error {
	return s.deleteNoted(id, before, abortedThrough, 0)
}

// deleteRemoved is deleteReplica for the master's DeleteReplica, whose
// before_generation (when set) is its proof that a later generation of
// range id does not list this server (a move's source, replica GC), and
// whose group (0: id) is the Raft group that generation names. Every span
// of a group lists the same replicas, rewritten in one entry, so that
// configuration is the group's, without this server: when range id is a
// span of that very group here, this copy of the whole group is stale and
// the whole group goes, spans and all. Each other span either is still in
// the group this server left, or left it by an entry this server missed (a
// group split while it was down), for a group of its own this server then
// joins afresh (a Join placement) rather than never, as when the delete
// was refused and the copy kept the span in the old group (chaos seed
// 2262). A master that names no group proves it for a group's namesake
// alone (a namesake never leaves its group, fsm.ErrSpanStays), which the
// default group, id itself, gives.
func (s *Server) deleteRemoved(id, before, abortedThrough, group uint64) error {
	if group == 0 {
		group = id
	}
	return s.deleteNoted(id, before, abortedThrough, group)
}

// deleteNoted deletes under id's range lock and notes a removal at before
// (joinassigned.go); a provenGroup (deleteRemoved) lets the delete take
// the whole group when range id is served here by that group.
func (s *Server) deleteNoted(id, before, abortedThrough, provenGroup uint64) error {
	defer s.lockRange(id)()
	sl := s.slotOf(id)
	var whole func([]*fsm.Range) error
	if provenGroup != 0 && before > 0 && sl != nil && sl.id == provenGroup {
		whole = wholeGroup
	}
	err := s.removeReplica(id, before, abortedThrough, whole)
	if err == nil && before > 0 {
		s.noteRemoval(id, before) // joinassigned.go
	}
	return err
}

// deleteReplicaLocked is deleteReplica with id's range lock held: the slot
// it fetches stays id's slot until it is done (a late delete of an earlier
// move that waited on a slot a create replaced would pass the generation
// guard on the old descriptor and wipe the new replica's state and log by
// id).
func (s *Server) deleteReplicaLocked(id, before, abortedThrough uint64) error {
	return s.removeReplica(id, before, abortedThrough, nil)
}

// deleteDropped deletes the replica of a range of a dropped table, with
// the rest of its group when every span of the group is of a dropped
// table (tables, the master's last word on the catalog). A group that
// also serves a live table's span is refused (errSpanOfGroup): tables
// share groups (docs/range-groups.md, stage 7), and the dropped span
// leaves the group first (detachDropped, reconcile).
func (s *Server) deleteDropped(id uint64, tables liveTables) error {
	defer s.lockRange(id)()
	return s.removeReplica(id, 0, 0, func(spans []*fsm.Range) error {
		if !tables.allDropped(spans) {
			return errNotAllDropped(id, spans)
		}
		return nil
	})
}

// wholeGroup lets removeReplica delete a group that serves other ranges
// besides the one named.
func wholeGroup([]*fsm.Range) error { return nil }

// removeReplica is deleteReplicaLocked; whole, when not nil, lets it
// delete a group that serves other ranges besides id unless it refuses
// the group's spans (read under the slot's lock).
func (s *Server) removeReplica(id, before, abortedThrough uint64, whole func(spans []*fsm.Range) error) error {
	if err := s.store.CheckDelete(id, abortedThrough); err != nil {
		return err
	}
	sl := s.slotOf(id)
	hosted := sl != nil
	if sl == nil && s.groupSlot(id) != nil {
		// Range id is not served here, but its id still names a live
		// group: one whose namesake an older master merged away across
		// groups (a merge now takes its right range alone in its group).
		// Its log and directory are that group's, serving its other
		// ranges; the leftovers path below would drop them under it. A
		// record of the range no group serves goes alone.
		s.logger.Debug("delete of a range that is not hosted, whose id names a live group: its record only", "range", id)
		if err := s.store.DeleteRange(id, abortedThrough); err != nil && !errors.Is(err, fsm.ErrRangeNotFound) {
			return err
		}
		return nil
	}
	if sl == nil {
		// Leftovers of an interrupted delete go too.
		sl = newSlot(id, nil, &s.cfg)
	}
	sl.lock()
	defer sl.unlock()
	if spans := sl.spans(); len(spans) > 1 {
		// Deleting the range would delete its group: a span leaves a
		// group by the group's own log (a group split), not by a delete.
		if whole == nil {
			return fmt.Errorf("%w: range %d is one of %d spans of group %d", errSpanOfGroup, id, len(spans), sl.id)
		}
		if err := whole(spans); err != nil {
			return err
		}
	}
	if sp := sl.span(id); before > 0 && sp != nil {
		if gen := sp.Descriptor().GetGeneration(); gen >= before {
			s.logger.Warn("late replica delete refused", "range", id, "generation", gen, "before", before)
			return fmt.Errorf("%w: range %d is at generation %d, the delete was for below %d", ErrLateDelete, id, gen, before)
		}
	}
	sl.abortedThrough = abortedThrough
	if _, err := s.step(sl, lifecycle.Input{Event: lifecycle.Delete}, "delete", nil); err != nil {
		return err
	}
	if hosted {
		s.logger.Info("replica deleted", "range", id)
	}
	return nil
}

// restartReplica stops old's Raft member and starts it again from its
// durable state, in place.
func (s *Server) restartReplica(old *member) {
	sl := s.groupSlot(old.id)
	if sl == nil {
		return
	}
	sl.lock()
	defer sl.unlock()
	if sl.rep.Load() != old {
		return
	}
	// The Restart's close closes the member's transport before raft's
	// Shutdown (replica.close), so RPCs stalled on a silent peer do not
	// hold it.
	if _, err := s.step(sl, lifecycle.Input{Event: lifecycle.Restart}, "stuck leadership transfer", nil); err != nil {
		old.logger.Error("restarting raft member failed; the next request retries", "err", err)
	}
}

// Quiesced implements fsm.QuiesceHook. It runs in the state machine's
// commit, so the work happens in a goroutine.
func (s *Server) Quiesced(id, index uint64) {
	go s.onQuiesced(id, index)
}

// onQuiesced closes the member if the QUIESCE marker at index is still its
// last entry and nothing used the range since. The leader first waits
// until its followers learned the marker's commit (and close) before its
// replication stops (awaitMarkerKnown).
func (s *Server) onQuiesced(id, index uint64) {
	sl := s.groupSlot(id)
	if sl == nil {
		return
	}
	rep := sl.open()
	if rep == nil {
		return
	}
	grace := s.quiesceGrace()
	if rep.isLeader() {
		sl.closing.Store(true)
		defer sl.closing.Store(false)
		if !s.awaitMarkerKnown(rep, index) {
			return
		}
	}
	sl.lock()
	defer sl.unlock()
	if sl.open() != rep || rep.raft.LastIndex() != index || rep.raft.AppliedIndex() < index {
		return
	}
	if time.Since(time.Unix(0, sl.lastUse.Load())) < grace {
		return
	}
	sl.quietAt.Store(index)
	// The configuration at the marker (its last entry): the voters a quiet
	// read must hear from. Without it quiet reads of this range wake it.
	if f := rep.raft.GetConfiguration(); f.Error() == nil {
		sl.quietVoters.Store(&quietVoters{at: index, voters: f.Configuration().Servers})
	}
	if _, err := s.step(sl, lifecycle.Input{Event: lifecycle.Quiesced}, "quiesce marker", nil); err != nil {
		s.logger.Warn("closing a quiet range", "range", id, "err", err)
	}
	quiescedTotal.Inc()
}

// quiesceGrace is how recent a request keeps a range open when its QUIESCE
// marker applies.
func (s *Server) quiesceGrace() time.Duration {
	return max(s.cfg.RaftHeartbeatTimeout/2, 4*s.cfg.RaftCommitTimeout)
}

// markerWait bounds how long a leader whose QUIESCE marker committed keeps
// replicating for a voter that has not acknowledged learning the commit: a
// voter that is down or cut off. The voter is heartbeated meanwhile, so
// waiting costs no election, only a later close; and the quiesce loop
// proposes no other marker meanwhile (slot.closing: a wait past its stable
// window, min(QuiesceAfter, 1 s), used to have it propose another, which
// reopened the followers, again and again).
func (s *Server) markerWait() time.Duration {
	return max(2*time.Second, 4*s.cfg.RaftHeartbeatTimeout)
}

// awaitMarkerKnown waits, on the leader, until every other voter
// acknowledged an append telling it the QUIESCE marker at index committed
// (grouptransport CommitKnown), or markerWait passed, or the marker is no
// longer the last entry; false when the server stops. Followers learn the
// commit on the leader's next append (a commit tick, one to two commit
// timeouts away) but, on a loaded machine, hundreds of milliseconds later.
// One that has not when the leader closes never does: it stays open
// without a leader, its pre-votes refused by the closed members
// (lifecycle.AnswerPreVote), until a request wakes the range. A fixed
// grace of 250 ms left a moved replica open that way under load
// (TestQuiesceWaitsForSlowFollower; cluster TestQuietRangeSplitMergeMove
// failed once in make test).
func (s *Server) awaitMarkerKnown(rep *member, index uint64) bool {
	deadline := time.Now().Add(s.markerWait())
	poll := max(s.cfg.RaftCommitTimeout/2, 5*time.Millisecond)
	for {
		if s.markerKnown(rep, index) || !time.Now().Before(deadline) || rep.raft.LastIndex() != index || !rep.isLeader() {
			return true
		}
		select {
		case <-time.After(poll):
		case <-s.ctx.Done():
			return false
		}
	}
}

// markerKnown reports whether every voter but this member acknowledged
// knowing index committed.
func (s *Server) markerKnown(rep *member, index uint64) bool {
	f := rep.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, sv := range f.Configuration().Servers {
		if sv.Suffrage == raft.Voter && string(sv.ID) != s.id && !rep.transport.CommitKnown(sv.ID, index) {
			return false
		}
	}
	return true
}

// quiesceLoop proposes a QUIESCE marker on every range this server leads
// that has seen no request and no new log entry for cfg.QuiesceAfter.
func (s *Server) quiesceLoop() {
	every := min(max(s.cfg.QuiesceAfter/4, 50*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, sl := range s.slotList() {
			rep := sl.open()
			if rep == nil || sl.quiescing.Load() || sl.closing.Load() {
				continue
			}
			last := rep.raft.LastIndex()
			if last != sl.seenIndex || sl.seenAt.IsZero() {
				sl.seenIndex, sl.seenAt = last, now
				continue
			}
			// Idle means no request here for QuiesceAfter, and a log that
			// has not moved for a moment (an election's no-op, a reshaping
			// entry just proposed). Not "no log entry for QuiesceAfter": a
			// range whose leaders keep changing under load (each election
			// appends an entry) would then never go quiet, and its
			// heartbeats are what starve the others into more elections.
			stable := min(s.cfg.QuiesceAfter, time.Second)
			if now.Sub(time.Unix(0, sl.lastUse.Load())) < s.cfg.QuiesceAfter || now.Sub(sl.seenAt) < stable ||
				!rep.isLeader() || rep.raft.AppliedIndex() < last || rep.watching.Load() || rep.birthPending.Load() {
				continue
			}
			if rep.hasNonvoter() {
				// A move's non-voter catching up, or one an interrupted
				// move left: a closed leader reports no configuration, so
				// the master's replica-set check would not see the
				// leftover one until a request woke the range, and a
				// catching-up one would wait for the promotion to wake it.
				continue
			}
			sl.quiescing.Store(true)
			go func() {
				defer sl.quiescing.Store(false)
				s.quiesce(rep)
			}()
		}
	}
}

// quiesce commits a QUIESCE marker on rep's log; the marker's apply closes
// the members (Quiesced).
func (s *Server) quiesce(rep *member) {
	data, err := fsm.EncodeQuiesce()
	if err != nil {
		return
	}
	// Its followers close on the marker and then answer for their closed
	// members without promises: the lease ends here for this term.
	rep.transport.DisableLease(rep.raft.CurrentTerm())
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	if _, err := rep.propose(ctx, data, s.cfg.ApplyTimeout); err != nil {
		s.logger.Debug("quiesce marker not committed", "range", rep.id, "err", err)
	}
}

// closeAll stops every member in parallel; past deadline it stops waiting
// (the process is exiting: what a member had not finished is what a crash
// leaves, which Raft and the state file recover from).
func (s *Server) closeAll(slots []*slot, deadline time.Duration) {
	var wg sync.WaitGroup
	for _, sl := range slots {
		wg.Add(1)
		go func(sl *slot) {
			defer wg.Done()
			sl.lock()
			defer sl.unlock()
			if _, err := s.step(sl, lifecycle.Input{Event: lifecycle.Shutdown}, "shutdown", nil); err != nil {
				s.logger.Warn("closing replica", "range", sl.id, "err", err)
			}
		}(sl)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(deadline):
		s.logger.Warn("replicas still closing at the shutdown deadline; leaving them", "deadline", deadline)
	}
}

// lifecycleOf names a slot's state for status reports.
func lifecycleOf(sl *slot) string { return sl.State().String() }

// HasStoredState reports whether this server's state file holds a state
// for range id, hosted or not (a check that state the server must not keep
// is gone).
func (s *Server) HasStoredState(id uint64) bool {
	has, err := s.store.HasRange(id)
	return has || err != nil
}

// ReplicaState names the lifecycle state of range id's replica here
// ("absent" when not hosted); tests and tools watch it.
func (s *Server) ReplicaState(id uint64) string {
	sl := s.slotOf(id)
	if sl == nil {
		return lifecycle.Absent.String()
	}
	return sl.State().String()
}
