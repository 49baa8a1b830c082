package master

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// Tables that share a Raft group (docs/range-groups.md, stage 7, step 4;
// master flag --table-groups, on by default since session 36).
//
// A shared group is founded by an anchor: a reserved table
// "_groups/<range id>" of one empty range, born with group_id its own id,
// that nothing writes, splits or merges. CreateTable puts a new table's
// first range in such a group (homeGroup) when one has room: the command
// names the group (CreateTableCommand.group_id), the apply copies the
// anchor's replicas into the range, and the master then adds it to the
// group's log (addSpan: AddSpan on the group's leader, ADD_SPAN) instead
// of bootstrapping a group of its own (startRange). A range of generation
// 1 whose group is another range's is never bootstrapped (mayBootstrap):
// only its group's entry starts it, and resumeAddSpans adds one a master
// left pending. ensureAnchor keeps an anchor group with room in the
// background; a create that finds none takes today's path.

// anchorPrefix starts every anchor table's name. No Azure request reaches
// such a name: frontend.userTable reads the part before "/" as an account,
// and "_groups" is no valid account name (validAccountName: lowercase
// letters and digits), so listing skips it and no URL names it.
const anchorPrefix = "_groups/"

// ErrReservedName refuses a user's table command naming an anchor.
var ErrReservedName = fmt.Errorf("%w: table names starting with %q are reserved", ErrBadCommand, anchorPrefix)

// addSpanGrace is how long a range recorded in a home group may stay
// pending (generation 1) before resumeAddSpans adds it: the create that
// recorded it normally does within CreateTableWait.
const addSpanGrace = 5 * time.Second

// reservedName reports whether a table name is an anchor's.
func reservedName(name string) bool {
	return strings.HasPrefix(strings.ToLower(name), anchorPrefix)
}

// userTableName refuses a name a user's CreateTable may not use: empty
// (ErrBadCommand) or an anchor's (ErrReservedName).
func userTableName(name string) error {
	switch {
	case name == "":
		return ErrBadCommand
	case reservedName(name):
		return fmt.Errorf("%w: %q", ErrReservedName, name)
	}
	return nil
}

// createPlacement is a new table's placement: the replicas of a group of
// its own (placement), and the home group to record it in instead when
// --table-groups finds one (0: none; the apply falls back to the
// replicas when that group's anchor is gone by then). A table joining a
// home group takes the group's replicas, so too few live servers for a
// group of its own (one of three away: a restart, a rolling upgrade) do
// not refuse it: the fallback replicas are then the group's own.
func (s *Server) createPlacement() ([]*pb.Replica, map[string]string, uint64, error) {
	group := s.homeGroupNow()
	replicas, addrs, err := s.placement()
	if errors.Is(err, ErrNotEnoughServers) && group != 0 {
		replicas, addrs, err = s.groupPlacement(group)
	}
	if err != nil {
		return nil, nil, 0, err
	}
	return replicas, addrs, group, nil
}

// groupPlacement is anchor's replicas and every server's Raft address:
// placement for a table joining anchor's group.
func (s *Server) groupPlacement(anchor uint64) ([]*pb.Replica, map[string]string, error) {
	var replicas []*pb.Replica
	s.fsm.read(func(st *state) {
		if d := st.ranges[anchor]; d != nil {
			replicas = cloneReplicas(d.GetReplicas())
		}
	})
	if len(replicas) == 0 {
		return nil, nil, fmt.Errorf("%w: anchor %d is gone", ErrNotEnoughServers, anchor)
	}
	return replicas, s.raftAddrs(), nil
}

// isAnchor reports whether range d is an anchor: the range of a reserved
// table, its group's namesake.
func isAnchor(d *pb.RangeDescriptor) bool {
	return d != nil && reservedName(d.GetTable()) && d.GetGroupId() == d.GetRangeId()
}

// groupSpan reports whether range d is a span of another range's group,
// started by that group's log (ADD_SPAN, SPLIT_SPAN), never bootstrapped.
func groupSpan(d *pb.RangeDescriptor) bool {
	return rangegroup.GroupOf(d) != d.GetRangeId()
}

// rangegroupOf is rangegroup.GroupOf.
func rangegroupOf(d *pb.RangeDescriptor) uint64 { return rangegroup.GroupOf(d) }

