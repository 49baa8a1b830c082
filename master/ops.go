package master

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/failpoint"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// Errors of the operations.
var (
	ErrRangeNotFound = errors.New("master: range not found")
	ErrBusy          = errors.New("master: an operation on the range is in flight")
	ErrNoNeighbour   = errors.New("master: range has no right neighbour")
	ErrBadTarget     = errors.New("master: bad target server")
)

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

func (s *Server) leaderOf(id uint64) string {
	s.softMu.Lock()
	defer s.softMu.Unlock()
	return s.leaders[id]
}

func (s *Server) setLeader(id uint64, server string) {
	s.softMu.Lock()
	changed := s.leaders[id] != server
	s.leaders[id] = server
	s.softMu.Unlock()
	if changed {
		s.bump()
	}
}

// onLeader runs fn against the range's leader, following NOT_LEADER hints
// and trying every replica until it succeeds or ctx ends.
func (s *Server) onLeader(ctx context.Context, id uint64, fn func(ctx context.Context, c pb.PartitionServiceClient) error) error {
	var last error
	for attempt := 0; ctx.Err() == nil; attempt++ {
		d, ok := s.rangeDesc(id)
		if !ok {
			return fmt.Errorf("%w: %d", ErrRangeNotFound, id)
		}
		candidates := []string{}
		if l := s.leaderOf(id); l != "" {
			candidates = append(candidates, l)
		}
		for _, r := range d.GetReplicas() {
			candidates = append(candidates, r.GetServerId())
		}
		for _, server := range candidates {
			c, err := s.pool.Partition(s.grpcAddrOf(server))
			if err != nil {
				last = err
				continue
			}
			err = fn(ctx, c)
			if err == nil {
				s.setLeader(id, server)
				return nil
			}
			last = err
			info := rpcerr.Parse(err)
			if info.Reason == rpcerr.ReasonNotLeader || info.Code == codes.Unavailable || info.Reason == rpcerr.ReasonRangeNotFound {
				if l := info.Metadata[rpcerr.MetaLeader]; l != "" {
					s.setLeader(id, l)
				}
				continue
			}
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(min(attempt+1, 10)) * 20 * time.Millisecond):
		}
	}
	if last == nil {
		last = ctx.Err()
	}
	return last
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

// claim marks ranges busy; it fails if one already is.
func (s *Server) claim(ids ...uint64) error {
	s.softMu.Lock()
	defer s.softMu.Unlock()
	for _, id := range ids {
		if s.busy[id] {
			return fmt.Errorf("%w: %d", ErrBusy, id)
		}
	}
	for _, id := range ids {
		s.busy[id] = true
	}
	return nil
}

func (s *Server) release(ids ...uint64) {
	s.softMu.Lock()
	for _, id := range ids {
		delete(s.busy, id)
	}
	s.softMu.Unlock()
}

// split splits range id at key (or at its size median when key is empty)
// and moves the new right range's leadership to the least-loaded replica.
func (s *Server) split(ctx context.Context, id uint64, key, cause string, figures map[string]float64) (*pb.SplitResponse, error) {
	start := time.Now()
	d, ok := s.rangeDesc(id)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	if key == "" {
		err := s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
			resp, err := c.SplitKey(ctx, &pb.SplitKeyRequest{RangeId: id})
			if err == nil && resp.GetOk() {
				key = resp.GetSplitKey()
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, fmt.Errorf("%w: range %d has no split key", ErrBadCommand, id)
		}
	}
	res, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_ALLOCATE_RANGE_ID, &pb.AllocateRangeIDCommand{})
	if err != nil {
		return nil, err
	}
	// The new right range is led from the start by the replica whose server
	// leads the least load, so the load halves without a later transfer.
	leftLeader := s.leaderOf(id)
	preferred := s.coolestReplica(d, leftLeader)
	if err := failpoint.Inject("master/split/before-split"); err != nil {
		return nil, err
	}
	var resp *pb.SplitRangeResponse
	err = s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		var err error
		resp, err = c.SplitRange(ctx, &pb.SplitRangeRequest{RangeId: id, SplitKey: key, NewRangeId: res.rangeID, PreferredLeader: preferred})
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := failpoint.Inject("master/split/after-split"); err != nil {
		return nil, err
	}
	leftLeader = s.leaderOf(id)
	splitDone := time.Since(start)
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{resp.GetLeft(), resp.GetRight()}}); err != nil {
		return nil, err
	}
	right := resp.GetRight()
	if preferred == "" {
		preferred = leftLeader
	}
	s.setLeader(right.GetRangeId(), preferred)
	leaderAt := s.awaitLeader(ctx, right, preferred, 2*time.Second)
	if got := s.leaderOf(right.GetRangeId()); got != preferred && preferred != "" {
		if err := s.transfer(ctx, right.GetRangeId(), preferred); err != nil {
			s.logger.Warn("moving the new range's leadership failed", "range", right.GetRangeId(), "to", preferred, "err", err)
		}
		leaderAt = time.Since(start) - splitDone
	}
	moved := leaderAt
	if figures == nil {
		figures = map[string]float64{}
	}
	figures["split_seconds"] = splitDone.Seconds()
	figures["leader_move_seconds"] = moved.Seconds()
	s.event(&pb.Event{
		Kind: pb.EventKind_EVENT_KIND_SPLIT, Table: d.GetTable(), RangeIds: []uint64{id, right.GetRangeId()},
		Servers: []string{leftLeader, s.leaderOf(right.GetRangeId())}, Figures: figures, Cause: cause,
		Message:         fmt.Sprintf("split range %d at %q: [%q, %q) + range %d [%q, %q)", id, key, resp.GetLeft().GetStart(), resp.GetLeft().GetEnd(), right.GetRangeId(), right.GetStart(), right.GetEnd()),
		DurationSeconds: time.Since(start).Seconds(),
	})
	opSeconds.WithLabelValues("split").Observe(time.Since(start).Seconds())
	return &pb.SplitResponse{Left: resp.GetLeft(), Right: right}, nil
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

