package partitionserver

import (
	"context"
	"errors"
	"fmt"
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
	listed := false
	for _, r := range d.GetReplicas() {
		listed = listed || r.GetServerId() == self
	}
	if !listed {
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

// joinAssigned creates, in the background, the empty replica of assigned
// range d that reconcile's Join placement asks for, once the master has
// given it a join floor (master JoinFloor). One call per range runs at a
// time; a call that creates nothing leaves the placement Join, and the
// next reconcile starts another. Other ranges never wait for it.
//
// It must be called from a goroutine counted in s.wg (the heartbeat
// loop): Close waits for the call before it closes the logs.
func (s *Server) joinAssigned(d *pb.RangeDescriptor, raftAddrs map[string]string) {
	id := d.GetRangeId()
	if s.joinsInFlight.Load() >= maxJoinsInFlight {
		// A server that lost its data directory misses every replica at
		// once: the leaders' quorum rounds go out a batch at a time, and
		// the next reconcile starts the rest.
		return
	}
	if _, busy := s.joining.LoadOrStore(id, true); busy {
		return
	}
	s.joinsInFlight.Add(1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.joinsInFlight.Add(-1)
		defer s.joining.Delete(id)
		ctx, cancel := context.WithTimeout(s.ctx, joinFloorWait)
		defer cancel()
		var resp *pb.JoinFloorResponse
		err := s.master.Call(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
			var err error
			resp, err = mc.JoinFloor(ctx, &pb.JoinFloorRequest{RangeId: id, ServerId: s.id})
			return err
		})
		step, floor, desc := planJoin(resp, err, s.id)
		switch step {
		case joinRetry:
			if s.ctx.Err() == nil {
				s.logger.Warn("no join floor for an assigned replica yet: not created", "range", id, "err", err)
			}
			return
		case joinSkip:
			s.logger.Info("assigned replica not created: the map no longer lists this server", "range", id, "err", err)
			return
		case joinUnprotected:
			joinWithoutFloorTotal.Inc()
			s.logger.Warn("master gives no join floor (older version): assigned replica created without one", "range", id)
			desc = d
		case joinCreate:
			if !floor.set() {
				joinWithoutFloorTotal.Inc()
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		if err := s.createJoined(desc, raftAddrs, floor); err != nil {
			s.logger.Warn("create assigned replica failed", "range", id, "placement", "join", "err", err)
			return
		}
		s.logger.Info("assigned replica created with its join floor", "range", id, "floor_term", floor.term, "floor_index", floor.index)
	}()
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