// pendingAdd reports whether range d is recorded in a home group and not
// yet added (generation 1: ADD_SPAN stores it at generation 2).
func pendingAdd(d *pb.RangeDescriptor) bool {
	return d.GetGeneration() == 1 && groupSpan(d)
}

// liveAnchor returns the map's anchor range id, nil when id is 0 or names
// no live anchor (it was deleted, or is no anchor): createTable then falls
// back to the command's replicas. Read from replicated state only, so
// every master decides alike.
func (s *state) liveAnchor(id uint64) *pb.RangeDescriptor {
	if id == 0 {
		return nil
	}
	d := s.ranges[id]
	if !isAnchor(d) || !s.tableLive(d.GetTableId()) {
		return nil
	}
	return d
}

// createAnchor applies a CreateTableCommand with anchor set: a reserved
// table named by the range id it allocates, of one range whose group is
// itself, on the command's replicas.
func createAnchor(s *state, c *pb.CreateTableCommand) *applyResult {
	id := s.nextRangeID
	name := fmt.Sprintf("%s%d", anchorPrefix, id)
	if _, exists := s.tables[name]; exists || len(c.GetReplicas()) == 0 {
		return &applyResult{err: ErrBadCommand}
	}
	t := &pb.Table{Name: name, TableId: s.nextTableID, CreatedUnixNano: c.GetCreatedUnixNano()}
	s.nextTableID++
	r := &pb.RangeDescriptor{RangeId: id, Table: name, TableId: t.GetTableId(), Generation: 1, GroupId: id, Replicas: c.GetReplicas()}
	s.nextRangeID++
	s.putTable(name, t)
	s.putRange(r)
	return &applyResult{table: t, ranges: []*pb.RangeDescriptor{r}}
}

func cloneReplicas(in []*pb.Replica) []*pb.Replica {
	out := make([]*pb.Replica, len(in))
	for i, r := range in {
		out[i] = proto.Clone(r).(*pb.Replica)
	}
	return out
}

// homeGroupInput is what homeGroup decides from: the scheduler's view of
// the map and the reports, the servers that announced table_groups to this
// master, the cap on a group's spans and the merge thresholds.
type homeGroupInput struct {
	Snap      *scheduler.Snapshot
	CanShare  func(server string) bool
	MaxSpans  int
	MergeLoad float64
	MergeSize uint64
	// GroupBytes bounds a group's bytes, every span's together, for it to
	// take a new table (0: no bound): the group's snapshot (a joiner's,
	// a whole move's) carries every span, so a group of many cold tables
	// just under MergeSize each stops growing at this, whatever MaxSpans
	// allows.
	GroupBytes uint64
	// Started: whether an anchor's range has started (a leader was seen).
	Started func(anchor uint64) bool
}

// groupStats is what homeGroup reads of the map: spans per group,
// whether every span of a group is cold (under the merge thresholds, not
// frozen), and the groups each server leads.
type groupStats struct {
	spans map[uint64]int
	bytes map[uint64]uint64
	cold  map[uint64]bool
	led   map[string]map[uint64]bool
}

func statsOf(in homeGroupInput) groupStats {
	st := groupStats{spans: map[uint64]int{}, bytes: map[uint64]uint64{}, cold: map[uint64]bool{}, led: map[string]map[uint64]bool{}}
	for _, r := range in.Snap.Ranges {
		if _, seen := st.cold[r.Group]; !seen {
			st.cold[r.Group] = true
		}
		st.spans[r.Group]++
		if r.Load != nil {
			st.bytes[r.Group] += r.Load.Bytes
		}
		if r.Frozen || (r.Load != nil && !scheduler.FitsAnchorGroup(r.Load.EntitiesPerSec, r.Load.Bytes, in.MergeLoad, in.MergeSize)) ||
			!scheduler.AnchorGroupBytesFit(st.bytes[r.Group], in.GroupBytes) {
			st.cold[r.Group] = false
		}
		if r.Leader != "" {
			if st.led[r.Leader] == nil {
				st.led[r.Leader] = map[uint64]bool{}
			}
			st.led[r.Leader][r.Group] = true
		}
	}
	return st
}

