package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/failpoint"
	"tablestore/internal/rangeclient"
	"tablestore/internal/rangegroup"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// A deleted table's ranges keep their replicas, and their leaders keep
// serving, until the replicas are deleted (DeleteReplica, best effort, and
// the servers' own collection of replicas of tables not live). A
// front-end whose map is behind (its watch slow, broken, restarting on a
// new master) still routes the table to them: before, a write it sent
// after Delete Table was answered was acknowledged and vanished with the
// range (or, the table created again, went to the old incarnation), and a
// read returned the deleted table's entity. DeleteTable now freezes every
// range of the table for good through the range's own log
// (FreezeRange.table_deleted) before it answers: every write and read
// after the freeze, on any replica that leads the range then or later, is
// refused (STALE_RANGE), and the front-end, refreshing its map, answers
// 404 TableNotFound.

// deleteFreezeWait bounds how long DeleteTable waits for the table's
// ranges to freeze before it answers an unknown outcome (the freezes go
// on in the background). Under the master client's 5 s per attempt, so
// the front-end gets this answer rather than its attempt's timeout, and
// its retry (the same request id, answered from the record) waits again
// while the request's own deadline allows.
const deleteFreezeWait = 4 * time.Second

// deleteFreezeGiveUp bounds the background freezing of a range that can
// neither freeze (no quorum) nor be shown gone (a replica's server does
// not answer): the servers' collection of a deleted table's replicas ends
// it meanwhile.
const deleteFreezeGiveUp = 10 * time.Minute

// ErrTableBeingDeleted: a table of that name was deleted and a range of it
// has not frozen yet; a create of the name is refused until it has (409
// TableBeingDeleted, as Azure answers while it collects a deleted table).
var ErrTableBeingDeleted = errors.New("master: a table of that name is being deleted")

// errSharedGroup: a server refused to freeze a deleted table's range whose
// Raft group serves another table's range (rpcerr.MetaSharedGroup): it
// leaves the group first (isolateDeleted).
var errSharedGroup = errors.New("master: the deleted table's range shares its Raft group with another table's")

// errFreezeUnsupported: a server of the range does not know FreezeRange,
// or takes it for a merge's freeze and refused it.
var errFreezeUnsupported = errors.New("master: a server of the range does not freeze ranges")

// deletions are the deleted tables (by table id: a table created again
// under the name is another table, whose delete must freeze its own
// ranges, not join the first one's) whose ranges this master is still
// freezing. What a master holds here dies with it (or with its lead): the
// replicated list of pending freezes (state.deletedPending) is what makes
// any next leader finish them (resumeDeletions) and refuse the name.
type deletions struct {
	mu sync.Mutex
	m  map[uint64]*deletion
}

// deletion is one table's freezing in flight; done is closed when every
// range froze or is gone (or the freezing gave up), or the master shuts
// down (err set). Removed from deletions before done is closed.
type deletion struct {
	done chan struct{}
	err  error // set before done is closed: the freezing did not end
}

// nameFree says whether CreateTable may create a table of a name:
// ErrTableExists when one exists, ErrTableBeingDeleted when a range of
// the deleted table of that name may still serve a front-end whose map is
// behind (a write it took after the create's answer would be lost with
// the old table), else nil. pendingFreeze: the replicated state holds the
// name's deleted table as not yet confirmed frozen (a new leader refuses
// the name before its own freezing of the ranges started).
// CreateTable checks it before it proposes the command (a fast path), and
// the command's apply decides by it (createTable): a create and a delete
// of the name may commit in between.
func nameFree(exists, pendingFreeze bool) error {
	switch {
	case exists:
		return ErrTableExists
	case pendingFreeze:
		// The replicated list alone: a freezing this master still runs
		// for a table another leader confirmed since (this master
		// deposed and elected again) must not refuse the name.
		return ErrTableBeingDeleted
	}
	return nil
}

// startingRanges are the ranges whose replicas startRange is creating:
// the freeze of a deleted table's range waits for its start, or it could
// find no replica yet, count the range gone, and answer before the
// replicas come up and elect a leader that serves.
type startingRanges struct {
	mu sync.Mutex
	m  map[uint64][]chan struct{}
}