// coolestReplica returns the replica of d, other than avoid, whose server
// leads the least load (ties: fewest leaders).
func (s *Server) coolestReplica(d *pb.RangeDescriptor, avoid string) string {
	load := map[string]float64{}
	count := map[string]int{}
	s.softMu.Lock()
	for id, l := range s.leaders {
		count[l]++
		if ld, ok := s.loads[id]; ok {
			load[l] += ld.GetEntitiesPerSec()
		}
	}
	s.softMu.Unlock()
	best := ""
	for _, r := range d.GetReplicas() {
		id := r.GetServerId()
		if id == avoid || !s.alive(id) {
			continue
		}
		if best == "" || load[id] < load[best] || (load[id] == load[best] && count[id] < count[best]) {
			best = id
		}
	}
	return best
}

func (s *Server) alive(server string) bool {
	s.softMu.Lock()
	defer s.softMu.Unlock()
	t, ok := s.lastSeen[server]
	return ok && time.Since(t) < s.cfg.ServerTimeout
}

// transfer moves a range's leadership to server to.
func (s *Server) transfer(ctx context.Context, id uint64, to string) error {
	d, ok := s.rangeDesc(id)
	if !ok {
		return fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	if !hasReplica(d, to) {
		return fmt.Errorf("%w: %s holds no replica of range %d", ErrBadTarget, to, id)
	}
	addr := s.raftAddrs()[to]
	err := s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		_, err := c.TransferLeader(ctx, &pb.TransferLeaderRequest{RangeId: id, ToServerId: to, ToRaftAddr: addr})
		return err
	})
	if err != nil {
		return err
	}
	s.setLeader(id, to)
	return nil
}

