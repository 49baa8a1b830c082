package master

import (
	"context"
	"errors"
	"fmt"
	"time"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// GroupTables (ctl group-tables; docs/range-groups.md, stage 8), the
// reverse of UngroupTables: every user table that is one range in a Raft
// group of its own (created before --table-groups, while no anchor group
// could take it, or a hot span detached that cooled since) and cold and
// small enough for an anchor group joins one (attach), one table at a
// time, its rows where they are.

// ErrTableGroupsOff refuses GroupTables on a master running without
// --table-groups: the tables it took into anchor groups would be the
// only ones there, new tables getting groups of their own, and no anchor
// group with room is kept (ensureAnchor).
var ErrTableGroupsOff = errors.New("master: this master runs without --table-groups; restart every master with --table-groups first")

// causeGroupTables is the cause of the events GroupTables records.
const causeGroupTables = "group-tables"

// groupAttachTimeout bounds one range's attach (its co-location, freeze,
// decision and AttachSpan) whatever the caller's deadline: an attach is
// finished rather than left for resumeMerges.
const groupAttachTimeout = 60 * time.Second

// groupPlanIn is what groupPlan decides from.
type groupPlanIn struct {
	Snap       *scheduler.Snapshot
	MergeLoad  float64
	MergeBytes uint64
	// AttachSpans: whether the server announced attach_spans to this
	// master (ok), and whether it has said either way (said: a heartbeat
	// since this master took the lead). Right after a master takes the
	// lead, a server not heard from yet is asked about again, not skipped.
	AttachSpans func(server string) (ok, said bool)
}

// groupPlan reads, from the scheduler's view, the user ranges in Raft
// groups that are no anchor's: those to attach (candidates, by table),
// those to ask again about (remaining: frozen, no load report yet, or a
// server not heard from since this master took the lead)
// and those left where they are for good by the rules, with the reason
// (skipped: a span of a group no anchor founded, a group serving several
// ranges, a table of several ranges, hot or large, a server without
// attach_spans). Pure.
func groupPlan(in groupPlanIn) (cands []*scheduler.Range, remaining []uint64, skipped []*pb.SkippedRange) {
	groups, tables, anchors := map[uint64]int{}, map[uint64]int{}, map[uint64]bool{}
	for _, r := range in.Snap.Ranges {
		groups[r.Group]++
		tables[r.TableID]++
		if anchorRange(r) {
			anchors[r.ID] = true
		}
	}
	for _, r := range in.Snap.Ranges {
		if reservedName(r.Table) || anchors[r.Group] {
			continue
		}
		why, retry := groupSkip(r, groups[r.Group], tables[r.TableID], in)
		switch {
		case retry:
			remaining = append(remaining, r.ID)
		case why != "":
			skipped = append(skipped, &pb.SkippedRange{RangeId: r.ID, Reason: why})
		default:
			cands = append(cands, r)
		}
	}
	return cands, remaining, skipped
}

// groupSkip is groupPlan's rule for one user range r outside the anchor
// groups: why it is left where it is ("" to attach it), or retry when it
// is to be asked about again. Pure.
func groupSkip(r *scheduler.Range, groupRanges, tableRanges int, in groupPlanIn) (why string, retry bool) {
	switch {
	case r.Group != r.ID:
		return fmt.Sprintf("a span of Raft group %d, which is no anchor's", r.Group), false
	case groupRanges > 1:
		return fmt.Sprintf("its Raft group serves %d ranges", groupRanges), false
	case tableRanges > 1:
		return fmt.Sprintf("its table is split into %d ranges", tableRanges), false
	case r.Frozen || r.Load == nil:
		return "", true // frozen (a merge or attach under way), or not reported yet
	case !scheduler.FitsAnchorGroup(r.Load.EntitiesPerSec, r.Load.Bytes, in.MergeLoad, in.MergeBytes):
		return fmt.Sprintf("hot or large: %.0f entities/s (--merge-load %.0f), %d bytes (--merge-bytes %d)",
			r.Load.EntitiesPerSec, in.MergeLoad, r.Load.Bytes, in.MergeBytes), false
	}
	for _, rep := range r.Replicas {
		ok, said := in.AttachSpans(rep.Server)
		if !said {
			return "", true // not reported to this master yet
		}
		if !ok {
			return fmt.Sprintf("server %s does not announce attach_spans", rep.Server), false
		}
	}
	return "", false
}

// attachHome picks the anchor group range r joins (0 for none, with why,
// and retry when one may take it later: ensureAnchor founds a group when
// none has room, and a group whose servers all announce attach_spans but
// one is away or unfit now may fit again; for good only when no group
// with room has r's replica count and servers that all announce
// table_groups and attach_spans): homeGroup's rules (room: fewer than MaxSpans
// spans, every span cold, the group's bytes with r's under GroupBytes; the
// anchor started and led; then most spans, the leader leading fewest
// groups, the lowest id), but every server of the group must fit
// (groupFit's whole: r's rows are on every one of them after the attach,
// and a server away would hold r's writes until back) and it must have as
// many replicas as r (co-location moves r's replicas one for one). Pure.
func attachHome(in homeGroupInput, r *pb.RangeDescriptor) (anchor uint64, why string, retry bool) {
	servers := map[string]scheduler.Server{}
	for _, sv := range in.Snap.Servers {
		servers[sv.ID] = sv
	}
	st := statsOf(in)
	var bytes uint64
	for _, sr := range in.Snap.Ranges {
		if sr.ID == r.GetRangeId() && sr.Load != nil {
			bytes = sr.Load.Bytes
		}
	}
	var best *scheduler.Range
	roomy, capable := false, false
	for _, g := range in.Snap.Ranges {
		if !st.roomy(g, in.MaxSpans) || !scheduler.AnchorGroupBytesFit(st.bytes[g.ID]+bytes, in.GroupBytes) {
			continue
		}
		roomy = true
		if len(g.Replicas) != len(r.GetReplicas()) || !allServers(g, in.CanShare) {
			continue
		}
		capable = true
		if whole, _ := groupFit(g, servers, in.CanShare); !whole || g.Leader == "" || !in.Started(g.ID) {
			continue
		}
		if best == nil || betterHome(g, best, st.spans, st.led) {
			best = g
		}
	}
	switch {
	case best != nil:
		return best.ID, "", false
	case !roomy:
		return 0, "no anchor group has room (one is being founded)", true
	case capable:
		// A server away, restarting, not reported to this master yet
		// (after a failover), draining or slow: asked again.
		return 0, "no anchor group with room has every server live and fit now", true
	}
	return 0, "no anchor group with room of as many replicas whose every server announces table_groups and attach_spans", false
}

// allServers reports whether every server of r's replicas passes ok.
func allServers(r *scheduler.Range, ok func(string) bool) bool {
	for _, rep := range r.Replicas {
		if !ok(rep.Server) {
			return false
		}
	}
	return true
}

// GroupTables serves ctl group-tables: see groupTables.
func (v *service) GroupTables(ctx context.Context, req *pb.GroupTablesRequest) (*pb.GroupTablesResponse, error) {
	s := v.s
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	if !s.cfg.TableGroups {
		return nil, opStatus(ErrTableGroupsOff)
	}
	budget := ungroupBudget
	if req.GetBudgetMs() > 0 {
		budget = time.Duration(req.GetBudgetMs()) * time.Millisecond
	}
	resp, err := s.groupTables(ctx, time.Now().Add(budget))
	if err != nil {
		s.logger.Info("group tables: this master no longer leads; the call goes on at the leader", "attached", len(resp.GetAttachedRangeIds()))
		return nil, toStatus(err)
	}
	s.logger.Info("group tables", "attached", len(resp.GetAttachedRangeIds()), "remaining", len(resp.GetRemainingRangeIds()), "skipped", len(resp.GetSkipped()))
	return resp, nil
}

// groupTables attaches the candidates of groupPlan one at a time until
// none is left or deadline passes, passing again over those it could not
// attach (busy, failed, aborted, no anchor group with room yet) while
// time is left; what is left is answered for the caller's next call. As
// ungroupTables, it starts each attach only while this master leads and
// ends with ErrNotLeader once it does not: the caller's retry goes on at
// the new leader, which rereads the map (an attach a deposed master
// committed is finished by the new leader's resumeMerges).
func (s *Server) groupTables(ctx context.Context, deadline time.Time) (*pb.GroupTablesResponse, error) {
	resp := &pb.GroupTablesResponse{}
	for {
		cands, remaining, skipped := groupPlan(s.groupPlanInNow())
		resp.RemainingRangeIds, resp.Skipped = remaining, skipped
		progress := false
		for _, r := range cands {
			if err := s.ungroupLeading(); err != nil {
				return resp, err
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				resp.RemainingRangeIds = append(resp.RemainingRangeIds, r.ID)
				continue
			}
			switch attached, why := s.groupOne(ctx, r.ID); {
			case attached:
				resp.AttachedRangeIds = append(resp.AttachedRangeIds, r.ID)
				progress = true
			case why != "":
				resp.Skipped = append(resp.Skipped, &pb.SkippedRange{RangeId: r.ID, Reason: why})
			default:
				resp.RemainingRangeIds = append(resp.RemainingRangeIds, r.ID)
			}
		}
		if len(resp.RemainingRangeIds) == 0 || ctx.Err() != nil || time.Now().After(deadline) {
			return resp, nil
		}
		if !progress {
			// Only busy, failing or waiting ranges left: wait a little
			// rather than spin.
			select {
			case <-ctx.Done():
			case <-time.After(min(200*time.Millisecond, time.Until(deadline))):
			}
		}
	}
}

// groupPlanInNow is groupPlan's input from this master's map and reports.
func (s *Server) groupPlanInNow() groupPlanIn {
	pc := s.cfg.Policy.Config
	return groupPlanIn{Snap: s.snapshot(time.Now()), MergeLoad: pc.MergeLoad, MergeBytes: pc.MergeBytes, AttachSpans: s.reports.attachSpansSaid}
}

// groupOne attaches range id to the anchor group attachHome picks, with
// both claimed (a busy one is skipped), and reports whether it did; why
// is set when no anchor group can take it for good (skipped).
func (s *Server) groupOne(ctx context.Context, id uint64) (attached bool, why string) {
	d, ok := s.rangeDesc(id)
	if !ok {
		return false, ""
	}
	anchor, why, retry := attachHome(s.attachInputNow(), d)
	if anchor == 0 {
		s.logger.Info("group tables: no anchor group for the range", "range", id, "table", d.GetTable(), "reason", why)
		if retry {
			return false, ""
		}
		return false, why
	}
	if err := s.ops.claim(id, anchor); err != nil {
		s.logger.Info("group tables: range or anchor busy; retried", "range", id, "anchor", anchor, "err", err)
		return false, ""
	}
	defer s.ops.release(id, anchor)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupAttachTimeout)
	defer cancel()
	got, err := s.attach(ctx, id, anchor, causeGroupTables, "", nil)
	if err != nil {
		s.logger.Info("group tables: range not attached; retried", "range", id, "table", d.GetTable(), "anchor", anchor, "err", err)
		return false, ""
	}
	s.logger.Info("group tables: range joined an anchor group", "range", id, "table", d.GetTable(), "group", anchor, "generation", got.GetGeneration())
	return true, ""
}
