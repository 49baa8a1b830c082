package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// joinStep is what to do about an assigned range whose placement is Join
// (the map lists this server, which hosts no replica of it) once the
// master answered JoinFloor.
type joinStep int

const (
	// joinCreate: create the replica empty with the answer's descriptor
	// and floor (a zero floor when the range's leader runs a server older
	// than the floor: nobody can give one).
	joinCreate joinStep = iota
	// joinUnprotected: the master is older than JoinFloor; create the
	// replica from the heartbeat's descriptor without a floor, as before.
	joinUnprotected
	// joinSkip: the map no longer lists this server in the range (or the
	// range is gone): create nothing.
	joinSkip
	// joinRetry: no floor now (the leader is unreachable, cannot confirm
	// its leadership with a quorum, or the master is): create nothing;
	// the next reconcile asks again.
	joinRetry
)

func (j joinStep) String() string {
	return [...]string{"create", "unprotected", "skip", "retry"}[j]
}

// planJoin decides a Join placement from the master's JoinFloor answer.
// Pure.
//
// The replica must not exist before it has its floor: created empty and
// floorless it would grant its vote to any candidate, among them one that
// missed this server's earlier removal or the writes acknowledged before
// its replica was lost (reliability.md 19), and nothing here can tell that
// candidate apart. Waiting costs only this replica: the others keep their
// quorum without it, unless another member is down as well, and then a
// vote from an empty member is exactly the unsafe one.
func planJoin(resp *pb.JoinFloorResponse, err error, self string) (joinStep, joinFloor, *pb.RangeDescriptor) {
	if err != nil {
		switch rpcerr.Parse(err).Code {
		case codes.Unimplemented:
			return joinUnprotected, joinFloor{}, nil
		case codes.FailedPrecondition, codes.NotFound:
			return joinSkip, joinFloor{}, nil
		}
		return joinRetry, joinFloor{}, nil
	}
	d := resp.GetRange()
	if !listed(d, self) {
		return joinSkip, joinFloor{}, nil
	}
	return joinCreate, joinFloor{resp.GetFloorTerm(), resp.GetFloorIndex()}, d
}

// joinFloorWait bounds one JoinFloor call: the master's onLeader retries
// the range's replicas until then, so a leader reachable again within it
// answers in the same call.
const joinFloorWait = 5 * time.Second

// maxJoinsInFlight bounds the JoinFloor calls one server runs at a time.
const maxJoinsInFlight = 32

// joinRetryFirst and joinRetryMax bound the pause before a range whose
// JoinFloor call gave no floor (joinRetry) is asked for again: 1 s, then
// 2 s. Any pause longer than a reconcile pass (a heartbeat, 500 ms) frees
// the slots of ranges that keep failing for the others; a longer one
// delays the replica's creation after its range heals by as much, while
// its range may have no quorum without it (8 s measured 6.2 s from the
// heal to the replica caught up in TestMapRecreatedMemberRefusesStaleMember,
// against 0.2 s without a pause). The master's side of a call is bounded
// (joinFloorSearch), so asking every 2 s costs little.
const (
	joinRetryFirst = time.Second
	joinRetryMax   = 2 * time.Second
)

// joinTracker is the bookkeeping of the Join placements waiting for their
// floor: the calls in flight (one per range, at most maxJoinsInFlight),
// and, per range whose last call gave no floor, when to ask again.
//
// Without the pause, reconcile, which walks its assignments in the same
// order each pass, started the same first 32 ranges again each pass: a
// server that lost its data directory with 32 leaderless ranges among the
// first of its assignments (each holding its slot for the master's
// leader search) never asked for its healthy ranges' floors. A range in
// its pause is skipped before the cap is checked, so it leaves its slot
// to the others.
type joinTracker struct {
	mu        sync.Mutex
	inFlight  map[uint64]bool
	retry     map[uint64]joinRetryState
	lastSweep time.Time
}

// joinRetryState is a range's pause after calls that gave no floor.
type joinRetryState struct {
	notBefore time.Time
	delay     time.Duration
	failures  int
}