// merge merges range id with its right neighbour R without moving a row
// through Raft (CockroachDB's merge protocol, on a shared state file):
//
//  1. co-locate: R's replicas move onto L's servers, so every server of L
//     holds R's rows in the same bbolt file;
//  2. freeze (subsume): R's log gets Freeze; R serves nothing from then on,
//     and the master waits until every replica of R has applied it, so R's
//     rows are final on every server;
//  3. merge: L's log gets Merge{R, freeze index}; each L replica widens its
//     span over R's keys and drops R's state in one local transaction;
//  4. retire: R leaves the map and its groups stop.
//
// Every step is idempotent: a master that dies before the freeze leaves two
// healthy ranges (co-location is just placement), and a frozen range seen
// by any master is merged into its left neighbour at once (resumeMerges).
func (s *Server) merge(ctx context.Context, id uint64, cause string, figures map[string]float64) (*pb.RangeDescriptor, error) {
	start := time.Now()
	left, ok := s.rangeDesc(id)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	right := s.rightNeighbour(left)
	if right == nil {
		return nil, fmt.Errorf("%w: %d", ErrNoNeighbour, id)
	}
	right, err := s.colocate(ctx, left, right, cause)
	if err != nil {
		return nil, fmt.Errorf("co-locate range %d with %d: %w", right.GetRangeId(), id, err)
	}
	if err := failpoint.Inject("master/merge/after-colocate"); err != nil {
		return nil, err
	}
	frozenAt := time.Now()
	var freeze *pb.FreezeRangeResponse
	err = s.onLeader(ctx, right.GetRangeId(), func(ctx context.Context, c pb.PartitionServiceClient) error {
		var err error
		freeze, err = c.FreezeRange(ctx, &pb.FreezeRangeRequest{RangeId: right.GetRangeId()})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("freeze range %d: %w", right.GetRangeId(), err)
	}
	frozen := time.Now()
	if err := s.waitApplied(ctx, freeze.GetRange(), freeze.GetFreezeIndex()); err != nil {
		return nil, fmt.Errorf("wait for range %d's freeze on every replica: %w", right.GetRangeId(), err)
	}
	caughtUp := time.Now()
	if err := failpoint.Inject("master/merge/after-freeze"); err != nil {
		return nil, err
	}
	var merged *pb.RangeDescriptor
	err = s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		resp, err := c.MergeRange(ctx, &pb.MergeRangeRequest{RangeId: id, Right: freeze.GetRange(), RightFreezeIndex: freeze.GetFreezeIndex()})
		if err == nil {
			merged = resp.GetRange()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("merge range %d into %d: %w", right.GetRangeId(), id, err)
	}
	mergedAt := time.Now()
	if err := failpoint.Inject("master/merge/after-merge"); err != nil {
		return nil, err
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_RANGE, &pb.RemoveRangeCommand{RangeId: right.GetRangeId(), AbsorbedBy: merged}); err != nil {
		return nil, err
	}
	removed := time.Now()
	if err := failpoint.Inject("master/merge/after-remove"); err != nil {
		return nil, err
	}
	pause := removed.Sub(frozenAt)
	s.retire(right)
	if figures == nil {
		figures = map[string]float64{}
	}
	figures["write_pause_seconds"] = pause.Seconds()
	figures["freeze_seconds"] = frozen.Sub(frozenAt).Seconds()
	figures["freeze_applied_everywhere_seconds"] = caughtUp.Sub(frozen).Seconds()
	figures["merge_command_seconds"] = mergedAt.Sub(caughtUp).Seconds()
	figures["map_update_seconds"] = removed.Sub(mergedAt).Seconds()
	s.event(&pb.Event{
		Kind: pb.EventKind_EVENT_KIND_MERGE, Table: left.GetTable(), RangeIds: []uint64{id, right.GetRangeId()},
		Figures: figures, Cause: cause, DurationSeconds: time.Since(start).Seconds(),
		Message: fmt.Sprintf("merged range %d [%q, %q) into range %d, now [%q, %q)", right.GetRangeId(), right.GetStart(), right.GetEnd(), id, merged.GetStart(), merged.GetEnd()),
	})
	opSeconds.WithLabelValues("merge").Observe(time.Since(start).Seconds())
	mergePauseSeconds.Observe(pause.Seconds())
	return merged, nil
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
		var missing, extra []string
		for _, rep := range l.GetReplicas() {
			if !hasReplica(r, rep.GetServerId()) {
				missing = append(missing, rep.GetServerId())
			}
		}
		for _, rep := range r.GetReplicas() {
			if !hasReplica(l, rep.GetServerId()) {
				extra = append(extra, rep.GetServerId())
			}
		}
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
			c, err := s.pool.Partition(s.grpcAddrOf(rep.GetServerId()))
			if err == nil {
				var resp *pb.RangeInfoResponse
				resp, err = c.RangeInfo(ctx, &pb.RangeInfoRequest{RangeId: d.GetRangeId()})
				if err == nil && resp.GetStatus().GetAppliedIndex() >= index {
					break
				}
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
	s.softMu.Lock()
	delete(s.leaders, d.GetRangeId())
	delete(s.loads, d.GetRangeId())
	delete(s.frozen, d.GetRangeId())
	delete(s.history, d.GetRangeId())
	s.softMu.Unlock()
}

// move moves range id's replica from server from to server to: add the new
// voter (it receives a snapshot), hand leadership away from the old one if
// needed, remove the old voter, delete its copy.
func (s *Server) move(ctx context.Context, id uint64, from, to, cause, reason string, figures map[string]float64) (*pb.RangeDescriptor, error) {
	start := time.Now()
	d, ok := s.rangeDesc(id)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	if to == "" || hasReplica(d, to) || s.grpcAddrOf(to) == "" {
		return nil, fmt.Errorf("%w: %q", ErrBadTarget, to)
	}
	if from == "" {
		// The replica on the server with the most replicas, not the leader.
		from = s.busiestReplica(d)
	}
	if !hasReplica(d, from) {
		return nil, fmt.Errorf("%w: %s holds no replica of range %d", ErrBadTarget, from, id)
	}
	addrs := s.raftAddrs()
	c, err := s.pool.Partition(s.grpcAddrOf(to))
	if err != nil {
		return nil, err
	}
	if _, err := c.CreateReplica(ctx, &pb.CreateReplicaRequest{Range: d, Bootstrap: false, RaftAddrs: addrs}); err != nil {
		return nil, fmt.Errorf("create replica on %s: %w", to, err)
	}
	var cur *pb.RangeDescriptor
	err = s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		resp, err := c.ChangeReplicas(ctx, &pb.ChangeReplicasRequest{RangeId: id, AddServerId: to, RaftAddrs: addrs})
		if err == nil {
			cur = resp.GetRange()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("add voter %s: %w", to, err)
	}
	if s.leaderOf(id) == from {
		if err := s.transfer(ctx, id, to); err != nil {
			// Refresh the descriptor so transfer sees the new voter.
			s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{cur}})
			if err := s.transfer(ctx, id, to); err != nil {
				return nil, fmt.Errorf("move leadership off %s: %w", from, err)
			}
		}
	}
	err = s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		resp, err := c.ChangeReplicas(ctx, &pb.ChangeReplicasRequest{RangeId: id, RemoveServerId: from, RaftAddrs: addrs})
		if err == nil {
			cur = resp.GetRange()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("remove voter %s: %w", from, err)
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{cur}}); err != nil {
		return nil, err
	}
	if oc, err := s.pool.Partition(s.grpcAddrOf(from)); err == nil {
		go func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			oc.DeleteReplica(dctx, &pb.DeleteReplicaRequest{RangeId: id})
		}()
	}
	kind := pb.EventKind_EVENT_KIND_MOVE
	if cause == causeReReplicate {
		kind = pb.EventKind_EVENT_KIND_RE_REPLICATE
	}
	s.event(&pb.Event{
		Kind: kind, Table: d.GetTable(), RangeIds: []uint64{id}, Servers: []string{from, to},
		Figures: figures, Cause: cause, DurationSeconds: time.Since(start).Seconds(),
		Message: fmt.Sprintf("moved range %d from %s to %s (%s)", id, from, to, reason),
	})
	opSeconds.WithLabelValues("move").Observe(time.Since(start).Seconds())
	return cur, nil
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
)