// roomy reports whether anchor range r's group has room: fewer spans than
// the cap, every span cold, under GroupBytes together.
func (st groupStats) roomy(r *scheduler.Range, maxSpans int) bool {
	return anchorRange(r) && st.spans[r.ID] < maxSpans && st.cold[r.ID]
}

// homeGroup picks the anchor group a new table's range joins, 0 for none:
// among anchor groups with room (fewer than MaxSpans spans, every span
// under the merge thresholds and not frozen), the anchor started and led,
// and its servers fit (groupFit: every one announcing table_groups, none
// full, the leader's and a majority of them live, not silent, draining or
// slow), a group whose every server fits before one that is short of a
// server, then the one with most spans, then the one whose leader leads
// fewest groups, then the lowest id. Pure.
//
// A group short of a server (one down, or being drained) still takes
// tables: its log commits with the majority, as it does for its own
// spans, and the replica that is away catches up or is replaced with the
// group. Refusing it made every table created while a server was away (a
// partition server's restart, a rolling upgrade) a Raft group of its own
// for good: nothing brings such a table into a shared group later, and a
// group per table is what makes inserts spread over 1,000 tables run at
// a twentieth of the shared groups' rate (docs/performance.md, sessions
// 33 and 38).
func homeGroup(in homeGroupInput) uint64 {
	servers := map[string]scheduler.Server{}
	for _, sv := range in.Snap.Servers {
		servers[sv.ID] = sv
	}
	st := statsOf(in)
	var best *scheduler.Range
	bestWhole := false
	for _, r := range in.Snap.Ranges {
		if !st.roomy(r, in.MaxSpans) || r.Leader == "" || !in.Started(r.ID) {
			continue
		}
		whole, ok := groupFit(r, servers, in.CanShare)
		if !ok {
			continue
		}
		if best == nil || whole && !bestWhole || whole == bestWhole && betterHome(r, best, st.spans, st.led) {
			best, bestWhole = r, whole
		}
	}
	if best == nil {
		return 0
	}
	return best.ID
}

// needAnchor reports whether ensureAnchor should found an anchor group:
// the anchor groups with room have fewer free places together than a new
// anchor group brings (maxSpans - 1: the anchor is a span). So one spare
// group's worth is always ready
// ahead of the group filling: founding and starting an anchor takes a
// policy tick and an election, and a burst of creates (a thousand tables
// at ~90/s) that fills the last group meanwhile would otherwise make each
// of those tables a group of its own. An anchor group with room that
// cannot take a table now (not started yet, no leader, a server down,
// draining, slow, full or of an older build) counts as room: creates take
// today's path meanwhile, and anchors do not pile up while a server is
// away. So does an anchor group of the anchor alone, whatever its load
// report: with --merge-load 0 no reported range is cold, and the spare
// reported at 0 entities/s would call for another at every report. Pure.
func needAnchor(in homeGroupInput) bool {
	st := statsOf(in)
	room := 0
	for _, r := range in.Snap.Ranges {
		if st.roomy(r, in.MaxSpans) || (anchorRange(r) && st.spans[r.ID] == 1) {
			room += in.MaxSpans - st.spans[r.ID]
		}
	}
	return room < in.MaxSpans-1
}

// anchorRange reports whether a scheduler range is an anchor.
func anchorRange(r *scheduler.Range) bool {
	return reservedName(r.Table) && r.Group == r.ID
}

// betterHome orders candidate anchor groups by scheduler.BetterHome (the
// fullest with room first), reading the spans and each leader's groups
// from the map.
func betterHome(a, b *scheduler.Range, spans map[uint64]int, led map[string]map[uint64]bool) bool {
	return scheduler.BetterHome(
		scheduler.HomeCandidate{Spans: spans[a.ID], LeaderGroups: len(led[a.Leader]), ID: a.ID},
		scheduler.HomeCandidate{Spans: spans[b.ID], LeaderGroups: len(led[b.Leader]), ID: b.ID})
}

