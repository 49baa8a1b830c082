package partitionserver

import (
	"context"
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
	if _, busy := s.joining.LoadOrStore(id, true); busy {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
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
		if err := s.createReplica(desc, false, false, raftAddrs, floor); err != nil {
			s.logger.Warn("create assigned replica failed", "range", id, "placement", "join", "err", err)
			return
		}
		s.logger.Info("assigned replica created with its join floor", "range", id, "floor_term", floor.term, "floor_index", floor.index)
	}()
}