// begin registers a start of range id; the returned func ends it.
func (r *startingRanges) begin(id uint64) func() {
	ch := make(chan struct{})
	r.mu.Lock()
	if r.m == nil {
		r.m = map[uint64][]chan struct{}{}
	}
	r.m[id] = append(r.m[id], ch)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		chs := r.m[id]
		for i, c := range chs {
			if c == ch {
				chs = append(chs[:i:i], chs[i+1:]...)
				break
			}
		}
		if len(chs) == 0 {
			delete(r.m, id)
		} else {
			r.m[id] = chs
		}
		r.mu.Unlock()
		close(ch)
	}
}

// wait waits until no start of range id registered now is running, or
// ctx ends.
func (r *startingRanges) wait(ctx context.Context, id uint64) error {
	r.mu.Lock()
	chs := append([]chan struct{}(nil), r.m[id]...)
	r.mu.Unlock()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// running reports whether this master is freezing table id's ranges.
func (d *deletions) running(id uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.m[id]
	return ok
}

// freezeDeleted freezes the ranges of deleted table name for good, in the
// background on the master's lifetime (a caller that gives up leaves it
// running), and waits for it up to deleteFreezeWait or ctx. A freezing
// already in flight for the name (the client's retry) is joined, not
// repeated. It returns nil once every range froze or is gone, else an
// error of unknown outcome (the table is deleted; its ranges may serve a
// while longer).
func (s *Server) freezeDeleted(ctx context.Context, name string, tableID uint64, ranges []*pb.RangeDescriptor) error {
	if len(ranges) == 0 {
		return nil
	}
	d := s.startFreezing(name, tableID, ranges)
	if d == nil {
		return status.Error(codes.Unavailable, "master: shutting down")
	}
	t := time.NewTimer(deleteFreezeWait)
	defer t.Stop()
	select {
	case <-d.done:
		return d.err
	case <-ctx.Done():
		return rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonUnavailable, fmt.Sprintf("table %s deleted; its ranges are still being frozen: %v", name, ctx.Err()), nil)
	case <-t.C:
		// With a reason: the master client asks this master again
		// rather than the next (masterclient.leaderAnswered).
		return rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonUnavailable, fmt.Sprintf("table %s deleted; its ranges did not freeze within %v", name, deleteFreezeWait), nil)
	}
}

// startFreezing starts freezing the ranges of deleted table tableID in
// the background unless this master is freezing them already, and returns
// that freezing; nil when the master is closing. When the freezing ends
// (the ranges froze or are gone, or it gave up), the table's entry in the
// replicated list of pending freezes is cleared (confirmFrozen) and the
// replicas are deleted (best effort).
func (s *Server) startFreezing(name string, tableID uint64, ranges []*pb.RangeDescriptor) *deletion {
	s.deleting.mu.Lock()
	defer s.deleting.mu.Unlock()
	if s.deleting.m == nil {
		s.deleting.m = map[uint64]*deletion{}
	}
	if d, ok := s.deleting.m[tableID]; ok {
		return d
	}
	if s.ctx.Err() != nil {
		// Closing: its wait group may be waited on already.
		return nil
	}
	var pending bool
	s.fsm.read(func(st *state) { _, pending = st.deletedPending[tableID] })
	if !pending {
		// Confirmed frozen (or given up) already: a retried delete is
		// answered at once, and a policy tick that read the list before
		// the confirmation committed starts nothing (a freezing started
		// then would refuse nothing, but could wait out a range whose
		// replicas the first one's deletion left without a majority).
		d := &deletion{done: make(chan struct{})}
		close(d.done)
		return d
	}
	d := &deletion{done: make(chan struct{})}
	s.deleting.m[tableID] = d
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.runFreezing(d, name, tableID, ranges)
	}()
	return d
}