// groupFit reports whether anchor range r's group may take a new table's
// span (ok), and whether every one of its replicas fits (whole). Every
// server must announce table_groups (an older build cannot apply the
// ADD_SPAN entry: the group's replicas would diverge) and none may be
// full (the span adds data there); a replica fits when its server is
// live, not silent, draining or slow and the replica is neither missing
// nor broken, and the leader's replica and a majority must fit (the entry
// commits with them).
func groupFit(r *scheduler.Range, servers map[string]scheduler.Server, canShare func(string) bool) (whole, ok bool) {
	if len(r.Replicas) == 0 {
		return false, false
	}
	fit, leaderFits := 0, false
	for _, rep := range r.Replicas {
		sv, known := servers[rep.Server]
		if !canShare(rep.Server) || known && sv.Disk.State() == scheduler.DiskFull {
			return false, false
		}
		if known && sv.Live && !sv.Silent && !sv.Draining && !sv.Slow && !rep.Missing && !rep.Broken {
			fit++
			leaderFits = leaderFits || rep.Server == r.Leader
		}
	}
	return fit == len(r.Replicas), leaderFits && fit > len(r.Replicas)/2
}

// homeGroupInputNow is homeGroup's input from this master's map and
// reports.
func (s *Server) homeGroupInputNow() homeGroupInput {
	var started map[uint64]bool
	s.fsm.read(func(st *state) {
		started = map[uint64]bool{}
		for id, d := range st.ranges {
			if isAnchor(d) {
				_, marked := st.started[id]
				started[id] = marked || d.GetGeneration() > 1
			}
		}
	})
	pc := s.cfg.Policy.Config
	return homeGroupInput{
		Snap: s.snapshot(time.Now()), CanShare: s.reports.canShareGroups, MaxSpans: s.cfg.TableGroupSpans,
		MergeLoad: pc.MergeLoad, MergeSize: pc.MergeBytes, GroupBytes: pc.SplitBytes, Started: func(id uint64) bool { return started[id] },
	}
}

// homeGroupNow is homeGroup over this master's map and reports; 0 when
// --table-groups is off.
func (s *Server) homeGroupNow() uint64 {
	if !s.cfg.TableGroups {
		return 0
	}
	return homeGroup(s.homeGroupInputNow())
}

// HomeGroup returns the anchor group (its anchor's range id) a table
// created on this master now would join, 0 when it would get a group of
// its own: --table-groups off, no anchor group with room whose servers
// can take the table now (groupFit), or this master not leading. The cluster
// harness waits for it so that tests' tables share a group from the
// first create.
func (s *Server) HomeGroup() uint64 {
	if !s.IsLeader() {
		return 0
	}
	return s.homeGroupNow()
}

// ensureAnchor, on the leader (every policy tick, with --table-groups),
// creates a spare anchor group when no anchor group has room (needAnchor)
// and the servers placement picks announced table_groups:
// today's create path (the command, then startRange, which marks the
// range started). One at a time; in the background.
func (s *Server) ensureAnchor() {
	if !s.cfg.TableGroups || s.anchoring.Load() || !needAnchor(s.homeGroupInputNow()) {
		return
	}
	replicas, addrs, err := s.placement()
	if err != nil {
		return
	}
	for _, r := range replicas {
		if !s.reports.canShareGroups(r.GetServerId()) {
			return
		}
	}
	if !s.anchoring.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.anchoring.Store(false)
		res, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{
			Anchor: true, CreatedUnixNano: time.Now().UnixNano(), Replicas: replicas,
		})
		if err != nil {
			s.logger.Info("anchor group not created", "err", err)
			return
		}
		r := res.ranges[0]
		leader, err := s.startRange(s.ctx, r, addrs)
		s.logger.Info("anchor group created", "table", r.GetTable(), "range", r.GetRangeId(), "leader", leader, "err", err)
		s.event(s.createdEvent(res, "table-groups"))
	}()
}

// ErrAddSpan: a new table's range could not be added to its home group
// (retryable: the client's retry, or resumeAddSpans, adds it).
var ErrAddSpan = errors.New("master: the new range was not added to its group")

