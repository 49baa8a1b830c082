package master

import (
	"context"
	"errors"
	"fmt"
	"time"

	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// Stage 8 of docs/range-groups.md, the master's side: a table that is one
// range R in a Raft group of its own joins an anchor group G as a span,
// its rows where they are, by the protocol of the cross-group merge
// (merge, ops.go), with G's log taking R's keys instead of a left range:
//
//  1. co-locate: R's replicas move onto G's servers (R is alone in its
//     group: nothing to isolate), so every server of G holds R's rows in
//     the state file G's spans share;
//  2. freeze: R's log gets Freeze, and the master waits, bounded, for
//     every replica of R to apply it (readyToFreeze, waitFreeze);
//  3. decide: COMMIT with attach_group G (every replica applied the
//     freeze and the attach is still fit: attachUnfit), or ABORT and
//     unfreeze, recorded in the master's log (MergeDecision, final);
//  4. attach, only after COMMIT: G's log gets AttachSpan{R, freeze index}
//     (the partition server's AttachSpan on G's leader); each server of
//     G rewrites R's record as a span of G and ends R's own group;
//  5. record: UPDATE_RANGES with the span G answered (R keeps its id; the
//     map's group index and leaders follow), and a group-join event.
//
// No REMOVE_RANGE and no retire: R lives on as a span, and its replicas'
// state is G's now (replica GC deletes only replicas on servers the map
// does not list, and R's servers are G's). A master that dies after the
// freeze leaves R frozen; the next resumes it (resumeAlone): a COMMIT
// naming G is carried out from step 4 (AttachSpan answers the span again
// once it applied), an ABORT unfreezes, and a freeze with no decision
// (the master died before step 3) is decided ABORT and unfrozen.

// ErrAttachUnfit: range R cannot join the anchor group named (or none
// can take it): see attachGap. Nothing was frozen, or the freeze was
// aborted and undone.
var ErrAttachUnfit = errors.New("master: the range cannot join the anchor group")

// errFrozenUndecided is the reason a resuming master records ABORT for
// the freeze of a table's only range that has no decision: an attach's
// master died between its freeze and its decision, and nothing says
// which group it was for.
var errFrozenUndecided = errors.New("master: a table's only range frozen with no decision recorded (its master died before deciding)")

// attach takes range id, its table's only range and its Raft group's only
// range, into the group of anchor range anchor as a span (0: the master
// picks one, attachHome, and claims it for the while). The caller claims
// id and a named anchor (the runner, GroupTables, resumeAlone), as for a
// merge, so no create's addSpan into the group, move of it or other
// operation on either runs meanwhile. Steps: see the comment above.
func (s *Server) attach(ctx context.Context, id, anchor uint64, cause, reason string, figures map[string]float64) (*pb.RangeDescriptor, error) {
	start := time.Now()
	r, g, err := s.attachTarget(id, anchor)
	if err != nil {
		return nil, err
	}
	if anchor == 0 {
		if err := s.ops.claim(g.GetRangeId()); err != nil {
			return nil, err
		}
		defer s.ops.release(g.GetRangeId())
	}
	if s.reports.frozenAt(id) != 0 {
		return nil, fmt.Errorf("%w: range %d is frozen", ErrBusy, id)
	}
	if err := s.attachRefusal(r, g.GetRangeId()); err != nil {
		return nil, err
	}
	if r, err = s.colocate(ctx, g, r, cause); err != nil {
		return nil, fmt.Errorf("co-locate range %d with anchor group %d: %w", id, g.GetRangeId(), err)
	}
	if err := failpoint.Inject("master/attach/after-colocate"); err != nil {
		return nil, err
	}
	var t mergeTimes
	freeze, err := s.freezeToAttach(ctx, g.GetRangeId(), r, &t)
	if err != nil {
		return nil, err
	}
	if err := failpoint.Inject("master/attach/after-decision"); err != nil {
		return nil, err
	}
	// Committed: R serves nothing until G takes it, so the caller's
	// deadline must not leave it frozen until a later pass resumes it.
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	s.freezeOnReplicas(ctx, freeze, t.freezeSeen)
	got, err := s.attachSpan(ctx, g.GetRangeId(), freeze, &t)
	if err != nil {
		return nil, err
	}
	s.attachEvent(r, got, g.GetRangeId(), cause, reason, figures, start, t)
	return got, nil
}

// attachTarget reads range id and the anchor range from the map, picking
// the anchor (attachHome) when anchor is 0.
func (s *Server) attachTarget(id, anchor uint64) (r, g *pb.RangeDescriptor, err error) {
	r, ok := s.rangeDesc(id)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	if anchor == 0 {
		var why string
		if anchor, why, _ = attachHome(s.attachInputNow(), r); anchor == 0 {
			return nil, nil, fmt.Errorf("%w: range %d: %s", ErrAttachUnfit, id, why)
		}
	}
	if g, ok = s.rangeDesc(anchor); !ok {
		return nil, nil, fmt.Errorf("%w: anchor %d: %w", ErrAttachUnfit, anchor, ErrRangeNotFound)
	}
	return r, g, nil
}

// attachInput is what attachGap decides from, read from one master's
// map and reports.
type attachInput struct {
	// tableRanges: the ranges of r's table; groupRanges: of r's group.
	tableRanges, groupRanges int
	// anchorLive: the anchor names a live anchor's range.
	anchorLive bool
	// spans of the anchor's group (the anchor included), cap maxSpans
	// (--table-group-spans).
	spans, maxSpans int
	// whole: every server of the anchor's group fits (groupFit, with
	// attach_spans announced as well as table_groups).
	whole bool
	// canAttach: the server announced attach_spans to this master.
	canAttach func(server string) bool
}

// attachGap says why range r cannot join the group of anchor range g
// (nil: it can, but for co-location, which colocationExact checks): r is
// an anchor's, a span of a group, or one of several ranges of its table;
// g is no live anchor, its group is full or a server of it does not fit;
// a server of r's or g's replicas did not announce attach_spans. Pure.
func attachGap(r, g *pb.RangeDescriptor, in attachInput) error {
	id := r.GetRangeId()
	why := ""
	switch {
	case reservedName(r.GetTable()):
		why = "it is an anchor's"
	case rangegroup.GroupOf(r) != id || in.groupRanges != 1:
		why = fmt.Sprintf("its Raft group %d serves %d ranges", rangegroup.GroupOf(r), in.groupRanges)
	case in.tableRanges != 1 || r.GetStart() != "" || r.GetEnd() != "":
		why = fmt.Sprintf("its table has %d ranges", in.tableRanges)
	case !in.anchorLive || !isAnchor(g):
		why = fmt.Sprintf("range %d is no live anchor", g.GetRangeId())
	case in.spans >= in.maxSpans:
		why = fmt.Sprintf("anchor group %d is full (%d spans, --table-group-spans %d)", g.GetRangeId(), in.spans, in.maxSpans)
	case !in.whole:
		why = fmt.Sprintf("a server of anchor group %d does not fit (down, silent, draining, slow, full, or without table_groups or attach_spans)", g.GetRangeId())
	}
	if why == "" {
		for _, sv := range append(serversOf(r), serversOf(g)...) {
			if !in.canAttach(sv) {
				why = fmt.Sprintf("server %s does not announce attach_spans", sv)
				break
			}
		}
	}
	if why != "" {
		return fmt.Errorf("%w: range %d to group %d: %s", ErrAttachUnfit, id, g.GetRangeId(), why)
	}
	return nil
}

// colocationExact is nil when r's replicas are on exactly g's servers:
// every server of g applies the attach with its own replica of r, and a
// replica of r on a server outside g would stay frozen for good.
func colocationExact(g, r *pb.RangeDescriptor) error {
	if extra := serversNotIn(r, g); len(extra) > 0 {
		return fmt.Errorf("%w: %w: range %d on %s, outside group %d's servers %v", ErrAttachUnfit, ErrNotColocated, r.GetRangeId(), extra[0], g.GetRangeId(), serversOf(g))
	}
	if err := colocationGap(g, r); err != nil {
		return fmt.Errorf("%w: %w", ErrAttachUnfit, err)
	}
	return nil
}

// attachInputOf gathers attachGap's input for r and anchor from this
// master's map and reports.
func (s *Server) attachInputOf(r *pb.RangeDescriptor, anchor uint64) (*pb.RangeDescriptor, attachInput) {
	in := attachInput{maxSpans: s.cfg.TableGroupSpans, canAttach: s.reports.canAttachSpans}
	var g *pb.RangeDescriptor
	s.fsm.read(func(st *state) {
		in.tableRanges = len(st.tableRanges[r.GetTableId()])
		in.groupRanges = len(st.groupSpans[rangegroup.GroupOf(r)])
		g = st.ranges[anchor]
		in.anchorLive = st.liveAnchor(anchor) != nil
		in.spans = len(st.groupSpans[anchor])
	})
	if g == nil {
		g = &pb.RangeDescriptor{RangeId: anchor}
	}
	hi := s.attachInputNow()
	for _, sr := range hi.Snap.Ranges {
		if sr.ID == anchor {
			in.whole, _ = groupFit(sr, serversByID(hi.Snap), hi.CanShare)
		}
	}
	return g, in
}

// attachRefusal is attachGap for r and anchor over this master's map and
// reports (co-location aside: the attach makes it).
func (s *Server) attachRefusal(r *pb.RangeDescriptor, anchor uint64) error {
	g, in := s.attachInputOf(r, anchor)
	return attachGap(r, g, in)
}

// attachUnfit says why the group of anchor cannot take right's freeze
// (right: the descriptor the freeze reported), nil if it can: attachGap
// again (the anchor gone, its group full or no longer fit, R changed),
// and every server of the group holding R's replica and no other server
// holding one (colocationExact). Checked before the COMMIT is proposed,
// as mergeUnfit is for a merge; an unfit attach is recorded ABORT.
func (s *Server) attachUnfit(anchor uint64, right *pb.RangeDescriptor) error {
	g, in := s.attachInputOf(right, anchor)
	if err := attachGap(right, g, in); err != nil {
		return err
	}
	return colocationExact(g, right)
}

// serversByID indexes a snapshot's servers.
func serversByID(snap *scheduler.Snapshot) map[string]scheduler.Server {
	out := make(map[string]scheduler.Server, len(snap.Servers))
	for _, sv := range snap.Servers {
		out[sv.ID] = sv
	}
	return out
}

// attachInputNow is homeGroupInputNow for an attach: a group's servers
// must each announce attach_spans as well as table_groups.
func (s *Server) attachInputNow() homeGroupInput {
	in := s.homeGroupInputNow()
	in.CanShare = func(sv string) bool { return s.reports.canShareGroups(sv) && s.reports.canAttachSpans(sv) }
	return in
}

// freezeAt asks range id's leader to freeze it (onlyIfFrozen: to report
// the freeze it has, index 0 if none).
func (s *Server) freezeAt(ctx context.Context, id uint64, onlyIfFrozen bool) (*pb.FreezeRangeResponse, error) {
	var freeze *pb.FreezeRangeResponse
	err := s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		var err error
		freeze, err = c.FreezeRange(ctx, &pb.FreezeRangeRequest{RangeId: id, OnlyIfFrozen: onlyIfFrozen})
		return err
	})
	if err != nil {
		if rpcerr.Parse(err).Reason == rpcerr.ReasonNotReady {
			// Refused before it was proposed: nothing to undo.
			return nil, fmt.Errorf("%w: freeze range %d: %v", ErrNotReady, id, err)
		}
		return nil, fmt.Errorf("freeze range %d: %w", id, err)
	}
	return freeze, nil
}