// runOp executes a planned operation.
func (s *Server) runOp(o op) {
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	var err error
	switch o.kind {
	case opSplit:
		key := o.key
		if o.bySize {
			key = ""
		}
		_, err = s.split(ctx, o.rangeID, key, causePolicy, o.figures)
	case opMerge:
		_, err = s.merge(ctx, o.rangeID, causePolicy, o.figures)
	case opMove:
		cause := causePolicy
		if o.reason != "" && len(o.reason) >= 12 && o.reason[:12] == "re-replicate" {
			cause = causeReReplicate
		}
		_, err = s.move(ctx, o.rangeID, o.from, o.to, cause, o.reason, o.figures)
	case opTransfer:
		start := time.Now()
		err = s.transfer(ctx, o.rangeID, o.to)
		if err == nil {
			d, _ := s.rangeDesc(o.rangeID)
			s.event(&pb.Event{
				Kind: pb.EventKind_EVENT_KIND_LEADER_TRANSFER, Table: d.GetTable(), RangeIds: []uint64{o.rangeID},
				Servers: []string{o.from, o.to}, Figures: o.figures, Cause: causePolicy,
				DurationSeconds: time.Since(start).Seconds(), Message: fmt.Sprintf("moved leadership of range %d from %s to %s (%s)", o.rangeID, o.from, o.to, o.reason),
			})
		}
	}
	if err != nil {
		s.logger.Warn("operation failed", "op", o.kind.String(), "range", o.rangeID, "err", err)
		opFailuresTotal.WithLabelValues(o.kind.String()).Inc()
	}
}