// begin reports whether a JoinFloor call for range id may start at now,
// and if so marks it in flight: not while one is, nor during the range's
// pause, nor with maxJoinsInFlight calls running.
func (j *joinTracker) begin(id uint64, now time.Time) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.inFlight == nil {
		j.inFlight, j.retry = map[uint64]bool{}, map[uint64]joinRetryState{}
	}
	j.sweep(now)
	if j.inFlight[id] {
		return false
	}
	if r, ok := j.retry[id]; ok && now.Before(r.notBefore) {
		return false
	}
	if len(j.inFlight) >= maxJoinsInFlight {
		// A server that lost its data directory misses every replica at
		// once: the leaders' quorum rounds go out a batch at a time, and
		// the next reconcile starts the rest.
		return false
	}
	j.inFlight[id] = true
	return true
}

// end records that range id's call finished at now; retry: it gave no
// floor (joinRetry), and the range is paused, doubling from
// joinRetryFirst to joinRetryMax. It returns the number of such calls in a
// row (0 after any other outcome, which forgets the pause).
func (j *joinTracker) end(id uint64, retry bool, now time.Time) (failures int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.inFlight, id)
	if !retry {
		delete(j.retry, id)
		return 0
	}
	r := j.retry[id]
	r.delay = min(max(2*r.delay, joinRetryFirst), joinRetryMax)
	r.notBefore = now.Add(r.delay)
	r.failures++
	j.retry[id] = r
	return r.failures
}

// sweep forgets pauses long over: their range was not asked for again
// (created by another path, no longer assigned here). Forgetting one only
// restarts its backoff. Called with j.mu held.
func (j *joinTracker) sweep(now time.Time) {
	if now.Sub(j.lastSweep) < time.Minute {
		return
	}
	j.lastSweep = now
	for id, r := range j.retry {
		if now.Sub(r.notBefore) > time.Minute {
			delete(j.retry, id)
		}
	}
}

// busy reports the calls in flight and the ranges remembered paused.
func (j *joinTracker) busy() (inFlight, paused int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.inFlight), len(j.retry)
}

// joinAssigned creates, in the background, the empty replica of assigned
// range d that reconcile's Join placement asks for, once the master has
// given it a join floor (master JoinFloor). One call per range runs at a
// time; a call that creates nothing leaves the placement Join, and a later
// reconcile starts another (after a pause when it gave no floor:
// joinTracker). Other ranges never wait for it.
//
// It must be called from a goroutine counted in s.wg (the heartbeat
// loop): Close waits for the call before it closes the logs.
func (s *Server) joinAssigned(d *pb.RangeDescriptor, raftAddrs map[string]string) {
	id := d.GetRangeId()
	if _, ok := s.births.Load(id); ok {
		// A missed split's range (missedsplit.go) needs no floor from the
		// master: not held behind a JoinFloor call in flight, which waits
		// up to joinFloorWait for a leader that may need this replica to
		// be elected, nor behind its pause. A call in flight that answers
		// later finds the replica hosted and only raises its floor.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.joinFromBirth(d, raftAddrs)
		}()
		return
	}
	if !s.joins.begin(id, time.Now()) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		step, err := joinSkip, error(nil)
		defer func() {
			n := s.joins.end(id, step == joinRetry, time.Now())
			if n == 0 || s.ctx.Err() != nil {
				return
			}
			// Warn on the first call in a row that gives no floor only:
			// a range without a leader is asked for again every few
			// seconds until it has one.
			level := slog.LevelDebug
			if n == 1 {
				level = slog.LevelWarn
			}
			s.logger.Log(context.Background(), level, "assigned replica not created yet (no join floor, or its create failed)", "range", id, "calls", n, "err", err)
		}()
		step, err = s.joinOnce(d, raftAddrs)
	}()
}