// addSpan adds range r, recorded in a home group (pendingAdd), to that
// group: AddSpan on the group's leader with the floor (the lowest pending
// add of the map, r included), then the answer (the span at generation 2)
// recorded with UPDATE_RANGES and the group's leader as the span's. The
// group's anchor is claimed meanwhile (a move of the group waits), and the
// add is registered in s.starting as startRange's start is (a delete's
// freeze waits for it). It returns the span's leader.
func (s *Server) addSpan(ctx context.Context, r *pb.RangeDescriptor) (string, error) {
	id, g := r.GetRangeId(), rangegroup.GroupOf(r)
	defer s.starting.begin(id)()
	// Finished even when the caller gives up first (its retry is answered
	// from the request record), as startRange creates the replicas.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CreateTableWait)
	defer cancel()
	if s.ctx != nil {
		defer context.AfterFunc(s.ctx, cancel)()
	}
	if err := s.claimPolling(ctx, g); err != nil {
		return "", fmt.Errorf("%w: range %d, group %d: %w", ErrAddSpan, id, g, err)
	}
	defer s.ops.release(g)
	d, floor := s.pendingAddOf(id)
	if d == nil {
		// Added meanwhile (by a retry, resumeAddSpans or a heartbeat's
		// report), or the table is gone.
		return s.leaderOf(id), nil
	}
	if err := failpoint.Inject("master/create-table/before-add-span"); err != nil {
		return "", fmt.Errorf("%w: %w", ErrAddSpan, err)
	}
	got, full, err := s.addSpanCapped(ctx, g, d, floor)
	if err == nil {
		err = failpoint.Inject("master/create-table/after-add-span")
	}
	if err != nil {
		return "", fmt.Errorf("%w: range %d, group %d: %w", ErrAddSpan, id, g, err)
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{got}}); err != nil {
		return "", fmt.Errorf("%w: range %d: %w", ErrAddSpan, id, err)
	}
	leader := s.leaderOf(g)
	if leader != "" {
		s.setLeader(id, leader)
	}
	s.logger.Debug("range added to its group", "range", id, "table", d.GetTable(), "group", g, "leader", leader)
	if full {
		return s.leaveFullGroup(ctx, id, g, leader), nil
	}
	return leader, nil
}

// addSpanCapped calls AddSpan on group g's leader with the cap
// (--table-group-spans), which the group's apply enforces from its own
// state. A group that is full (GROUP_FULL: creates racing into it passed
// the count homeGroup read before the commit) is asked again without a
// cap, and full is true: the range is recorded in the map as a span of g,
// at generation 1, and only g's log may start it (mayBootstrap), so it
// joins g and then leaves it (leaveFullGroup) rather than being placed
// elsewhere, which would take a master log command of its own.
func (s *Server) addSpanCapped(ctx context.Context, g uint64, d *pb.RangeDescriptor, floor uint64) (*pb.RangeDescriptor, bool, error) {
	add := func(maxSpans uint32) (*pb.RangeDescriptor, error) {
		var got *pb.RangeDescriptor
		err := s.onLeader(ctx, g, func(ctx context.Context, c pb.PartitionServiceClient) error {
			resp, err := c.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: g, Range: d, Floor: floor, MaxSpans: maxSpans})
			got = resp.GetRange()
			return err
		})
		return got, err
	}
	got, err := add(uint32(max(0, s.cfg.TableGroupSpans)))
	if !rpcerr.Is(err, rpcerr.ReasonGroupFull) {
		return got, false, err
	}
	s.logger.Info("group full: the new range joins it and leaves it for a group of its own", "range", d.GetRangeId(), "table", d.GetTable(), "group", g, "err", err)
	got, err = add(0)
	return got, true, err
}

// leaveFullGroup detaches range id, just added to group g over its cap
// (addSpanCapped), into a group of its own on the same servers, and
// returns its leader. A failed detach leaves the table served in g, one
// span over the cap (logged); the create has succeeded either way.
func (s *Server) leaveFullGroup(ctx context.Context, id, g uint64, leader string) string {
	if _, err := s.detach(ctx, id, "table-group-full"); err != nil {
		s.logger.Warn("new range left in its full group", "range", id, "group", g, "err", err)
		return leader
	}
	if l := s.leaderOf(id); l != "" {
		return l
	}
	return leader
}

// pendingAddOf returns the map's descriptor of range id when it is a
// pending add (nil otherwise) and the floor: the lowest id among the map's
// pending adds, id included.
func (s *Server) pendingAddOf(id uint64) (*pb.RangeDescriptor, uint64) {
	var d *pb.RangeDescriptor
	floor := id
	s.fsm.read(func(st *state) {
		if cur, ok := st.ranges[id]; ok && pendingAdd(cur) {
			d = proto.Clone(cur).(*pb.RangeDescriptor)
		}
		for rid, cur := range st.ranges {
			if rid < floor && pendingAdd(cur) {
				floor = rid
			}
		}
	})
	return d, floor
}