// freezeToAttach is a fresh attach's steps 2 and 3: once every replica
// of r answers (readyToFreeze), freeze r, then decide: it returns once a
// COMMIT naming anchor is recorded for the freeze, or unfreezes r after
// an ABORT and returns ErrMergeAborted.
func (s *Server) freezeToAttach(ctx context.Context, anchor uint64, r *pb.RangeDescriptor, t *mergeTimes) (*pb.FreezeRangeResponse, error) {
	id := r.GetRangeId()
	if err := s.readyToFreeze(ctx, r); err != nil {
		return nil, fmt.Errorf("attach range %d to group %d: %w", id, anchor, err)
	}
	if err := failpoint.Inject("master/attach/before-freeze"); err != nil {
		return nil, err
	}
	t.frozenAt = time.Now()
	freeze, err := s.freezeAt(ctx, id, false)
	if err != nil {
		return nil, err
	}
	t.frozen = time.Now()
	s.reports.observeFreeze(id, freeze.GetRange().GetGeneration(), true, freeze.GetFreezeIndex(), freeze.GetAppliedIndex())
	// As if the master died between the freeze and the decision: the
	// next one's resumeAlone decides ABORT.
	if err := failpoint.Inject("master/attach/after-freeze"); err != nil {
		return nil, err
	}
	// Frozen: decided and carried out whatever the caller's deadline.
	dctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	outcome, seen, err := s.decideFreeze(dctx, freeze.GetRange(), freeze.GetFreezeIndex(), s.attachUnfit(anchor, freeze.GetRange()), anchor)
	t.freezeSeen = seen
	if err != nil {
		return nil, fmt.Errorf("decide the attach of range %d to group %d (freeze at %d): %w", id, anchor, freeze.GetFreezeIndex(), err)
	}
	if outcome == pb.MergeOutcome_MERGE_OUTCOME_ABORT {
		return nil, s.undoFreeze(dctx, id, freeze.GetFreezeIndex())
	}
	t.caughtUp = time.Now()
	return freeze, nil
}

