package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
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

// Errors of the operations.
var (
	ErrRangeNotFound = errors.New("master: range not found")
	ErrBusy          = errors.New("master: an operation on the range is in flight")
	ErrNoNeighbour   = errors.New("master: range has no right neighbour")
	ErrBadTarget     = errors.New("master: bad target server")
	// ErrBadSource means a move's --from server holds no replica of the
	// range.
	ErrBadSource = errors.New("master: bad source server")
	// ErrTargetUnfit: the operator named a target server that is down or
	// draining (moveTargetRefusal).
	ErrTargetUnfit = errors.New("master: target server cannot take a replica now")
	// ErrNotReady: a replica of the right-hand range did not answer just
	// before a merge would freeze it; the merge is not
	// started (a later request or policy pass tries again).
	ErrNotReady = errors.New("master: a replica is not ready for the merge")
	// ErrReplicaDown: a replica of the range, other than the one a move
	// would remove, did not answer just before the move would add its new
	// voter; the move is not started (a later request or policy pass tries
	// again). See addRefusal.
	ErrReplicaDown = errors.New("master: a replica of the range does not answer")
)

// freezeCheckTimeout: before a merge freezes its right-hand range, every
// replica must answer within it.
const freezeCheckTimeout = 500 * time.Millisecond

// opTimeout bounds one split, merge, move or transfer.
const opTimeout = 60 * time.Second

func (s *Server) rangeDesc(id uint64) (*pb.RangeDescriptor, bool) {
	var d *pb.RangeDescriptor
	s.fsm.read(func(st *state) { d = st.ranges[id] })
	return d, d != nil
}

func (s *Server) grpcAddrOf(server string) string {
	var a string
	s.fsm.read(func(st *state) {
		if sv, ok := st.servers[server]; ok {
			a = sv.GetGrpcAddr()
		}
	})
	return a
}

func (s *Server) raftAddrs() map[string]string {
	out := map[string]string{}
	s.fsm.read(func(st *state) {
		for id, sv := range st.servers {
			out[id] = sv.GetRaftAddr()
		}
	})
	return out
}

func (s *Server) leaderOf(id uint64) string { return s.reports.leaderOf(id) }

func (s *Server) setLeader(id uint64, server string) {
	if s.reports.setLeader(id, server) {
		s.bump()
	}
}

// onLeader runs fn against the range's leader, following NOT_LEADER hints
// and trying every replica until it succeeds or ctx ends
// (internal/rangeclient's retry rule).
func (s *Server) onLeader(ctx context.Context, id uint64, fn func(ctx context.Context, c pb.PartitionServiceClient) error) error {
	return s.onLeaderWith(ctx, id, rangeclient.Options{}, fn)
}

// onLeaderWith is onLeader with o's AttemptTimeout and Rounds (the rest of
// the options are onLeader's own).
func (s *Server) onLeaderWith(ctx context.Context, id uint64, o rangeclient.Options, fn func(ctx context.Context, c pb.PartitionServiceClient) error) error {
	candidates := func() ([]string, error) {
		d, ok := s.rangeDesc(id)
		if !ok {
			return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
		}
		out := []string{s.leaderOf(id)}
		for _, r := range d.GetReplicas() {
			out = append(out, r.GetServerId())
		}
		return out, nil
	}
	attempt := func(ctx context.Context, server string) error {
		c, err := s.pool.Partition(s.grpcAddrOf(server))
		if err != nil {
			return rpcerr.New(codes.Unavailable, "", err.Error(), nil)
		}
		return fn(ctx, c)
	}
	return rangeclient.Call(ctx, candidates, attempt, rangeclient.Options{
		RetryBusy: true, OnLeader: func(server string) { s.setLeader(id, server) },
		AttemptTimeout: o.AttemptTimeout, Rounds: o.Rounds,
	})
}

// event appends to the replicated event log (best effort: an event lost to
// a leader change is not worth failing an operation for).
func (s *Server) event(e *pb.Event) {
	e.UnixNano = time.Now().UnixNano()
	eventsTotal.WithLabelValues(e.GetKind().String()).Inc()
	go func() {
		if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_APPEND_EVENT, &pb.AppendEventCommand{Event: e}); err != nil {
			s.logger.Debug("event not recorded", "kind", e.GetKind(), "err", err)
		}
	}()
	s.logger.Info("event", "kind", e.GetKind().String(), "table", e.GetTable(), "ranges", e.GetRangeIds(), "message", e.GetMessage())
}

// sizeSplitKey asks the range's leader for its size median.
func (s *Server) sizeSplitKey(ctx context.Context, id uint64) (string, error) {
	var key string
	err := s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		resp, err := c.SplitKey(ctx, &pb.SplitKeyRequest{RangeId: id})
		if err == nil && resp.GetOk() {
			key = resp.GetSplitKey()
		}
		return err
	})
	if err == nil && key == "" {
		err = fmt.Errorf("%w: range %d has no split key", ErrBadCommand, id)
	}
	return key, err
}

// split splits range id at key (or at its size median when key is empty).
// The new right range is led from the start by preferred (the scheduler's
// choice; "" asks it), so the load halves without a later transfer. In
// group (inGroup), the right range is a new span of the range's Raft group
// instead (docs/range-groups.md): led by the group's leader, preferred
// unused. A span of an anchor group leaves that group first
// (leaveAnchorGroup), so no half stays in the tables' shared group.
func (s *Server) split(ctx context.Context, id uint64, key, preferred, cause, reason string, figures map[string]float64, inGroup bool) (*pb.SplitResponse, error) {
	start := time.Now()
	d, ok := s.rangeDesc(id)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	d, err := s.leaveAnchorGroup(ctx, d, cause) // isolateop.go
	if err != nil {
		return nil, err
	}
	if key == "" {
		if key, err = s.sizeSplitKey(ctx, id); err != nil {
			return nil, err
		}
	}
	res, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_ALLOCATE_RANGE_ID, &pb.AllocateRangeIDCommand{})
	if err != nil {
		return nil, err
	}
	if preferred == "" && !inGroup {
		preferred = s.rightLeader(id)
	}
	if err := failpoint.Inject("master/split/before-split"); err != nil {
		return nil, err
	}
	var resp *pb.SplitRangeResponse
	err = s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		var err error
		resp, err = c.SplitRange(ctx, &pb.SplitRangeRequest{RangeId: id, SplitKey: key, NewRangeId: res.rangeID, PreferredLeader: preferred, InGroup: inGroup})
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := failpoint.Inject("master/split/after-split"); err != nil {
		return nil, err
	}
	splitDone := time.Since(start)
	s.reports.splitOff(id)
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{resp.GetLeft(), resp.GetRight()}}); err != nil {
		return nil, err
	}
	var moved time.Duration
	if inGroup {
		// One group, one leader: the right span's is the left's.
		s.setLeader(resp.GetRight().GetRangeId(), s.leaderOf(id))
	} else {
		if preferred == "" {
			preferred = s.leaderOf(id)
		}
		moved = s.leadRight(ctx, resp.GetRight(), preferred, start, splitDone)
	}
	if figures == nil {
		figures = map[string]float64{}
	}
	figures["split_seconds"] = splitDone.Seconds()
	figures["leader_move_seconds"] = moved.Seconds()
	s.splitEvent(d, key, resp, cause, reason, figures, start)
	return &pb.SplitResponse{Left: resp.GetLeft(), Right: resp.GetRight()}, nil
}

// leadRight waits for the new right range's first leader and moves the
// leadership to preferred if another replica won; it returns how long after
// the split the right range had its leader.
func (s *Server) leadRight(ctx context.Context, right *pb.RangeDescriptor, preferred string, start time.Time, splitDone time.Duration) time.Duration {
	s.setLeader(right.GetRangeId(), preferred)
	leaderAt := s.awaitLeader(ctx, right, preferred, 2*time.Second)
	if got := s.leaderOf(right.GetRangeId()); got != preferred && preferred != "" {
		if _, err := s.transfer(ctx, right.GetRangeId(), preferred); err != nil {
			s.logger.Warn("moving the new range's leadership failed", "range", right.GetRangeId(), "to", preferred, "err", err)
		}
		leaderAt = time.Since(start) - splitDone
	}
	return leaderAt
}

func (s *Server) splitEvent(d *pb.RangeDescriptor, key string, resp *pb.SplitRangeResponse, cause, reason string, figures map[string]float64, start time.Time) {
	left, right := resp.GetLeft(), resp.GetRight()
	s.event(&pb.Event{
		Kind: pb.EventKind_EVENT_KIND_SPLIT, Table: d.GetTable(), RangeIds: []uint64{left.GetRangeId(), right.GetRangeId()},
		Servers: []string{s.leaderOf(left.GetRangeId()), s.leaderOf(right.GetRangeId())}, Figures: figures, Cause: cause,
		Message:         fmt.Sprintf("split range %d at %q: [%q, %q) + range %d [%q, %q)", left.GetRangeId(), key, left.GetStart(), left.GetEnd(), right.GetRangeId(), right.GetStart(), right.GetEnd()) + withReason(reason),
		DurationSeconds: time.Since(start).Seconds(),
	})
	opSeconds.WithLabelValues("split").Observe(time.Since(start).Seconds())
}