// runFreezing freezes the ranges of deleted table tableID, records it
// (confirmFrozen), ends d, and then deletes the replicas of the ranges
// that froze (startFreezing).
func (s *Server) runFreezing(d *deletion, name string, tableID uint64, ranges []*pb.RangeDescriptor) {
	frozen := s.freezeRanges(name, ranges)
	if s.ctx.Err() != nil {
		// Cut short by the shutdown, not ended: no 204 for it, and
		// the next leader freezes them (the replicated list still
		// holds them).
		d.err = status.Error(codes.Unavailable, "master: shutting down")
		s.deleting.mu.Lock()
		delete(s.deleting.m, tableID)
		s.deleting.mu.Unlock()
		close(d.done)
		return
	}
	// The clearing commits before the answer: a create of the name
	// sent once the delete answered is not refused from the list.
	// Kept in s.deleting until then, so the leader's
	// resumeDeletions does not start the freezing again meanwhile.
	if err := s.confirmFrozen(name, tableID); err != nil {
		// Frozen, but not recorded: this master no longer leads, and
		// the leader freezes them again before it answers.
		d.err = rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, fmt.Sprintf("table %s deleted; its ranges froze but this master could not record it: %v", name, err), nil)
	}
	if len(frozen) < len(ranges) && d.err == nil {
		// Given up after deleteFreezeGiveUp: cleared from the list so
		// that the name is not refused for good, but not a success.
		d.err = rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonUnavailable, fmt.Sprintf("table %s deleted; %d of its %d ranges could not be frozen", name, len(ranges)-len(frozen), len(ranges)), nil)
	}
	// Answered (and the name free) once the ranges froze: the
	// replicas' deletion is best effort and may take a while (a
	// server that does not answer, a large range's data).
	s.deleting.mu.Lock()
	delete(s.deleting.m, tableID)
	s.deleting.mu.Unlock()
	close(d.done)
	s.deleteFrozen(frozen)
}

// confirmFrozen clears deleted table tableID from the replicated list of
// pending freezes (DELETED_RANGES_FROZEN), if it is there. On a master
// that does not lead (deposed while it froze), or whose proposal fails,
// the entry stays and the leader freezes the ranges again
// (resumeDeletions): at once for ranges that froze (a frozen range
// answers a freeze again; a gone one is shown gone).
func (s *Server) confirmFrozen(name string, tableID uint64) error {
	var pending bool
	s.fsm.read(func(st *state) { _, pending = st.deletedPending[tableID] })
	if !pending {
		return nil
	}
	apply := s.apply
	if s.applyHook != nil {
		apply = s.applyHook
	}
	if _, err := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETED_RANGES_FROZEN, &pb.DeletedRangesFrozenCommand{TableId: tableID}); err != nil {
		s.logger.Info("deleted table's ranges frozen, not yet recorded; the leader freezes them again", "table", name, "table_id", tableID, "err", err)
		return err
	}
	return nil
}

// resumeDeletions, on the leader (every policy tick), freezes the ranges
// of every deleted table in the replicated list of pending freezes that
// this master is not freezing already: a leader that took over from one
// deposed (or crashed) mid-freeze finishes it, as the deleting master
// would have.
func (s *Server) resumeDeletions() {
	var todo []*pb.DeletedTable
	s.fsm.read(func(st *state) {
		for _, d := range st.deletedPending {
			todo = append(todo, d)
		}
	})
	for _, d := range todo {
		if s.deleting.running(d.GetTableId()) {
			continue
		}
		s.logger.Info("freezing the ranges of a deleted table left pending", "table", d.GetName(), "table_id", d.GetTableId(), "ranges", len(d.GetRanges()))
		s.startFreezing(d.GetName(), d.GetTableId(), d.GetRanges())
	}
}

// freezeRanges freezes every range at once and returns those that froze
// (or are gone).
func (s *Server) freezeRanges(name string, ranges []*pb.RangeDescriptor) []*pb.RangeDescriptor {
	ctx, cancel := context.WithTimeout(s.ctx, deleteFreezeGiveUp)
	defer cancel()
	frozen := make([]bool, len(ranges))
	var wg sync.WaitGroup
	for i, r := range ranges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := s.freezeDeletedRange(ctx, r)
			switch {
			case errors.Is(err, errFreezeUnsupported):
				// A server from before FreezeRange (or table_deleted,
				// refusing it for a voter it does not hear): its range
				// serves until its replicas are deleted, as before.
				s.logger.Warn("range of a deleted table not frozen: a server does not freeze ranges", "table", name, "range", r.GetRangeId(), "err", err)
			case err != nil:
				s.logger.Warn("range of a deleted table not frozen", "table", name, "range", r.GetRangeId(), "took", time.Since(start).Round(time.Millisecond), "err", err)
				return
			default:
				s.logger.Debug("range of a deleted table frozen", "table", name, "range", r.GetRangeId(), "took", time.Since(start).Round(time.Millisecond))
			}
			frozen[i] = true
		}()
	}
	wg.Wait()
	var out []*pb.RangeDescriptor
	for i, r := range ranges {
		if frozen[i] {
			out = append(out, r)
		}
	}
	return out
}