// policyLoop evaluates the policies on the leader and starts what they
// plan, at most MaxInFlight at a time.
func (s *Server) policyLoop() {
	t := time.NewTicker(s.cfg.Policy.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if s.ready() != nil {
			continue
		}
		// Finishing a half-done merge is recovery, not policy: it runs
		// even with the policies off.
		s.resumeMerges()
		if !s.cfg.Policy.Enabled {
			continue
		}
		v := s.view()
		s.softMu.Lock()
		slots := s.cfg.Policy.MaxInFlight - s.inflight
		s.softMu.Unlock()
		if slots <= 0 {
			continue
		}
		for _, o := range plan(s.cfg.Policy, v, slots) {
			if o.balance {
				s.softMu.Lock()
				s.lastBalance = time.Now()
				s.softMu.Unlock()
			}
			ids := []uint64{o.rangeID}
			if o.kind == opMerge {
				if d, ok := s.rangeDesc(o.rangeID); ok {
					if r := s.rightNeighbour(d); r != nil {
						ids = append(ids, r.GetRangeId())
					}
				}
			}
			if s.claim(ids...) != nil {
				continue
			}
			s.softMu.Lock()
			s.inflight++
			s.softMu.Unlock()
			go func(o op, ids []uint64) {
				defer func() {
					s.release(ids...)
					s.softMu.Lock()
					s.inflight--
					s.softMu.Unlock()
				}()
				s.runOp(o)
			}(o, ids)
		}
	}
}

// resumeMerges finishes merges a previous master left half done: a frozen
// range is merged into its left neighbour.
func (s *Server) resumeMerges() {
	s.softMu.Lock()
	var frozen []uint64
	for id, f := range s.frozen {
		if f && !s.busy[id] {
			frozen = append(frozen, id)
		}
	}
	s.softMu.Unlock()
	for _, id := range frozen {
		d, ok := s.rangeDesc(id)
		if !ok {
			s.softMu.Lock()
			delete(s.frozen, id)
			s.softMu.Unlock()
			continue
		}
		left := s.leftNeighbour(d)
		if left == nil || s.claim(left.GetRangeId(), id) != nil {
			continue
		}
		go func(l, r uint64) {
			defer s.release(l, r)
			ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
			defer cancel()
			if _, err := s.merge(ctx, l, causeRecovery, nil); err != nil {
				s.logger.Warn("resuming merge failed", "left", l, "right", r, "err", err)
			}
		}(left.GetRangeId(), id)
	}
}

// view builds the policies' input from the map and the soft state.
func (s *Server) view() clusterView {
	v := clusterView{now: time.Now(), live: map[string]bool{}, down: map[string]time.Time{}, busy: map[uint64]bool{}}
	var ranges []*pb.RangeDescriptor
	s.fsm.read(func(st *state) {
		for _, r := range st.ranges {
			ranges = append(ranges, r)
		}
		for id := range st.servers {
			v.servers = append(v.servers, id)
		}
	})
	sort.Strings(v.servers)
	sort.Slice(ranges, func(i, j int) bool {
		if ranges[i].GetTableId() != ranges[j].GetTableId() {
			return ranges[i].GetTableId() < ranges[j].GetTableId()
		}
		return ranges[i].GetStart() < ranges[j].GetStart()
	})
	s.softMu.Lock()
	defer s.softMu.Unlock()
	v.lastBalance = s.lastBalance
	for _, id := range v.servers {
		t, ok := s.lastSeen[id]
		if ok && v.now.Sub(t) < s.cfg.ServerTimeout {
			v.live[id] = true
		} else if ok {
			v.down[id] = t
		}
	}
	for id := range s.busy {
		v.busy[id] = true
	}
	for _, d := range ranges {
		h := s.history[d.GetRangeId()]
		rv := &rangeView{desc: d, leader: s.leaders[d.GetRangeId()], load: s.loads[d.GetRangeId()], frozen: s.frozen[d.GetRangeId()]}
		if h != nil {
			rv.hotSince, rv.coldSince = h.hotSince, h.coldSince
		}
		v.ranges = append(v.ranges, rv)
	}
	return v
}

// loadHistory remembers since when a range's load stayed above the split
// threshold or below the merge threshold.
type loadHistory struct {
	hotSince, coldSince time.Time
	lastThrottleEvent   time.Time
}

// observeLoad updates the history with a leader's report. Called with
// softMu held.
func (s *Server) observeLoad(id uint64, l *pb.RangeLoad, now time.Time) {
	h := s.history[id]
	if h == nil {
		h = &loadHistory{}
		s.history[id] = h
	}
	e := l.GetEntitiesPerSec()
	if e >= s.cfg.Policy.SplitLoad {
		if h.hotSince.IsZero() {
			h.hotSince = now
		}
	} else {
		h.hotSince = time.Time{}
	}
	if e <= s.cfg.Policy.MergeLoad {
		if h.coldSince.IsZero() {
			h.coldSince = now
		}
	} else {
		h.coldSince = time.Time{}
	}
}