// joinOnce asks the master for range d's join floor and creates the
// replica as planJoin says. It returns the step taken and the master's
// error, if any.
func (s *Server) joinOnce(d *pb.RangeDescriptor, raftAddrs map[string]string) (joinStep, error) {
	id := d.GetRangeId()
	ctx, cancel := context.WithTimeout(s.ctx, joinFloorWait)
	defer cancel()
	var resp *pb.JoinFloorResponse
	err := s.master.Call(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
		var err error
		resp, err = mc.JoinFloor(ctx, &pb.JoinFloorRequest{RangeId: id, ServerId: s.id})
		return err
	})
	step, floor, desc := planJoin(resp, err, s.id)
	how := "with its join floor"
	switch step {
	case joinRetry:
		return step, err
	case joinSkip:
		s.logger.Info("assigned replica not created: the map no longer lists this server", "range", id, "err", err)
		return step, err
	case joinUnprotected:
		s.logger.Warn("master gives no join floor (older version): assigned replica created without one", "range", id)
		desc, how = d, "without a join floor (older master)"
	case joinCreate:
		if !floor.set() {
			how = "without a join floor (the range leader's server gives none)"
		}
	}
	if s.ctx.Err() != nil {
		return joinSkip, s.ctx.Err()
	}
	hosted := s.hosts(id)
	if err := s.createJoined(desc, raftAddrs, floor); err != nil {
		// Paused as a missing floor is: a refusal that lasts (a removal
		// seen here that the map has not caught up with) would otherwise
		// cost a JoinFloor, a leader's quorum round, every reconcile.
		s.logger.Warn("create assigned replica failed", "range", id, "placement", "join", "err", err)
		return joinRetry, err
	}
	if hosted {
		// Created meanwhile by another path (a move's CreateReplica):
		// createJoined only raised its floor.
		s.logger.Info("assigned replica already hosted: its join floor raised", "range", id, "floor_term", floor.term, "floor_index", floor.index)
		return step, nil
	}
	if !floor.set() {
		joinWithoutFloorTotal.Inc() // only once the floorless replica exists
	}
	s.logger.Info("assigned replica created "+how, "range", id, "floor_term", floor.term, "floor_index", floor.index)
	return step, nil
}

// errRemovedHere: a Join's descriptor predates a delete that removed this
// server from the range.
var errRemovedHere = errors.New("partitionserver: this server was removed from the range at a later generation")

// noteRemoval remembers that a delete (DeleteReplica's before_generation)
// said this server left range id at generation before, whether or not it
// hosted a replica: createJoined refuses a descriptor older than that. In
// memory, one entry per range removed from this server since it started.
func (s *Server) noteRemoval(id, before uint64) {
	for {
		cur, loaded := s.removedAt.LoadOrStore(id, before)
		if !loaded || cur.(uint64) >= before || s.removedAt.CompareAndSwap(id, cur, before) {
			return
		}
	}
}

// createJoined creates the replica a Join placement asks for, under the
// range's lock, unless a delete already removed this server from the range
// at a later generation than desc's. The master's JoinFloor checks that
// the map still lists this server after the floor, but a move that removes
// it may be recorded, and its DeleteReplica run here (finding nothing to
// delete), between that answer and this create: created then, the replica
// would stand outside the configuration with a floor below its removal,
// and a member that missed the removal could win its vote.
func (s *Server) createJoined(desc *pb.RangeDescriptor, raftAddrs map[string]string, floor joinFloor) error {
	id := desc.GetRangeId()
	defer s.lockRange(id)()
	if gen, ok := s.removedAt.Load(id); ok && desc.GetGeneration() < gen.(uint64) {
		return fmt.Errorf("%w: range %d at generation %d, removed at %d", errRemovedHere, id, desc.GetGeneration(), gen.(uint64))
	}
	return s.createReplicaLocked(desc, false, false, raftAddrs, floor)
}

// forgetRemoval drops range id's remembered removal once a replica of it
// was created here at generation gen, at or past the removal: a later
// removal is noted again, and createJoined needs no older one (a Join's
// descriptor older than the hosted replica's changes nothing). Keeps
// removedAt from growing with every range ever moved off this server and
// back.
func (s *Server) forgetRemoval(id, gen uint64) {
	if cur, ok := s.removedAt.Load(id); ok && cur.(uint64) <= gen {
		s.removedAt.CompareAndDelete(id, cur)
	}
}