// undoFreeze carries out a recorded ABORT of range id's freeze at index
// (the unfreeze) and returns the abort as an error: ErrMergeAborted with
// ErrNotReady (ask again). An unfreeze that fails is retried by
// resumeMerges (the range stays on the frozen list).
func (s *Server) undoFreeze(ctx context.Context, id, index uint64) error {
	if err := s.unfreeze(ctx, id, index); err != nil {
		return fmt.Errorf("%w: %w: range %d (freeze at %d), but its unfreeze failed: %w", ErrNotReady, ErrMergeAborted, id, index, err)
	}
	s.logger.Info("attach aborted; range unfrozen", "range", id, "freeze_index", index)
	return fmt.Errorf("%w: %w: range %d (freeze at %d)", ErrNotReady, ErrMergeAborted, id, index)
}

// attachSpan is a committed attach's steps 4 and 5: AttachSpan on the
// leader of anchor's group with R's freeze, then the span it answers
// recorded in the map (UPDATE_RANGES), R's freeze forgotten
// (thawAttached) and its leader the group's.
func (s *Server) attachSpan(ctx context.Context, anchor uint64, freeze *pb.FreezeRangeResponse, t *mergeTimes) (*pb.RangeDescriptor, error) {
	id := freeze.GetRange().GetRangeId()
	var got *pb.RangeDescriptor
	err := s.onLeader(ctx, anchor, func(ctx context.Context, c pb.PartitionServiceClient) error {
		resp, err := c.AttachSpan(ctx, &pb.AttachSpanRequest{GroupRangeId: anchor, Right: freeze.GetRange(), RightFreezeIndex: freeze.GetFreezeIndex()})
		if err == nil {
			got = resp.GetRange()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach range %d to group %d: %w", id, anchor, err)
	}
	t.mergedAt = time.Now()
	if err := failpoint.Inject("master/attach/after-attach"); err != nil {
		return nil, err
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{got}}); err != nil {
		return nil, err
	}
	t.removed = time.Now()
	s.reports.thawAttached(id, freeze.GetFreezeIndex())
	if l := s.leaderOf(anchor); l != "" {
		s.setLeader(id, l)
	}
	return got, nil
}

// attachEvent records a finished attach (EVENT_KIND_GROUP_JOIN) with the
// time of each step; the write pause is from the freeze to the map
// update.
func (s *Server) attachEvent(r, got *pb.RangeDescriptor, anchor uint64, cause, reason string, figures map[string]float64, start time.Time, t mergeTimes) {
	pause := t.removed.Sub(t.frozenAt)
	if figures == nil {
		figures = map[string]float64{}
	}
	figures["write_pause_seconds"] = pause.Seconds()
	figures["attach_command_seconds"] = t.mergedAt.Sub(t.caughtUp).Seconds()
	spans := 0
	s.fsm.read(func(st *state) { spans = len(st.groupSpans[anchor]) })
	figures["group_spans"] = float64(spans)
	s.event(&pb.Event{
		Kind: pb.EventKind_EVENT_KIND_GROUP_JOIN, Table: r.GetTable(), RangeIds: []uint64{r.GetRangeId(), anchor},
		Figures: figures, Cause: cause, DurationSeconds: time.Since(start).Seconds(), Servers: serversOf(got),
		Message: fmt.Sprintf("range %d of table %s left its own Raft group for anchor group %d (%d spans), its rows where they were", r.GetRangeId(), r.GetTable(), anchor, spans) + withReason(reason),
	})
	opSeconds.WithLabelValues("attach").Observe(time.Since(start).Seconds())
}

// resumeAlone, resumeMerges' share for a frozen range whose freeze may be
// an attach's: one whose recorded decision names an attach group, or a
// table's only range alone in its group (a merge's right range always
// has a left neighbour, so such a freeze is an attach's whose master died
// before its decision). It resumes it in the background (resumeAttach),
// the range and the decision's group claimed, and reports whether d was
// such a range (false: resumeMerges treats it as a merge's).
func (s *Server) resumeAlone(d *pb.RangeDescriptor) bool {
	id := d.GetRangeId()
	var dec *pb.MergeDecision
	s.fsm.read(func(st *state) { dec = st.mergeDecisions[id] })
	g := dec.GetAttachGroup()
	alone := d.GetStart() == "" && d.GetEnd() == "" && rangegroup.GroupOf(d) == id
	if g == 0 && !alone {
		return false
	}
	ids := []uint64{id}
	if g != 0 && g != id {
		ids = append(ids, g)
	}
	if s.ops.claim(ids...) != nil {
		return true
	}
	go func() {
		defer s.ops.release(ids...)
		ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
		defer cancel()
		err := s.resumeAttach(ctx, id)
		switch {
		case errors.Is(err, errNotFrozen), errors.Is(err, ErrMergeAborted):
			s.logger.Info("resumed attach", "range", id, "err", err)
		case err != nil:
			s.logger.Warn("resuming an attach failed", "range", id, "err", err)
		}
	}()
	return true
}

// resumeAttach finishes the attach of frozen range id that a master left
// half done: a decision naming a group the map shows the range a span of
// already is done (the freeze forgotten); else the leader reports the
// freeze, and the decision recorded for it is carried out: COMMIT naming
// a group from AttachSpan on (finishAttach), ABORT by the unfreeze; with
// none, ABORT is recorded (errFrozenUndecided) and carried out. A leader
// that reports the range unfrozen after a COMMIT may be the group's,
// serving the range as its span (the AttachSpan applied, its record
// lost): AttachSpan again answers the span.
func (s *Server) resumeAttach(ctx context.Context, id uint64) error {
	d, ok := s.rangeDesc(id)
	if !ok {
		return fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	var dec *pb.MergeDecision
	s.fsm.read(func(st *state) { dec = st.mergeDecisions[id] })
	if g := dec.GetAttachGroup(); g != 0 && rangegroup.GroupOf(d) == g {
		s.reports.thawAttached(id, dec.GetFreezeIndex())
		return nil
	}
	freeze, err := s.freezeAt(ctx, id, true)
	if err != nil {
		return err
	}
	if freeze.GetFreezeIndex() == 0 {
		if dec.GetAttachGroup() != 0 && dec.GetOutcome() == pb.MergeOutcome_MERGE_OUTCOME_COMMIT {
			return s.finishAttach(ctx, d, &pb.FreezeRangeResponse{Range: d, FreezeIndex: dec.GetFreezeIndex()}, dec.GetAttachGroup(), true)
		}
		s.reports.observeFreeze(id, freeze.GetRange().GetGeneration(), false, 0, freeze.GetAppliedIndex())
		return fmt.Errorf("%w: range %d (its leader applied %d)", errNotFrozen, id, freeze.GetAppliedIndex())
	}
	s.reports.observeFreeze(id, freeze.GetRange().GetGeneration(), true, freeze.GetFreezeIndex(), freeze.GetAppliedIndex())
	outcome, _, err := s.decideFreeze(ctx, freeze.GetRange(), freeze.GetFreezeIndex(), errFrozenUndecided, 0)
	if err != nil {
		return fmt.Errorf("decide the frozen range %d (freeze at %d): %w", id, freeze.GetFreezeIndex(), err)
	}
	if outcome == pb.MergeOutcome_MERGE_OUTCOME_ABORT {
		return s.undoFreeze(ctx, id, freeze.GetFreezeIndex())
	}
	var g uint64
	s.fsm.read(func(st *state) { g = st.mergeDecisions[id].GetAttachGroup() })
	if g == 0 {
		// A merge's COMMIT for a range with no left neighbour: nothing
		// an attach may carry out (resumeMerges once the map shows it).
		return fmt.Errorf("range %d: a COMMIT naming no attach group and no left neighbour in the map", id)
	}
	return s.finishAttach(ctx, d, freeze, g, false)
}

// finishAttach carries out a recorded COMMIT attaching range d to the
// group of anchor from the AttachSpan on (a resumed attach), and records
// the event. unfrozen: the leader asked reported no freeze (the attach
// may have applied), so the freeze's replicas are not waited for.
func (s *Server) finishAttach(ctx context.Context, d *pb.RangeDescriptor, freeze *pb.FreezeRangeResponse, anchor uint64, unfrozen bool) error {
	start := time.Now()
	t := mergeTimes{frozenAt: start, frozen: start, caughtUp: start}
	if !unfrozen {
		s.freezeOnReplicas(ctx, freeze, false)
	}
	got, err := s.attachSpan(ctx, anchor, freeze, &t)
	if err != nil {
		return err
	}
	s.attachEvent(d, got, anchor, causeRecovery, "finishing an attach a previous master left half done", nil, start, t)
	return nil
}