// deleteFrozen deletes the replicas of a deleted table's frozen ranges
// (best effort; the servers also drop replicas of deleted tables on their
// heartbeats), left to right on each server: a frozen range's replica is
// kept while its left neighbour's replica on the same server may yet
// merge it (fsm.ErrMergePending), so deleted all at once, each range of a
// split table waited for a heartbeat after its neighbour's. Called from a
// goroutine the master's wait group counts.
func (s *Server) deleteFrozen(ranges []*pb.RangeDescriptor) {
	ranges = slices.Clone(ranges)
	sort.Slice(ranges, func(a, b int) bool { return ranges[a].GetStart() < ranges[b].GetStart() })
	// The order matters on each server only: one server that does not
	// answer holds up none of the others.
	byServer := map[string][]uint64{}
	for _, r := range ranges {
		for _, rep := range r.GetReplicas() {
			byServer[rep.GetServerId()] = append(byServer[rep.GetServerId()], r.GetRangeId())
		}
	}
	var wg sync.WaitGroup
	for server, ids := range byServer {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.deleteReplicas(server, ids)
		}()
	}
	wg.Wait()
}

// deleteReplicas asks server to delete its replicas of ranges ids, in
// that order (best effort).
func (s *Server) deleteReplicas(server string, ids []uint64) {
	c, err := s.pool.Partition(s.grpcAddrOf(server))
	if err != nil {
		return
	}
	for _, id := range ids {
		cctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		_, err := c.DeleteReplica(cctx, &pb.DeleteReplicaRequest{RangeId: id})
		cancel()
		if err != nil {
			s.logger.Debug("deleted table's replica not deleted; the server's heartbeat will", "server", server, "range", id, "err", err)
		}
	}
}