// claimPolling claims range id for this master's operation, waiting while
// another holds it (another create's add to the group, a move of it),
// until ctx ends.
func (s *Server) claimPolling(ctx context.Context, id uint64) error {
	for {
		err := s.ops.claim(id)
		if err == nil || !errors.Is(err, ErrBusy) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// spanAdds is resumeAddSpans' soft state: when this master first saw
// each pending add, and the adds it runs.
type spanAdds struct {
	mu      sync.Mutex
	seen    map[uint64]time.Time
	running map[uint64]bool
}

// due returns the ids of pending that were seen pending addSpanGrace ago
// or more and are not running, marks them running, and forgets ids no
// longer pending.
func (a *spanAdds) due(pending []uint64, now time.Time) []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen, a.running = map[uint64]time.Time{}, map[uint64]bool{}
	}
	live := make(map[uint64]bool, len(pending))
	var out []uint64
	for _, id := range pending {
		live[id] = true
		t, ok := a.seen[id]
		if !ok {
			a.seen[id] = now
			continue
		}
		if now.Sub(t) >= addSpanGrace && !a.running[id] {
			a.running[id] = true
			out = append(out, id)
		}
	}
	for id := range a.seen {
		if !live[id] {
			delete(a.seen, id)
		}
	}
	return out
}

// done ends a resumed add.
func (a *spanAdds) done(id uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.running, id)
}

// resumeAddSpans, on the leader (every policy tick), adds every range
// recorded in a home group and still pending (generation 1), seen pending
// by this master for addSpanGrace, that it is not adding already: the
// create that recorded it died, or lost the lead, before its AddSpan was
// recorded. A span whose add applied but whose answer was lost reaches
// the map at generation 2 from heartbeats and leaves the set; a create
// still adding it holds the group's claim, and addSpan reads the map
// again under that claim.
func (s *Server) resumeAddSpans() {
	var pending []uint64
	s.fsm.read(func(st *state) {
		for id, d := range st.ranges {
			if pendingAdd(d) {
				pending = append(pending, id)
			}
		}
	})
	for _, id := range s.adds.due(pending, time.Now()) {
		d, ok := s.rangeDesc(id)
		if !ok {
			s.adds.done(id)
			continue
		}
		go func() {
			defer s.adds.done(id)
			if _, err := s.addSpan(s.ctx, d); err != nil {
				s.logger.Info("pending add of a range to its group not finished; retried", "range", id, "err", err)
				return
			}
			s.logger.Info("range left pending in its group added", "range", id, "table", d.GetTable())
		}()
	}
}

// createdEvent is the table-created event of a create's result: for an
// anchor (ensureAnchor) or a table whose range is recorded in an anchor's
// group, the message says so and the figures carry anchor (1 for an
// anchor) and group_spans (the ranges of the map the group serves, the
// anchor included), so that an operator sees which groups tables share.
func (s *Server) createdEvent(res *applyResult, cause string) *pb.Event {
	r := res.ranges[0]
	e := &pb.Event{Kind: pb.EventKind_EVENT_KIND_TABLE_CREATED, Table: res.table.GetName(), RangeIds: []uint64{r.GetRangeId()}, Cause: cause}
	g := rangegroup.GroupOf(r)
	if d, ok := s.rangeDesc(r.GetRangeId()); ok {
		g = rangegroup.GroupOf(d)
	}
	spans := 0
	s.fsm.read(func(st *state) { spans = len(st.groupSpans[g]) })
	switch {
	case isAnchor(r):
		e.Message = fmt.Sprintf("anchor %s created: range %d founds Raft group %d for tables to share", r.GetTable(), r.GetRangeId(), g)
		e.Figures = map[string]float64{"anchor": 1, "group_spans": float64(spans)}
	case g != r.GetRangeId():
		e.Message = fmt.Sprintf("table %s created with range %d in anchor group %d (%d spans)", res.table.GetName(), r.GetRangeId(), g, spans)
		e.RangeIds = append(e.RangeIds, g)
		e.Figures = map[string]float64{"anchor": 0, "group_spans": float64(spans)}
	default:
		e.Message = fmt.Sprintf("table %s created with range %d", res.table.GetName(), r.GetRangeId())
	}
	return e
}