// awaitLeader polls the replicas of a new range until one reports that it
// leads, and returns how long that took.
func (s *Server) awaitLeader(ctx context.Context, d *pb.RangeDescriptor, first string, limit time.Duration) time.Duration {
	start := time.Now()
	order := []string{first}
	for _, r := range d.GetReplicas() {
		if r.GetServerId() != first {
			order = append(order, r.GetServerId())
		}
	}
	for time.Since(start) < limit && ctx.Err() == nil {
		for _, id := range order {
			c, err := s.pool.Partition(s.grpcAddrOf(id))
			if err != nil {
				continue
			}
			info, err := c.RangeInfo(ctx, &pb.RangeInfoRequest{RangeId: d.GetRangeId()})
			if err == nil && info.GetStatus().GetLeader() {
				s.setLeader(d.GetRangeId(), id)
				return time.Since(start)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// transfer moves a range's leadership to server to. The leadership is the
// Raft group's: it returns the group's other ranges, which moved with it.
func (s *Server) transfer(ctx context.Context, id uint64, to string) (peers []uint64, err error) {
	d, ok := s.rangeDesc(id)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	if !hasReplica(d, to) {
		return nil, fmt.Errorf("%w: %s holds no replica of range %d", ErrBadTarget, to, id)
	}
	if err := s.awaitTransferable(ctx, id, to); err != nil {
		return nil, err
	}
	addr := s.raftAddrs()[to]
	err = s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		_, err := c.TransferLeader(ctx, &pb.TransferLeaderRequest{RangeId: id, ToServerId: to, ToRaftAddr: addr})
		return err
	})
	if err != nil {
		return nil, err
	}
	// Every range of the group is led by to now: the scheduler moves a
	// shared group's leadership only when all its ranges name the same
	// leader (scheduler Plan.wholeGroup).
	s.setLeader(id, to)
	peers = s.groupPeers(id)
	for _, peer := range peers {
		s.setLeader(peer, to)
	}
	return peers, nil
}

// merge merges range id with its right neighbour R, which must be the
// range the caller claimed as claimed (0: not checked), without moving a
// row through Raft (CockroachDB's merge protocol, on a shared state file):
//
//  1. co-locate: R's replicas move onto L's servers, so every server of L
//     holds R's rows in the same bbolt file (a resumed, committed merge
//     moves L's instead: R cannot move while frozen; colocateLeft);
//  2. freeze (subsume): R's log gets Freeze; R serves nothing from then on,
//     and the master waits, at most mergeFreezeWait, until every replica
//     of R has applied it, so R's rows are final on every server;
//  3. decide: the master records COMMIT (every replica applied the
//     freeze) or ABORT (one did not in time, or a server of L holds no
//     replica of R by the freeze's descriptor) for that freeze in its own
//     log (mergedecision.go); a recorded decision is final. On ABORT R's
//     log gets Unfreeze{freeze index}, R serves again and the merge fails
//     with ErrMergeAborted (a later pass freezes again, at a new index);
//  4. merge, only after COMMIT: L's log gets Merge{R, freeze index}; each
//     L replica widens its span over R's keys and drops R's state in one
//     local transaction;
//  5. retire: R leaves the map and its groups stop.
//
// Every step is idempotent: a master that dies before the freeze leaves two
// healthy ranges (co-location is just placement), and a frozen range seen
// by any master is resumed (resumeMerges): the decision recorded for its
// freeze is carried out, and without one the resuming master decides as
// in step 3. So a replica that fails right after the freeze holds R's
// writes for about mergeFreezeWait, not until it is back.
func (s *Server) merge(ctx context.Context, id, claimed uint64, cause, reason string, figures map[string]float64) (*pb.RangeDescriptor, error) {
	start := time.Now()
	left, right, err := s.mergePair(id, claimed)
	if err != nil {
		return nil, err
	}
	if rangegroup.GroupOf(left) == rangegroup.GroupOf(right) {
		return s.mergeSpans(ctx, left, right, cause, reason, figures, start)
	}
	var t mergeTimes
	var freeze *pb.FreezeRangeResponse
	rightID := right.GetRangeId() // right is nil after a failed isolate
	// A resumed merge finds its right range frozen already (and must not
	// freeze it again: the merge it resumes may have been aborted since).
	// It reads the freeze and its decision before anything else: an
	// ABORT goes straight to the unfreeze, without co-locating first.
	resume := cause == causeRecovery
	if resume {
		t.frozenAt = time.Now()
		if freeze, err = s.freezeEverywhere(ctx, id, right, true, &t); err != nil {
			return nil, err
		}
		// Committed: R is frozen and cannot move (its leader refuses
		// membership changes while frozen, and so does move), so where
		// L has a replica beside no replica of R's freeze (L moved
		// after the COMMIT: a deposed master, an operator, the replica-
		// set check between two resumes), L moves. Moving R instead was
		// refused every pass, and R stayed frozen for good.
		err = s.colocateLeft(ctx, id, freeze.GetRange(), cause)
	} else if right, err = s.isolate(ctx, right.GetRangeId(), cause); err == nil {
		// Alone in its group first: a freeze and a merge take a whole
		// group's log out of service, and a group whose namesake merged
		// away outlived the id that names it (docs/reliability.md 45).
		right, err = s.colocate(ctx, left, right, cause)
	}
	if err != nil {
		return nil, fmt.Errorf("co-locate range %d with %d: %w", rightID, id, err)
	}
	if err := failpoint.Inject("master/merge/after-colocate"); err != nil {
		return nil, err
	}
	if !resume {
		if freeze, err = s.freezeAndDecide(ctx, id, right, &t); err != nil {
			return nil, err
		}
	}
	// From here on the merge is committed and R serves nothing until L
	// takes it over: the caller's deadline (an operator's request) must
	// not leave it frozen until a later pass resumes it.
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	s.freezeOnReplicas(ctx, freeze, t.freezeSeen)
	merged, err := s.takeOver(ctx, id, right, freeze, &t)
	if err != nil {
		return nil, err
	}
	s.mergeEvent(left, right, merged, cause, reason, figures, start, t)
	return merged, nil
}

// mergeSpans merges two spans of one Raft group (docs/range-groups.md,
// stage 5): one entry in the group's log, no freeze, nothing to co-locate,
// so no write pause and no decision to record. The right range has no
// replica of its own to delete: its span left the group with the entry.
// A master that dies before the map is updated adopts the wider left
// range from the reports (highest generation), and drops the right one it
// covers, as after a split.
func (s *Server) mergeSpans(ctx context.Context, left, right *pb.RangeDescriptor, cause, reason string, figures map[string]float64, start time.Time) (*pb.RangeDescriptor, error) {
	var merged *pb.RangeDescriptor
	err := s.onLeader(ctx, left.GetRangeId(), func(ctx context.Context, c pb.PartitionServiceClient) error {
		resp, err := c.MergeRange(ctx, &pb.MergeRangeRequest{RangeId: left.GetRangeId(), Right: right, InGroup: true})
		if err == nil {
			merged = resp.GetRange()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("merge range %d into %d in their group: %w", right.GetRangeId(), left.GetRangeId(), err)
	}
	t := mergeTimes{mergedAt: time.Now()}
	t.frozenAt = t.mergedAt // no pause: nothing was frozen
	if err := failpoint.Inject("master/merge-spans/after-merge"); err != nil {
		return nil, err
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_RANGE, &pb.RemoveRangeCommand{RangeId: right.GetRangeId(), AbsorbedBy: merged}); err != nil {
		return nil, err
	}
	t.removed = t.mergedAt
	s.reports.forget(right.GetRangeId())
	s.mergeEvent(left, right, merged, cause, reason, figures, start, t)
	return merged, nil
}

// mergePair reads range id and its right neighbour from the map; the
// neighbour must be claimed (0: not checked). The caller claimed (runner)
// the neighbour it saw; the map may have changed since (a split or merge
// reported by heartbeats), and the range now there may be another
// operation's: a merge would move its replicas and freeze it under that
// operation. Refused as busy, asked again on the next pass.
func (s *Server) mergePair(id, claimed uint64) (left, right *pb.RangeDescriptor, err error) {
	left, ok := s.rangeDesc(id)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	right = s.rightNeighbour(left)
	if right == nil {
		return nil, nil, fmt.Errorf("%w: %d", ErrNoNeighbour, id)
	}
	if claimed != 0 && right.GetRangeId() != claimed {
		return nil, nil, fmt.Errorf("%w: range %d's right neighbour is now %d, not the claimed %d", ErrBusy, id, right.GetRangeId(), claimed)
	}
	return left, right, nil
}

// groupPeers lists the other ranges of the Raft group that serves range
// id (none when it is its group's only range).
func (s *Server) groupPeers(id uint64) []uint64 {
	var out []uint64
	s.fsm.read(func(st *state) {
		if d := st.ranges[id]; d != nil {
			for _, r := range st.groupRanges(rangegroup.GroupOf(d)) {
				if r != id {
					out = append(out, r)
				}
			}
		}
	})
	return out
}

// freezeOnReplicas waits, before a committed merge's MergeRange, for
// the replicas of R's freeze to apply it where the decision alone does
// not say so (seen: this master saw every one apply it). A COMMIT read
// rather than made here (another master's, or one from an earlier
// attempt) was made once every replica of the freeze's descriptor applied
// it, which cannot change while R is frozen (its leader refuses
// membership changes, and so does move); a replica restored from an old
// state file or behind since a restart may lag. Bounded: an L replica's
// apply waits for its own server's R replica anyway (fsm waitMerges), so
// this only spares it that stall, and an unbounded wait would hold a
// committed merge for a server that died since. (A resumed merge used to
// co-locate R after its COMMIT and then wait unbounded for R's moved
// replicas; R cannot move while frozen, so L moves now: colocateLeft.)
func (s *Server) freezeOnReplicas(ctx context.Context, freeze *pb.FreezeRangeResponse, seen bool) {
	if seen {
		return
	}
	right := freeze.GetRange()
	wctx, wcancel := context.WithTimeout(ctx, mergeFreezeWaitMax)
	err := s.waitApplied(wctx, right, freeze.GetFreezeIndex())
	wcancel()
	if err != nil && ctx.Err() == nil {
		s.logger.Info("merging before every replica of the right range applied its freeze (a read COMMIT)", "range", right.GetRangeId(), "freeze_index", freeze.GetFreezeIndex(), "err", err)
	}
}

// takeOver is a committed merge's steps 4 and 5: L takes over R's keys
// (MergeRange with R's freeze), then R leaves the map and its replicas go.
func (s *Server) takeOver(ctx context.Context, id uint64, right *pb.RangeDescriptor, freeze *pb.FreezeRangeResponse, t *mergeTimes) (*pb.RangeDescriptor, error) {
	var merged *pb.RangeDescriptor
	err := s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		resp, err := c.MergeRange(ctx, &pb.MergeRangeRequest{RangeId: id, Right: freeze.GetRange(), RightFreezeIndex: freeze.GetFreezeIndex()})
		if err == nil {
			merged = resp.GetRange()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("merge range %d into %d: %w", right.GetRangeId(), id, err)
	}
	t.mergedAt = time.Now()
	if err := failpoint.Inject("master/merge/after-merge"); err != nil {
		return nil, err
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_RANGE, &pb.RemoveRangeCommand{RangeId: right.GetRangeId(), AbsorbedBy: merged}); err != nil {
		return nil, err
	}
	t.removed = time.Now()
	if err := failpoint.Inject("master/merge/after-remove"); err != nil {
		return nil, err
	}
	s.retire(right)
	return merged, nil
}

// freezeAndDecide is a fresh merge's steps 2 and 3: once the pre-freeze
// checks pass, freeze R and decide (freezeEverywhere).
func (s *Server) freezeAndDecide(ctx context.Context, id uint64, right *pb.RangeDescriptor, t *mergeTimes) (*pb.FreezeRangeResponse, error) {
	if err := s.readyToFreeze(ctx, right); err != nil {
		return nil, fmt.Errorf("merge range %d into %d: %w", right.GetRangeId(), id, err)
	}
	if err := failpoint.Inject("master/merge/before-freeze"); err != nil {
		return nil, err
	}
	t.frozenAt = time.Now()
	return s.freezeEverywhere(ctx, id, right, false, t)
}

// mergeTimes are the moments of a merge's steps, for its event.
type mergeTimes struct {
	frozenAt, frozen, caughtUp, mergedAt, removed time.Time
	// freezeSeen: this master saw every replica of the freeze's
	// descriptor apply the freeze (it made the COMMIT); false when it
	// read a recorded decision.
	freezeSeen bool
}

// readyToFreeze asks every replica of right for its applied index just
// before the freeze. Once frozen, a range serves nothing until every
// replica has applied the freeze (its rows must be final on every server
// before the left range takes them over) or the merge is aborted after
// mergeFreezeWait, so before the abort path a replica on a server that
// was just killed or paused held all writes to the range until the
// server came back and caught up: 5 - 15 s in chaos seeds 6, 13 and 14,
// where the harness asks for a merge right after a fault. It still saves
// that wait and the aborted merge: the master's liveness view is seconds
// old; a direct question is not. A failure between the question and the
// freeze (milliseconds) costs the bounded wait (docs/reliability.md 16).
// A live replica behind the others is waited for here, while the range
// still serves (awaitCatchUp), rather than after the freeze, where the
// wait is bounded.
func (s *Server) readyToFreeze(ctx context.Context, right *pb.RangeDescriptor) error {
	applied := map[string]uint64{}
	var target uint64
	for _, rep := range right.GetReplicas() {
		qctx, cancel := context.WithTimeout(ctx, freezeCheckTimeout)
		a, err := s.appliedOn(qctx, rep.GetServerId(), right.GetRangeId())
		// A replica that does not host the range yet is behind, not gone:
		// right after a split a follower creates the new range when it
		// applies the split, which may come after the leader answered
		// (an operator's merge right after a split was refused 1 in 25).
		for status.Code(err) == codes.NotFound && qctx.Err() == nil {
			select {
			case <-qctx.Done():
			case <-time.After(20 * time.Millisecond):
				a, err = s.appliedOn(qctx, rep.GetServerId(), right.GetRangeId())
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%w: range %d on %s: %v", ErrNotReady, right.GetRangeId(), rep.GetServerId(), err)
		}
		applied[rep.GetServerId()] = a
		target = max(target, a)
	}
	awaitCatchUp(ctx, applied, target, func(ctx context.Context, server string) (uint64, error) {
		return s.appliedOn(ctx, server, right.GetRangeId())
	})
	return nil
}

// mergeCatchUpWait bounds how long a merge waits, before the freeze, for
// a live replica of the right range that is behind the others but still
// applying entries (one that just restarted, a voter a move just added).
const mergeCatchUpWait = 2 * time.Second

// awaitCatchUp waits until every replica has applied target (the most
// any replica had applied at the pre-freeze question), while the range
// still serves: the freeze's own wait is bounded (mergeFreezeWait) and a
// replica still catching up when it ends aborts the merge. A replica
// that applies nothing new for mergeFreezeWait is not waited for (a cut-
// off follower: the leader refuses the freeze, or the merge is aborted);
// nor is anyone beyond mergeCatchUpWait. Healthy followers are at most an
// entry or two behind and catch up within milliseconds.
func awaitCatchUp(ctx context.Context, applied map[string]uint64, target uint64, appliedOn func(ctx context.Context, server string) (uint64, error)) {
	start := time.Now()
	moved := map[string]time.Time{}
	for delay := 5 * time.Millisecond; time.Since(start) < mergeCatchUpWait; delay = min(2*delay, 50*time.Millisecond) {
		behind := false
		for server, a := range applied {
			if a >= target {
				continue
			}
			if moved[server].IsZero() {
				moved[server] = start
			}
			if time.Since(moved[server]) < mergeFreezeWait {
				behind = true
			}
		}
		if !behind {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		for server, a := range applied {
			if a >= target {
				continue
			}
			qctx, cancel := context.WithTimeout(ctx, freezeCheckTimeout)
			got, err := appliedOn(qctx, server)
			cancel()
			if err == nil && got > a {
				applied[server], moved[server] = got, time.Now()
			}
		}
	}
}

// freezeEverywhere freezes right at its leader (resume: only reports the
// freeze it has, errNotFrozen if none), then decides the merge (steps 2
// and 3 of merge): it returns once a COMMIT is recorded for the freeze,
// or unfreezes right after an ABORT is recorded and returns
// ErrMergeAborted.
func (s *Server) freezeEverywhere(ctx context.Context, leftID uint64, right *pb.RangeDescriptor, resume bool, t *mergeTimes) (*pb.FreezeRangeResponse, error) {
	var freeze *pb.FreezeRangeResponse
	err := s.onLeader(ctx, right.GetRangeId(), func(ctx context.Context, c pb.PartitionServiceClient) error {
		var err error
		freeze, err = c.FreezeRange(ctx, &pb.FreezeRangeRequest{RangeId: right.GetRangeId(), OnlyIfFrozen: resume})
		return err
	})
	if err != nil {
		if rpcerr.Parse(err).Reason == rpcerr.ReasonNotReady {
			// Refused before it was proposed: nothing to undo.
			return nil, fmt.Errorf("%w: freeze range %d: %v", ErrNotReady, right.GetRangeId(), err)
		}
		return nil, fmt.Errorf("freeze range %d: %w", right.GetRangeId(), err)
	}
	if freeze.GetFreezeIndex() == 0 {
		// Only a resumed merge asks without freezing. "Not frozen" from a
		// leader that applied past the recorded freeze proves it undone;
		// from one that has not applied it yet (elected a moment ago), it
		// proves nothing and the range stays on the list.
		s.reports.observeFreeze(right.GetRangeId(), freeze.GetRange().GetGeneration(), false, 0, freeze.GetAppliedIndex())
		return nil, fmt.Errorf("%w: range %d (its leader applied %d)", errNotFrozen, right.GetRangeId(), freeze.GetAppliedIndex())
	}
	t.frozen = time.Now()
	if err := failpoint.Inject("master/merge/after-freeze-proposed"); err != nil {
		return nil, err
	}
	s.reports.observeFreeze(right.GetRangeId(), freeze.GetRange().GetGeneration(), true, freeze.GetFreezeIndex(), freeze.GetAppliedIndex())
	// R serves nothing until the decision is carried out: the caller's
	// deadline (an operator's request) must not leave it frozen until a
	// later pass resumes the merge.
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	outcome, seen, err := s.decideMerge(ctx, freeze.GetRange(), freeze.GetFreezeIndex(), s.mergeUnfit(leftID, freeze.GetRange()))
	t.freezeSeen = seen
	if err != nil {
		return nil, fmt.Errorf("decide the merge of range %d (freeze at %d): %w", right.GetRangeId(), freeze.GetFreezeIndex(), err)
	}
	if outcome == pb.MergeOutcome_MERGE_OUTCOME_ABORT {
		if err := failpoint.Inject("master/merge/after-abort"); err != nil {
			return nil, err
		}
		if err := s.unfreeze(ctx, right.GetRangeId(), freeze.GetFreezeIndex()); err != nil {
			// Still an abort to the caller (MERGE_ABORTED: ask again);
			// the range stays on the frozen list and resumeMerges
			// carries the recorded ABORT out.
			return nil, fmt.Errorf("%w: %w: range %d (freeze at %d), but its unfreeze failed: %w", ErrNotReady, ErrMergeAborted, right.GetRangeId(), freeze.GetFreezeIndex(), err)
		}
		s.logger.Warn("merge aborted: a replica of the right range did not apply the freeze in time; unfrozen",
			"range", right.GetRangeId(), "freeze_index", freeze.GetFreezeIndex(), "frozen_for", time.Since(t.frozen))
		if err := failpoint.Inject("master/merge/after-unfreeze"); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w: range %d (freeze at %d)", ErrNotReady, ErrMergeAborted, right.GetRangeId(), freeze.GetFreezeIndex())
	}
	t.caughtUp = time.Now()
	if err := failpoint.Inject("master/merge/after-freeze"); err != nil {
		return nil, err
	}
	return freeze, nil
}

// errNotFrozen: a resumed merge found its right range's leader unfrozen
// (the merge was aborted and the range unfrozen; the report was stale).
var errNotFrozen = errors.New("master: the right range is not frozen")

// mergeFreezeWait bounds the wait, after a merge's freeze, for every
// replica of the right range to apply it: one that has not by then, and
// has applied nothing new in the last mergeFreezeWait (a failed, paused or
// cut-off server), aborts the merge. A live replica still catching up
// gets until mergeFreezeWaitMax. The right range serves nothing while
// frozen, so these bound its write pause (issue 10: no gap over 3 s),
// plus the unfreeze's own commit.
const (
	mergeFreezeWait    = time.Second
	mergeFreezeWaitMax = 2 * time.Second
)

// decideMerge returns the decision recorded for right's freeze at index;
// without one, it waits (bounded, see waitFreeze) for every replica to
// apply the freeze and records COMMIT if they did, ABORT if not, or if
// unfit (mergeUnfit: the left range cannot take over this freeze). The
// outcome returned is the recorded one, which may be another master's.
// seen: every replica of right applied the freeze, as this call saw
// (false for a decision read: the caller checks before acting on it).
func (s *Server) decideMerge(ctx context.Context, right *pb.RangeDescriptor, index uint64, unfit error) (outcome pb.MergeOutcome, seen bool, err error) {
	return s.decideFreeze(ctx, right, index, unfit, 0)
}

// decideFreeze is decideMerge for a freeze that attaches right to the
// group of anchor attachGroup (attach; 0: a merge's), recorded in the
// decision (MergeDecision.attach_group) so that a resuming master knows
// which operation the COMMIT is for.
func (s *Server) decideFreeze(ctx context.Context, right *pb.RangeDescriptor, index uint64, unfit error, attachGroup uint64) (outcome pb.MergeOutcome, seen bool, err error) {
	var ok bool
	s.fsm.read(func(st *state) { outcome, ok = st.mergeDecision(right.GetRangeId(), index) })
	if ok {
		return outcome, false, nil
	}
	outcome = pb.MergeOutcome_MERGE_OUTCOME_COMMIT
	err = unfit
	if err == nil {
		err = s.waitFreeze(ctx, right, index)
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, false, err // undecided: whoever resumes decides
		}
		if servers := serversOf(right); !s.reports.canAbort(servers) {
			// A replica's server runs a build without the unfreeze (a
			// rolling upgrade), or too few are known to run one with
			// it (reports.canAbort): the unfreeze might not commit.
			// Undecided, as before the abort existed: the range stays
			// frozen and the next pass waits again.
			return 0, false, fmt.Errorf("%w (%v): %w", ErrNoUnfreeze, servers, err)
		}
		s.logger.Warn("aborting a merge", "range", right.GetRangeId(), "freeze_index", index, "attach_group", attachGroup, "err", err)
		outcome = pb.MergeOutcome_MERGE_OUTCOME_ABORT
	}
	res, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_MERGE_DECISION, &pb.MergeDecisionCommand{Decision: &pb.MergeDecision{
		RightRangeId: right.GetRangeId(), FreezeIndex: index, Outcome: outcome, AttachGroup: attachGroup,
	}})
	if err != nil {
		return 0, false, err
	}
	if res.recorded && res.decision.GetOutcome() == pb.MergeOutcome_MERGE_OUTCOME_ABORT {
		// Counted once per decision: not for one read back (another
		// master's, or a repeat).
		mergeAbortsTotal.Inc()
	}
	return res.decision.GetOutcome(), outcome == pb.MergeOutcome_MERGE_OUTCOME_COMMIT, nil
}

// waitFreeze waits until every replica of d has applied index, for at
// most mergeFreezeWait, or mergeFreezeWaitMax while the replicas that have
// not are still applying entries.
func (s *Server) waitFreeze(ctx context.Context, d *pb.RangeDescriptor, index uint64) error {
	// An error injected here stands for a replica short of the freeze.
	if err := failpoint.Inject("master/merge/freeze-wait"); err != nil {
		return err
	}
	return waitFreeze(ctx, serversOf(d), index, func(ctx context.Context, server string) (uint64, error) {
		st, err := s.statusOn(ctx, server, d.GetRangeId())
		if err != nil {
			return 0, err
		}
		return freezeProgress(st, index), nil
	})
}

// freezeProgress is how far a replica whose status is st has come towards
// holding the freeze at index, for waitFreeze: its applied index when it
// is frozen at exactly that index (what the MERGE and ATTACH_SPAN entries
// require of every replica: fsm's applyMerge), else at most index-1. An
// applied index alone is not enough: it counts entries of the log the
// replica applies the range in, and a replica that has not applied a
// change of the range's log yet (the merge's isolate, a detach into a
// group of its own, which starts a new log) reports the old log's index,
// which can be past the freeze's in the new one. Such a replica was
// counted as holding the freeze, the merge was committed, and its server
// panicked applying it (chaos seed 2460). A replica past index and not
// frozen there (the freeze undone, or another one since) never holds it.
// A server that reports no freeze index (an older build) holds it when
// frozen and past it. Pure.
func freezeProgress(st *pb.RangeStatus, index uint64) uint64 {
	applied := st.GetAppliedIndex()
	if index == 0 {
		return applied // no freeze entry has index 0: nothing to wait for
	}
	if st.GetFrozen() && applied >= index && (st.GetFrozenIndex() == index || st.GetFrozenIndex() == 0) {
		return applied
	}
	return min(applied, index-1)
}

// waitFreeze is Server.waitFreeze with the question to a server (its
// replica's applied index) passed in.
func waitFreeze(ctx context.Context, servers []string, index uint64, appliedOn func(ctx context.Context, server string) (uint64, error)) error {
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, mergeFreezeWaitMax)
	defer cancel()
	type seen struct {
		applied  uint64
		answered bool
		moved    time.Time // when applied last grew
		err      error
	}
	pending := map[string]*seen{}
	for _, server := range servers {
		pending[server] = &seen{moved: start}
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		for server, sn := range pending {
			qctx, qcancel := context.WithTimeout(wctx, freezeCheckTimeout)
			applied, err := appliedOn(qctx, server)
			qcancel()
			sn.err = err
			switch {
			case err == nil && applied >= index:
				delete(pending, server)
			case err == nil && (applied > sn.applied || !sn.answered):
				if sn.answered {
					sn.moved = time.Now() // still applying: catching up
				}
				sn.applied, sn.answered = applied, true
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if now := time.Now(); now.Sub(start) >= mergeFreezeWait {
			for server, sn := range pending {
				if now.Sub(sn.moved) >= mergeFreezeWait {
					return fmt.Errorf("replica on %s applied %d < freeze %d after %v (last error %v)", server, sn.applied, index, now.Sub(start).Round(time.Millisecond), sn.err)
				}
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%d replicas short of freeze %d after %v", len(pending), index, mergeFreezeWaitMax)
		case <-time.After(delay):
		}
	}
}

// unfreeze undoes right's freeze at index through its log (only after an
// ABORT is recorded for it). The leader's answer says where the range
// stands after it: unfrozen (at an applied index past the freeze), or
// frozen at another, later freeze, which the master keeps counting
// (resumeMerges decides it); only the former forgets the freeze.
func (s *Server) unfreeze(ctx context.Context, id, index uint64) error {
	var resp *pb.UnfreezeRangeResponse
	err := s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		var err error
		resp, err = c.UnfreezeRange(ctx, &pb.UnfreezeRangeRequest{RangeId: id, FreezeIndex: index})
		return err
	})
	if err != nil {
		return err
	}
	if s.reports.observeFreeze(id, resp.GetRange().GetGeneration(), resp.GetFrozen(), resp.GetFrozenIndex(), resp.GetAppliedIndex()) {
		s.logger.Info("unfrozen range frozen again since", "range", id, "freeze_index", index, "frozen_at", s.reports.frozenAt(id))
	}
	return nil
}

// ErrNotColocated: a merge's left range has a replica on a server where
// its frozen right range has none (co-location is decided from the map,
// which can be behind the ranges' own descriptors).
var ErrNotColocated = errors.New("master: the left range has a replica where the right range has none")

// mergeUnfit says why the left range (by id, from the map) cannot take
// over right's freeze (right: the descriptor the freeze reported), nil if
// it can: each replica of the left range applies the merge with its own
// server's replica of the right range, so every server of the left
// range must hold one that applied the freeze. The co-location before
// the freeze is from the map; a deposed master's move, or one whose map
// update a crash lost, leaves the map behind the ranges, and the freeze's
// descriptor is the right range's own. Recording COMMIT for such a freeze
// left a decision no one could carry out (the partition server refuses
// the MergeRange, and before that check a left replica without the
// right range's replica panicked), with the right range frozen for good;
// it is recorded ABORT instead and the merge asked again.
func (s *Server) mergeUnfit(leftID uint64, right *pb.RangeDescriptor) error {
	left, ok := s.rangeDesc(leftID)
	if !ok {
		return fmt.Errorf("%w: %d", ErrRangeNotFound, leftID)
	}
	return colocationGap(left, right)
}

// colocationGap is nil when every server of left holds a replica of
// right, else says which does not. Pure.
func colocationGap(left, right *pb.RangeDescriptor) error {
	if extra := serversNotIn(left, right); len(extra) > 0 {
		return fmt.Errorf("%w: range %d on %s, range %d on %v", ErrNotColocated, left.GetRangeId(), extra[0], right.GetRangeId(), serversOf(right))
	}
	return nil
}

// serversNotIn lists the servers of a's replicas that hold none of b's.
func serversNotIn(a, b *pb.RangeDescriptor) []string {
	var out []string
	for _, rep := range a.GetReplicas() {
		if !hasReplica(b, rep.GetServerId()) {
			out = append(out, rep.GetServerId())
		}
	}
	return out
}

// colocateLeft moves the left range's replicas, one at a time, onto the
// servers of its frozen right range (right: the freeze's descriptor)
// until every replica of the left range has one of the right range beside
// it: a committed merge's right range cannot move.
func (s *Server) colocateLeft(ctx context.Context, leftID uint64, right *pb.RangeDescriptor, cause string) error {
	for ctx.Err() == nil {
		l, ok := s.rangeDesc(leftID)
		if !ok {
			return fmt.Errorf("%w: %d", ErrRangeNotFound, leftID)
		}
		extra := serversNotIn(l, right)
		if len(extra) == 0 {
			return nil
		}
		missing := serversNotIn(right, l)
		if len(missing) == 0 {
			return fmt.Errorf("%w: range %d has more replicas than its frozen right neighbour %d", ErrBadTarget, leftID, right.GetRangeId())
		}
		reason := fmt.Sprintf("co-locate with frozen range %d for a committed merge", right.GetRangeId())
		if _, err := s.move(ctx, leftID, extra[0], missing[0], cause, reason, nil); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// serversOf lists the servers of d's replicas.
func serversOf(d *pb.RangeDescriptor) []string {
	var out []string
	for _, rep := range d.GetReplicas() {
		out = append(out, rep.GetServerId())
	}
	return out
}

// mergeEvent records a finished merge with the time of each step; the
// write pause is from the freeze to the map update.
func (s *Server) mergeEvent(left, right, merged *pb.RangeDescriptor, cause, reason string, figures map[string]float64, start time.Time, t mergeTimes) {
	pause := t.removed.Sub(t.frozenAt)
	if figures == nil {
		figures = map[string]float64{}
	}
	figures["write_pause_seconds"] = pause.Seconds()
	figures["freeze_seconds"] = t.frozen.Sub(t.frozenAt).Seconds()
	figures["freeze_applied_everywhere_seconds"] = t.caughtUp.Sub(t.frozen).Seconds()
	figures["merge_command_seconds"] = t.mergedAt.Sub(t.caughtUp).Seconds()
	figures["map_update_seconds"] = t.removed.Sub(t.mergedAt).Seconds()
	s.event(&pb.Event{
		Kind: pb.EventKind_EVENT_KIND_MERGE, Table: left.GetTable(), RangeIds: []uint64{left.GetRangeId(), right.GetRangeId()},
		Figures: figures, Cause: cause, DurationSeconds: time.Since(start).Seconds(),
		Message: fmt.Sprintf("merged range %d [%q, %q) into range %d, now [%q, %q)", right.GetRangeId(), right.GetStart(), right.GetEnd(), left.GetRangeId(), merged.GetStart(), merged.GetEnd()) + withReason(reason),
	})
	opSeconds.WithLabelValues("merge").Observe(time.Since(start).Seconds())
	mergePauseSeconds.Observe(pause.Seconds())
}

// colocate moves the right range's replicas, one at a time, onto the left
// range's servers, and returns its descriptor once both have the same.
func (s *Server) colocate(ctx context.Context, left, right *pb.RangeDescriptor, cause string) (*pb.RangeDescriptor, error) {
	for ctx.Err() == nil {
		l, okL := s.rangeDesc(left.GetRangeId())
		r, okR := s.rangeDesc(right.GetRangeId())
		if !okL || !okR {
			return right, ErrRangeNotFound
		}
		missing, extra := serversNotIn(l, r), serversNotIn(r, l)
		switch {
		case len(missing) == 0 && len(extra) == 0:
			return r, nil
		case len(missing) == 0 || len(extra) == 0:
			return r, fmt.Errorf("%w: ranges %d and %d have different replica counts", ErrBadTarget, l.GetRangeId(), r.GetRangeId())
		}
		reason := fmt.Sprintf("co-locate with range %d for a merge", l.GetRangeId())
		if _, err := s.move(ctx, r.GetRangeId(), extra[0], missing[0], cause, reason, nil); err != nil {
			return r, err
		}
	}
	return right, ctx.Err()
}

// waitApplied waits until every replica of d reports an applied index of at
// least index (committed to its state file).
func (s *Server) waitApplied(ctx context.Context, d *pb.RangeDescriptor, index uint64) error {
	for _, rep := range d.GetReplicas() {
		for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
			applied, err := s.appliedOn(ctx, rep.GetServerId(), d.GetRangeId())
			if err == nil && applied >= index {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("replica on %s: %w (last error %v)", rep.GetServerId(), ctx.Err(), err)
			case <-time.After(delay):
			}
		}
	}
	return nil
}

// appliedOn asks server for the index its replica of range id applied.
func (s *Server) appliedOn(ctx context.Context, server string, id uint64) (uint64, error) {
	st, err := s.statusOn(ctx, server, id)
	return st.GetAppliedIndex(), err
}

// statusOn asks server for its replica of range id's status (RangeInfo).
func (s *Server) statusOn(ctx context.Context, server string, id uint64) (*pb.RangeStatus, error) {
	c, err := s.pool.Partition(s.grpcAddrOf(server))
	if err != nil {
		return nil, err
	}
	resp, err := c.RangeInfo(ctx, &pb.RangeInfoRequest{RangeId: id})
	if err != nil {
		return nil, err
	}
	return resp.GetStatus(), nil
}

// rightNeighbour returns the range of the same table starting where d ends.
func (s *Server) rightNeighbour(d *pb.RangeDescriptor) *pb.RangeDescriptor {
	if d.GetEnd() == "" {
		return nil
	}
	var out *pb.RangeDescriptor
	s.fsm.read(func(st *state) {
		for _, r := range st.ranges {
			if r.GetTableId() == d.GetTableId() && r.GetStart() == d.GetEnd() {
				out = r
			}
		}
	})
	return out
}

// leftNeighbour returns the range of the same table ending where d starts.
func (s *Server) leftNeighbour(d *pb.RangeDescriptor) *pb.RangeDescriptor {
	if d.GetStart() == "" {
		return nil
	}
	var out *pb.RangeDescriptor
	s.fsm.read(func(st *state) {
		for _, r := range st.ranges {
			if r.GetTableId() == d.GetTableId() && r.GetEnd() == d.GetStart() {
				out = r
			}
		}
	})
	return out
}

// retire deletes a merged-away range's replicas (best effort; servers that
// miss it are told by heartbeat).
func (s *Server) retire(d *pb.RangeDescriptor) {
	for _, r := range d.GetReplicas() {
		c, err := s.pool.Partition(s.grpcAddrOf(r.GetServerId()))
		if err != nil {
			continue
		}
		go func(c pb.PartitionServiceClient) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c.DeleteReplica(ctx, &pb.DeleteReplicaRequest{RangeId: d.GetRangeId()})
		}(c)
	}
	s.reports.forget(d.GetRangeId())
}

// move moves range id's replica from server from to server to: add the new
// replica (a non-voter until it caught up by snapshot, then a voter:
// addVoter), hand leadership away from the old one if needed, remove the
// old voter, delete its copy.
func (s *Server) move(ctx context.Context, id uint64, from, to, cause, reason string, figures map[string]float64) (*pb.RangeDescriptor, error) {
	start := time.Now()
	d, ok := s.rangeDesc(id)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	if err := s.moveRefusal(d, from, to); err != nil {
		return nil, err
	}
	// The membership change is the whole Raft group's, and the source's
	// replica is deleted whole: a range that shares its group leaves it.
	d, err := s.isolate(ctx, id, cause)
	if err != nil {
		return nil, err
	}
	from, err = s.moveSource(ctx, d, from)
	if err != nil {
		return nil, err
	}
	if from == to {
		return s.replaceInPlace(ctx, id, from, cause, reason, figures, start)
	}
	addrs := s.raftAddrs()
	if err := s.addAndHandOff(ctx, d, from, to, addrs); err != nil {
		return nil, err
	}
	cur, err := s.removeMember(ctx, id, from, false, addrs)
	if err != nil {
		return nil, err
	}
	s.moveEvent(d, from, to, cause, reason, figures, start)
	return cur, nil
}

// handOffLeadership moves range id's leadership (its Raft group's) off
// from, the server a move is about to remove, if from leads it: to a
// live, caught-up follower that may lead (the scheduler's rule: not
// silent, not slow); to to, the new voter still catching up, only if
// there is none, even if its disk is slow: refusing the move instead left
// the scheduler proposing it again every pass (review of session 10), and
// the slow-disk rule moves the leadership on once a follower may take it.
func (s *Server) handOffLeadership(ctx context.Context, id uint64, from, to string) error {
	if s.leaderOf(id) != from {
		return nil
	}
	target := s.rightLeader(id)
	if target == "" {
		target = to
	}
	if _, err := s.transfer(ctx, id, target); err != nil {
		// The map lists the new voter (addVoter recorded it).
		if _, err := s.transfer(ctx, id, to); err != nil {
			return fmt.Errorf("move leadership off %s: %w", from, err)
		}
	}
	return nil
}

// moveRefusal is why a move of d's replica from from to to cannot start
// (nil: it may).
func (s *Server) moveRefusal(d *pb.RangeDescriptor, from, to string) error {
	id := d.GetRangeId()
	switch {
	case to == "" || s.grpcAddrOf(to) == "":
		return fmt.Errorf("%w: %q", ErrBadTarget, to)
	case hasReplica(d, to) && (to != from || !s.reports.brokenOn(from, id)):
		// A move onto the same server only replaces a broken replica.
		return fmt.Errorf("%w: %s already holds a replica of range %d", ErrBadTarget, to, id)
	}
	if f := s.reports.frozenAt(id); f != 0 {
		// Its leader would refuse the membership change (a frozen range's
		// generation must not change before the merge reads it): refused
		// before a replica is created on to.
		return fmt.Errorf("%w: range %d is frozen for a merge (freeze at %d); it moves once the merge ends", ErrBusy, id, f)
	}
	return nil
}

// replaceInPlace replaces range id's broken replica on server by a new,
// empty one on the same server, when no other server can take it
// (scheduler reReplicate): the broken voter is removed first (the range
// keeps its healthy voters, which alone made its quorum anyway: the
// broken one could not vote), its replica deleted, and a new one added as
// a move adds one (addVoter: a non-voter that catches up by snapshot, then
// a voter).
func (s *Server) replaceInPlace(ctx context.Context, id uint64, server, cause, reason string, figures map[string]float64, start time.Time) (*pb.RangeDescriptor, error) {
	cur, err := s.replaceMember(ctx, id, server)
	if err != nil {
		return nil, err
	}
	s.moveEvent(cur, server, server, cause, reason, figures, start)
	return cur, nil
}

// replaceMember is replaceInPlace's membership change, a lone range's or
// a whole Raft group's (moveGroup): remove server's voter, delete its copy
// (the removal names the group: a group's goes whole), add a new replica
// there. Every range of the group is marked replaced (the group's broken
// copy reported each of them broken; one left marked would have the next
// pass replace the new replica again).
func (s *Server) replaceMember(ctx context.Context, id uint64, server string) (*pb.RangeDescriptor, error) {
	addrs := s.raftAddrs()
	removed, err := s.removeMember(ctx, id, server, false, addrs)
	if err != nil {
		return nil, err
	}
	// Now, not later: the new replica is created where the old one is.
	// (CreateReplica would also delete a removed leftover first.)
	if err := s.deleteReplica(ctx, server, id, removed); err != nil {
		return nil, fmt.Errorf("delete the broken replica on %s: %w", server, err)
	}
	s.reports.replacedInPlace(server, id, removed.GetGeneration())
	for _, peer := range s.groupPeers(id) {
		if pd, ok := s.rangeDesc(peer); ok {
			s.reports.replacedInPlace(server, peer, pd.GetGeneration())
		}
	}
	return s.addVoter(ctx, removed, server, addrs)
}

// deleteReplicaLater asks server, in the background, to delete its replica
// of the range removal removed it from (best effort: a server that is down
// then keeps an idle replica outside the range's configuration). The
// request may run long after (a stopped process runs it when it resumes),
// so it names removal's generation: a replica a later move re-created on
// the server is not deleted.
func (s *Server) deleteReplicaLater(server string, removal *pb.RangeDescriptor) {
	// A server cut off from the master misses the delete a move sends it:
	// tests arm this point to keep the moves' deletes (not replica GC's).
	if failpoint.Inject("master/delete-replica-later") != nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.deleteReplica(ctx, server, removal.GetRangeId(), removal)
	}()
}

// deleteReplica asks server to delete its replica of range id. removal,
// when not nil, is a descriptor of the range that does not list server:
// only a replica older than its generation is deleted (DeleteReplica's
// before_generation guard), and one in the Raft group it names takes that
// whole group with it (a stale copy of a group that lost the server while
// a span left it). It names the freezes of the range the recorded merge
// decisions abort: a replica that applied such a freeze and was removed
// before the unfreeze stays frozen, and without this would be kept as if
// a merge were to take it over.
func (s *Server) deleteReplica(ctx context.Context, server string, id uint64, removal *pb.RangeDescriptor) error {
	// A server cut off from the master keeps its removed replicas: tests
	// arm this point to keep the master from deleting any.
	if err := failpoint.Inject("master/delete-replica"); err != nil {
		return err
	}
	oc, err := s.pool.Partition(s.grpcAddrOf(server))
	if err != nil {
		return err
	}
	var aborted uint64
	s.fsm.read(func(st *state) { aborted = st.abortedThrough(id) })
	_, err = oc.DeleteReplica(ctx, &pb.DeleteReplicaRequest{
		RangeId:          id,
		BeforeGeneration: removal.GetGeneration(),
		GroupId:          removal.GetGroupId(),
		AbortedThrough:   aborted,
	})
	return err
}

// addVoter creates a replica of d on server to and adds it to d's Raft
// group as a non-voter; once it caught up (by snapshot), it promotes it to
// a voter.
//
// A voter added empty raised the quorum before it could vote for anything:
// a range of three that lost a member (or was moving one off a down
// server) then needed every live member and the newcomer's snapshot to
// commit, and a slow snapshot or one more failure stalled it (chaos seed
// 745: three of three live voters through two split votes). A non-voter
// counts toward no quorum while it catches up; the promotion then changes
// the quorum with a member that has the log. CockroachDB adds learners
// the same way.
//
// The new replica is given a join floor first: the leader's verified
// (term, commit index), taken now, after the master recorded every earlier
// removal of to from the range. The replica is empty, and an empty raft
// member votes for anyone and takes any leader's entries; with the floor
// it refuses a member that missed to's earlier removal, which still counts
// to in its stale configuration (chaos seed 243: a one-way cut, a move off
// and back onto the server within a second, two leaders on disjoint
// majorities; partitionserver/joinfloor.go).
func (s *Server) addVoter(ctx context.Context, d *pb.RangeDescriptor, to string, addrs map[string]string) (*pb.RangeDescriptor, error) {
	id := d.GetRangeId()
	c, err := s.pool.Partition(s.grpcAddrOf(to))
	if err != nil {
		return nil, err
	}
	floorTerm, floorIndex, voters, err := s.leaderFloorVoters(ctx, id, rangeclient.Options{})
	if err != nil {
		return nil, err
	}
	if err := addTargetRefusal(id, to, voters); err != nil {
		return nil, err
	}
	if floorTerm == 0 {
		// A leader's server older than the floor answers none: the
		// replica joins unprotected, as before the floor.
		joinFloorMissingTotal.Inc()
		s.logger.Warn("range leader gave no join floor: the new replica joins without one", "range", id, "to", to)
	}
	if _, err := c.CreateReplica(ctx, &pb.CreateReplicaRequest{Range: d, Bootstrap: false, RaftAddrs: addrs,
		JoinFloorTerm: floorTerm, JoinFloorIndex: floorIndex}); err != nil {
		return nil, fmt.Errorf("create replica on %s: %w", to, err)
	}
	err = failpoint.Inject("master/add/before-nonvoter")
	if err == nil {
		_, err = s.changeMembers(ctx, &pb.ChangeReplicasRequest{RangeId: id, AddServerId: to, RaftAddrs: addrs, AddMode: pb.AddMode_ADD_MODE_NONVOTER})
	}
	if err != nil {
		s.undoAdd(d, to, false) // while the caller holds the range
		return nil, fmt.Errorf("add non-voter %s: %w", to, err)
	}
	if err := failpoint.Inject("master/add/after-nonvoter"); err != nil {
		return nil, err // as if the master died here: nothing undone
	}
	s.awaitCaughtUp(ctx, id, to)
	resp, err := s.changeMembers(ctx, &pb.ChangeReplicasRequest{RangeId: id, AddServerId: to, RaftAddrs: addrs, AddMode: pb.AddMode_ADD_MODE_PROMOTE})
	if err != nil {
		// The operation ends here (its context ended, or the leader
		// refused): nothing else would promote the non-voter, and the
		// replica-set check would remove it only after its grace. Removed
		// now, while the caller still holds the range: a later move onto
		// the same server must not see this one's delete.
		s.undoAdd(d, to, true)
		return nil, fmt.Errorf("promote non-voter %s: %w", to, err)
	}
	// Every span of the group at its new generation, at once: the map
	// lists the new voter before the source's replica goes.
	return s.recordChange(resp)
}

// changeMembers asks range id's leader for req's membership change.
func (s *Server) changeMembers(ctx context.Context, req *pb.ChangeReplicasRequest) (*pb.ChangeReplicasResponse, error) {
	var out *pb.ChangeReplicasResponse
	err := s.onLeader(ctx, req.GetRangeId(), func(ctx context.Context, c pb.PartitionServiceClient) error {
		resp, err := c.ChangeReplicas(ctx, req)
		if err == nil {
			out = resp
		}
		return err
	})
	return out, err
}

// changedSpans are the descriptors a membership change's answer gives:
// every span of the range's Raft group (ChangeReplicasResponse.spans), or
// the range's alone from a server that answers no spans.
func changedSpans(resp *pb.ChangeReplicasResponse) []*pb.RangeDescriptor {
	if spans := resp.GetSpans(); len(spans) > 0 {
		return spans
	}
	return []*pb.RangeDescriptor{resp.GetRange()}
}

// recordChange records, in one UPDATE_RANGES, every span's descriptor a
// membership change answered (changedSpans): a group's siblings reach the
// map at their new generation now, not with their leader's next
// heartbeats. It returns the range's descriptor.
func (s *Server) recordChange(resp *pb.ChangeReplicasResponse) (*pb.RangeDescriptor, error) {
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: changedSpans(resp)}); err != nil {
		return nil, err
	}
	return resp.GetRange(), nil
}

// addTargetRefusal decides whether server to may be added to range id
// whose leader's Raft configuration has voters (nil: it may). The move
// picked to from the master's descriptor, which can be behind the
// configuration (a promotion whose record a failover lost): to may then
// already be a voter, whose replica the add's CreateReplica keeps or (a
// lagging one, below the descriptor's generation) deletes and re-creates
// empty, and a failed add's undoAdd deletes, wiping a voter's log and
// vote. The replica-set check records the configuration first; the move
// is asked again after it. Pure.
func addTargetRefusal(id uint64, to string, voters []string) error {
	if slices.Contains(voters, to) {
		return fmt.Errorf("%w: %s is already a voter of range %d's Raft configuration (the map's descriptor is behind it)", ErrBusy, to, id)
	}
	return nil
}

// undoAdd undoes what a failed add of server to to d's Raft group left
// there, best effort and bounded by its own 10 s (the add's context may be
// what ended). With nonvoter, the add's non-voter is removed from the
// group (only while it is a non-voter: a promotion whose answer was lost
// made it a voter, and the range then has a voter too many, which the
// replica-set check removes), its removal recorded and the replica
// deleted. Without, only the replica created there is deleted: in no
// configuration and no descriptor, and at the range's generation, the
// replica GC would take it only once the generation moved on (no
// generation guard: it is not listed, and the caller holds the range).
// A group of several spans is deleted whole there (undoRemoval).
func (s *Server) undoAdd(d *pb.RangeDescriptor, to string, nonvoter bool) {
	id := d.GetRangeId()
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	var err error
	if nonvoter {
		_, err = s.removeMember(ctx, id, to, true, s.raftAddrs())
	} else {
		err = s.deleteReplica(ctx, to, id, undoRemoval(d, len(s.groupPeers(id)) > 0))
	}
	if err != nil {
		s.logger.Warn("undoing a failed add", "range", id, "server", to, "nonvoter", nonvoter, "err", err)
	}
}

// undoRemoval is the removal a failed add's delete names on the server it
// was adding: none for a range alone in its Raft group (the delete takes
// its replica unguarded), and for one whose group serves other ranges
// (shared) the group and d's generation + 1. A joiner that restored the
// group's snapshot holds every span, and refuses to delete one span of it
// alone (errSpanOfGroup, what the unnamed delete asked for); named, the
// group goes whole. Its
// replica was created at d's generation, the configuration did not change
// (the add failed before its non-voter was in it), and the caller holds
// the group, so a guard one past it deletes exactly that replica. Pure.
func undoRemoval(d *pb.RangeDescriptor, shared bool) *pb.RangeDescriptor {
	if !shared {
		return nil
	}
	return &pb.RangeDescriptor{RangeId: d.GetRangeId(), GroupId: rangegroup.GroupOf(d), Generation: d.GetGeneration() + 1}
}

// removeMember removes server from range id's Raft group on its leader
// (only while it is a non-voter when onlyNonvoter), records the new
// generation of every span of the group (recordChange), and then deletes
// the server's replica in the background (the delete names that
// generation, so a replica a later move creates there is not deleted, and
// the group, so a copy of a group of several spans goes whole).
func (s *Server) removeMember(ctx context.Context, id uint64, server string, onlyNonvoter bool, addrs map[string]string) (*pb.RangeDescriptor, error) {
	resp, err := s.changeMembers(ctx, &pb.ChangeReplicasRequest{RangeId: id, RemoveServerId: server, RemoveOnlyNonvoter: onlyNonvoter, RaftAddrs: addrs})
	if err != nil {
		return nil, fmt.Errorf("remove %s: %w", server, err)
	}
	return s.recordRemoval(resp, server)
}

// recordRemoval records a removal of server (removeMember's answer) and
// deletes server's replica in the background.
func (s *Server) recordRemoval(resp *pb.ChangeReplicasResponse, server string) (*pb.RangeDescriptor, error) {
	cur, err := s.recordChange(resp)
	if err != nil {
		return nil, err
	}
	s.deleteReplicaLater(server, cur)
	return cur, nil
}

func (s *Server) moveEvent(d *pb.RangeDescriptor, from, to, cause, reason string, figures map[string]float64, start time.Time) {
	kind := pb.EventKind_EVENT_KIND_MOVE
	if cause == causeReReplicate {
		kind = pb.EventKind_EVENT_KIND_RE_REPLICATE
	}
	s.event(&pb.Event{
		Kind: kind, Table: d.GetTable(), RangeIds: []uint64{d.GetRangeId()}, Servers: []string{from, to},
		Figures: figures, Cause: cause, DurationSeconds: time.Since(start).Seconds(),
		Message: fmt.Sprintf("moved range %d from %s to %s (%s)", d.GetRangeId(), from, to, reason),
	})
	opSeconds.WithLabelValues("move").Observe(time.Since(start).Seconds())
}

// moveCatchUpWait bounds how long an add waits for its non-voter to catch
// up before it promotes it.
const moveCatchUpWait = 10 * time.Second

// awaitCaughtUp runs between an add's two configuration changes: it waits
// (up to moveCatchUpWait) until the non-voter to has applied what the
// leader had. A member promoted, or the old voter removed, while the new
// one was still taking its snapshot left the range one failure from no
// leader: chaos seed 69, range 1 moved from ps2 to ps4 (restarted 0.5 s
// before); ps2 was removed 0.1 s after ps4 was added, the leader ps1 was
// cut off 0.4 s later, and ps3 and ps4, which had just installed a
// snapshot older than its own admission ("not part of stable
// configuration, aborting election"), needed 2.3 s to elect a leader. The
// wait is longer than when it ran after a voter's add (5 s): a non-voter
// costs the range no quorum while it waits. After it, the add goes on even
// if the non-voter is behind, as before.
func (s *Server) awaitCaughtUp(ctx context.Context, id uint64, to string) {
	wctx, cancel := context.WithTimeout(ctx, moveCatchUpWait)
	defer cancel()
	newVoter := &pb.RangeDescriptor{RangeId: id, Replicas: []*pb.Replica{{ServerId: to}}}
	for wctx.Err() == nil {
		index, err := s.appliedOn(wctx, s.leaderOf(id), id)
		if err == nil {
			err = s.waitApplied(wctx, newVoter, index)
		}
		if err == nil {
			return
		}
		select {
		case <-wctx.Done():
			s.logger.Warn("promoting the non-voter before it caught up", "range", id, "to", to, "err", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// moveSource asks every replica of d whether it answers and returns the
// voter a move removes: from, or, when the caller left it to the master
// (""), removalChoice's. It refuses the move (ErrReplicaDown) when another
// replica does not answer (addRefusal).
func (s *Server) moveSource(ctx context.Context, d *pb.RangeDescriptor, from string) (string, error) {
	unanswering := s.unanswering(ctx, d)
	if from == "" {
		from = removalChoice(s.busiestReplica(d), s.leaderOf(d.GetRangeId()), d, unanswering)
	}
	if !hasReplica(d, from) {
		return "", fmt.Errorf("%w: %s holds no replica of range %d", ErrBadSource, from, d.GetRangeId())
	}
	return from, addRefusal(d, from, unanswering)
}

// addRefusal says why a move must not add its new voter to d now (nil: it
// may). Adding a fourth voter raises the quorum to three: with a replica
// other than the one the move removes down, the range needs every live
// voter to commit, and nothing at all if one more fails (chaos seed 77,
// before voters were added as non-voters first: a balancing move added ps2
// to range 2 0.2 s after ps3, one of its voters, was killed, and ps2 had
// no replica yet: no quorum of four until ps3 was back, 2.9 s). The
// promotion of a caught-up non-voter still raises the quorum so. The down
// replica is the one to replace (removalChoice), or the move waits until
// it answers.
func addRefusal(d *pb.RangeDescriptor, from string, unanswering map[string]bool) error {
	for _, rep := range d.GetReplicas() {
		if id := rep.GetServerId(); id != from && unanswering[id] {
			return fmt.Errorf("%w: range %d on %s (the move would remove %s)", ErrReplicaDown, d.GetRangeId(), id, from)
		}
	}
	return nil
}

// removalChoice is the replica a move whose source the master chooses
// removes: one whose server did not answer (not the leader's), if there is
// one, else busiest. Removing a live, caught-up replica while another one
// is down or cut off leaves the range with no spare: the down one keeps
// the configuration it had (without the new voter) until it is caught up,
// and refuses the new voter's votes, so when the leader fails next the
// range has no leader although two of its three voters are up (chaos
// seeds 27 and 32: a move right after a kill or a cut-off removed the
// healthy ps2 and kept the dead ps3; 3.8 - 7.5 s without a leader when ps1
// failed next). Removing the unreachable replica instead heals the range.
func removalChoice(busiest, leader string, d *pb.RangeDescriptor, unanswering map[string]bool) string {
	if unanswering[busiest] {
		return busiest
	}
	for _, rep := range d.GetReplicas() {
		if id := rep.GetServerId(); id != leader && unanswering[id] {
			return id
		}
	}
	return busiest
}

// unanswering asks every replica of d for its applied index
// (freezeCheckTimeout each, at once) and returns the servers that did not
// answer.
func (s *Server) unanswering(ctx context.Context, d *pb.RangeDescriptor) map[string]bool {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]bool{}
	)
	for _, rep := range d.GetReplicas() {
		wg.Add(1)
		go func(server string) {
			defer wg.Done()
			qctx, cancel := context.WithTimeout(ctx, freezeCheckTimeout)
			defer cancel()
			if _, err := s.appliedOn(qctx, server, d.GetRangeId()); err != nil {
				mu.Lock()
				out[server] = true
				mu.Unlock()
			}
		}(rep.GetServerId())
	}
	wg.Wait()
	return out
}

// busiestReplica picks the replica (not the leader) on the server holding
// the most replicas.
func (s *Server) busiestReplica(d *pb.RangeDescriptor) string {
	counts := map[string]int{}
	s.fsm.read(func(st *state) {
		for _, r := range st.ranges {
			for _, rep := range r.GetReplicas() {
				counts[rep.GetServerId()]++
			}
		}
	})
	leader := s.leaderOf(d.GetRangeId())
	reps := append([]*pb.Replica(nil), d.GetReplicas()...)
	sort.Slice(reps, func(i, j int) bool { return counts[reps[i].GetServerId()] > counts[reps[j].GetServerId()] })
	for _, r := range reps {
		if r.GetServerId() != leader {
			return r.GetServerId()
		}
	}
	return ""
}

// Causes recorded in events.
const (
	causePolicy      = "policy"
	causeOperator    = "operator"
	causeReReplicate = "re-replicate"
	causeRecovery    = "recovery"
	// causeSlowDisk: a leadership moved off a server whose disk commits
	// are slow (scheduler.RuleSlowDiskLeader).
	causeSlowDisk = "slow-disk"
	// causeClockSkew: a leadership moved off a server whose clock is off
	// (scheduler.RuleClockSkewLeader).
	causeClockSkew = "clock-skew"
	// causeDiskFull: a leadership or a replica moved off a server whose
	// disk is under its reserve (scheduler.RuleDiskFullLeader, ...Replica).
	causeDiskFull = "disk-full"
)

func hasReplica(d *pb.RangeDescriptor, server string) bool {
	for _, r := range d.GetReplicas() {
		if r.GetServerId() == server {
			return true
		}
	}
	return false
}

// withReason is the suffix of an event message naming why the operation
// ran (a policy's reason and rule), as leader transfers and moves carry it.
func withReason(reason string) string {
	if reason = strings.TrimSpace(reason); reason == "" {
		return ""
	}
	return " (" + reason + ")"
}