// freezeDeletedRange freezes r for good through its log (FreezeRange with
// table_deleted, on its leader), round after round until it did, or every
// replica of r answers that it does not host the range (deleted, or never
// created: no replica is left to serve it), or ctx ends. A start of the
// range in flight (startRange) is waited for first. A range whose Raft
// group serves another table's range leaves that group first
// (isolateDeleted), every round until it has: the servers refuse the
// freeze of such a range (errSharedGroup), whose group would otherwise
// be deleted whole with the other table's rows (docs/range-groups.md,
// stage 7, step 5).
func (s *Server) freezeDeletedRange(ctx context.Context, r *pb.RangeDescriptor) error {
	id := r.GetRangeId()
	if err := s.starting.wait(ctx, id); err != nil {
		return fmt.Errorf("range %d: waiting for its start: %w", id, err)
	}
	backoff, shared := 10*time.Millisecond, uint64(0)
	for {
		got, moved, err := s.isolateDeleted(ctx, r, shared)
		switch {
		case err != nil:
			// Frozen or shown gone below, or refused and tried again.
			s.logger.Debug("deleted table's range not yet out of its shared Raft group", "range", id, "err", err)
		case moved:
			r = got
			if err := failpoint.Inject("master/delete-table/after-isolate"); err != nil {
				return err
			}
		}
		done, err := s.freezeRound(ctx, r)
		if done {
			return err
		}
		shared = sharedGroupOf(err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("range %d: %w (last error: %v)", id, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// freezeRound asks r's candidates (freezeCandidates) to freeze it once
// each: done with nil when one froze it or a majority showed it gone, done
// with errFreezeUnsupported for a server that cannot, else not done with
// the last refusal (errSharedGroup when a server refused it for sharing
// its group).
func (s *Server) freezeRound(ctx context.Context, r *pb.RangeDescriptor) (bool, error) {
	id := r.GetRangeId()
	reported := s.reports.lastVoters(id)
	cands := freezeCandidates(r, s.leaderOf(id), reported)
	gone := map[string]bool{}
	var last error
	for i := 0; i < len(cands); i++ {
		server := cands[i]
		err := s.freezeOn(ctx, server, id)
		if err == nil {
			return true, nil
		}
		last = err
		info := rpcerr.Parse(err)
		switch {
		case info.Metadata[rpcerr.MetaSharedGroup] != "":
			// Before the check below: a refusal of this build.
			g, _ := strconv.ParseUint(info.Metadata[rpcerr.MetaSharedGroup], 10, 64)
			return false, sharedGroupError{group: g, err: fmt.Errorf("%s: %w", server, err)}
		case info.Code == codes.Unimplemented, info.Reason == rpcerr.ReasonNotReady:
			// NOT_READY: a leader from before table_deleted took the
			// request for a merge's freeze and refused it for a voter
			// it does not hear (this build's skips that check).
			return true, fmt.Errorf("%w: %s: %v", errFreezeUnsupported, server, err)
		case info.Reason == rpcerr.ReasonRangeNotFound:
			gone[server] = !s.groupHostedOn(ctx, server, r)
		case info.Reason == rpcerr.ReasonNotLeader:
			if l := info.Metadata[rpcerr.MetaLeader]; l != "" && l != server && !containsFrom(cands, i+1, l) {
				// Asked next, once, this round.
				cands = append(cands[:i+1], append([]string{l}, cands[i+1:]...)...)
			}
		}
	}
	if allGone(replicaIDs(r), gone) && (len(reported) == 0 || allGone(reported, gone)) {
		return true, nil
	}
	return false, last
}

// deletedLeaving names the ranges that leave r's Raft group before range
// r of a deleted table freezes: none when no live range shares the group
// (peers: the map's ranges of r's group; the deleted table's own left the
// map with DELETE_TABLE) and no server refused the freeze for sharing one
// (shared: the group it named, 0 if none; the map may be behind the
// servers); r itself when it was born in the group; when r names the
// group, the live ranges instead (a namesake never leaves its group, as
// isolate does for one).
func deletedLeaving(r *pb.RangeDescriptor, peers []uint64, shared uint64) []uint64 {
	id, group := r.GetRangeId(), rangegroup.GroupOf(r)
	if shared != 0 {
		group = shared
	}
	switch {
	case group == id:
		return peers
	case len(peers) > 0 || shared != 0:
		return []uint64{id}
	}
	return nil
}

// sharedGroupOf is the group a freeze's refusal named (errSharedGroup),
// 0 for any other error.
func sharedGroupOf(err error) uint64 {
	var sg sharedGroupError
	if errors.As(err, &sg) {
		return sg.group
	}
	return 0
}

// sharedGroupError is errSharedGroup with the group the server named.
type sharedGroupError struct {
	group uint64
	err   error
}

func (e sharedGroupError) Error() string {
	return fmt.Sprintf("%v: group %d: %v", errSharedGroup, e.group, e.err)
}
func (e sharedGroupError) Unwrap() error { return errSharedGroup }

// isolateDeleted detaches what deletedLeaving names for range r of a
// deleted table, with the map's ranges of its group claimed meanwhile (as
// isolate claims them: an operation on one of them is busy, and one in
// flight makes this busy), and returns r's descriptor after (the
// detach's answer when r left) and whether anything left.
func (s *Server) isolateDeleted(ctx context.Context, r *pb.RangeDescriptor, shared uint64) (*pb.RangeDescriptor, bool, error) {
	group := rangegroup.GroupOf(r)
	var peers []uint64
	s.fsm.read(func(st *state) {
		for _, id := range st.groupRanges(group) {
			if id != r.GetRangeId() {
				peers = append(peers, id)
			}
		}
	})
	leaving := deletedLeaving(r, peers, shared)
	if len(leaving) == 0 {
		return r, false, nil
	}
	if err := s.ops.claim(peers...); err != nil {
		return r, false, err
	}
	defer s.ops.release(peers...)
	for _, id := range leaving {
		if id != r.GetRangeId() {
			// A live range: recorded in the map as any detach.
			if _, err := s.detach(ctx, id, "delete-table"); err != nil {
				return r, false, err
			}
			continue
		}
		got, err := s.detachDeleted(ctx, r)
		if err != nil {
			return r, false, err
		}
		r = got
	}
	return r, true, nil
}

// detachDeleted moves range r of a deleted table out of its Raft group
// into a group of its own (DetachRange on its leader), by its descriptor:
// DELETE_TABLE took it from the map, which detach reads. The new
// descriptor is not recorded (the map ignores ranges of a table not
// live); the freeze and the delete name the range by id.
func (s *Server) detachDeleted(ctx context.Context, r *pb.RangeDescriptor) (*pb.RangeDescriptor, error) {
	start := time.Now()
	id, leader := r.GetRangeId(), s.leaderOf(r.GetRangeId())
	cands := func() ([]string, error) {
		return freezeCandidates(r, s.leaderOf(id), s.reports.lastVoters(id)), nil
	}
	var got *pb.RangeDescriptor
	err := rangeclient.Call(ctx, cands, func(ctx context.Context, server string) error {
		c, err := s.pool.Partition(s.grpcAddrOf(server))
		if err != nil {
			return rpcerr.New(codes.Unavailable, "", err.Error(), nil)
		}
		resp, err := c.DetachRange(ctx, &pb.DetachRangeRequest{RangeId: id, PreferredLeader: leader})
		if err == nil {
			got = resp.GetRange()
		}
		return err
	}, rangeclient.Options{RetryBusy: true, Rounds: deleteDetachRounds, AttemptTimeout: deleteDetachAttempt})
	if err != nil {
		return nil, fmt.Errorf("range %d of a deleted table leaves Raft group %d: %w", id, rangegroup.GroupOf(r), err)
	}
	s.logger.Info("range of a deleted table left its shared Raft group", "range", id, "group", rangegroup.GroupOf(r), "took", time.Since(start))
	return got, nil
}

// deleteDetachRounds and deleteDetachAttempt bound one detachDeleted: a
// range whose replicas are gone answers no detach, and freezeRound shows
// it gone; the next round detaches again.
const (
	deleteDetachRounds  = 3
	deleteDetachAttempt = 10 * time.Second
)

// freezeCandidates are the servers to ask, in order: the leader last
// heard of, then r's replicas, then the voters its leader last reported
// that the descriptor does not list (a change whose record a failover cut
// off).
func freezeCandidates(r *pb.RangeDescriptor, leader string, reported []string) []string {
	out := make([]string, 0, len(r.GetReplicas())+1)
	if leader != "" {
		out = append(out, leader)
	}
	for _, id := range append(replicaIDs(r), reported...) {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func replicaIDs(r *pb.RangeDescriptor) []string {
	out := make([]string, 0, len(r.GetReplicas()))
	for _, rep := range r.GetReplicas() {
		out = append(out, rep.GetServerId())
	}
	return out
}

// freezeOn asks server to freeze range id for its deleted table (one
// attempt, up to a second: a paused server answers nothing).
func (s *Server) freezeOn(ctx context.Context, server string, id uint64) error {
	c, err := s.pool.Partition(s.grpcAddrOf(server))
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = c.FreezeRange(actx, &pb.FreezeRangeRequest{RangeId: id, TableDeleted: true})
	return err
}

// groupHostedOn reports whether server, which answered that it does not
// host range r, still hosts the Raft group r is recorded in when that is
// another range's group (a span added to an anchor group): the group's
// log may hold r's ADD_SPAN not applied there yet (the master's add
// answers once the group's leader applied it, and a follower cut off
// right after never heard the commit), so the span may yet serve there,
// and the answer must not count it gone. A range alone in its group, or
// a server that answers nothing for the group, counts gone as before.
func (s *Server) groupHostedOn(ctx context.Context, server string, r *pb.RangeDescriptor) bool {
	g := rangegroup.GroupOf(r)
	if g == r.GetRangeId() {
		return false
	}
	c, err := s.pool.Partition(s.grpcAddrOf(server))
	if err != nil {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = c.RangeInfo(actx, &pb.RangeInfoRequest{RangeId: g})
	return err == nil
}

// allGone reports whether a majority of a range's members answered that
// they do not host it: what is left cannot commit a write nor confirm a read,
// so it serves nothing. Not every replica: the servers drop replicas of a
// deleted table on their heartbeats, without a freeze, and with one
// server down a quiet range could lose its majority that way before the
// freeze (which must wake it and elect a leader) commits; the down
// replica would then never answer, and the delete would time out and
// the name stay refused for deleteFreezeGiveUp. It is asked of the
// descriptor's replicas and, when held, of the voters the range's leader
// last reported (freezeDeletedRange): a configuration the descriptor does
// not show yet (a move's record cut off by a failover) must have lost its
// majority too. Left: a configuration neither shows (the reports of a
// dropped table's ranges are pruned) is reached only through the leader
// hints of the round.
func allGone(members []string, gone map[string]bool) bool {
	n := 0
	for _, id := range members {
		if gone[id] {
			n++
		}
	}
	return len(members) > 0 && 2*n > len(members)
}

func containsFrom(s []string, from int, v string) bool {
	for _, x := range s[from:] {
		if x == v {
			return true
		}
	}
	return false
}
