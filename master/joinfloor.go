package master

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rangeclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// leaderFloor asks range id's leader for a join floor (RangeInfo
// join_floor): its term and commit index once an entry of its term is
// committed and a quorum confirmed its leadership (partitionserver
// replica.joinFloor). onLeader follows NotLeader, so a deposed leader, or
// one a stale configuration elected, sends it on or cannot answer. A zero
// term means the leader's server is older than the floor.
func (s *Server) leaderFloor(ctx context.Context, id uint64, o rangeclient.Options) (term, index uint64, err error) {
	term, index, _, err = s.leaderFloorVoters(ctx, id, o)
	return term, index, err
}

// leaderFloorVoters is leaderFloor with the voters of the leader's Raft
// configuration as it answered (none from a server too old to say).
func (s *Server) leaderFloorVoters(ctx context.Context, id uint64, o rangeclient.Options) (term, index uint64, voters []string, err error) {
	err = s.onLeaderWith(ctx, id, o, func(ctx context.Context, c pb.PartitionServiceClient) error {
		resp, err := c.RangeInfo(ctx, &pb.RangeInfoRequest{RangeId: id, JoinFloor: true})
		if err == nil {
			term, index, voters = resp.GetFloorTerm(), resp.GetFloorIndex(), resp.GetStatus().GetVoters()
		}
		return err
	})
	if err != nil {
		return 0, 0, nil, fmt.Errorf("join floor of range %d: %w", id, err)
	}
	return term, index, voters, nil
}

// joinFloorLeaderWait bounds JoinFloor's search for a leader that
// confirms itself.
const joinFloorLeaderWait = 4 * time.Second

// joinFloorSearch bounds that search further. A range without a leader
// answers NotLeader from every replica at once, and the search ran about
// 23 rounds over the replicas in its 4 s; a few rounds cover an election
// settling (the server asks again later, backing off: partitionserver
// joinassigned.go). An attempt on a leader that cannot commit or confirm
// itself (a minority left) waits up to 5 s there; it is abandoned sooner.
var joinFloorSearch = rangeclient.Options{Rounds: 4, AttemptTimeout: 2 * time.Second}

// errNoJoinFloor is how JoinFloor refuses for a reason of the range's (no
// leader confirms itself; the range changed during the call): Aborted
// with its own reason, not Unavailable, which the partition server's
// master client takes for an unreachable or deposed master and leaves it
// for the next master (the heartbeats share that client). Translated here,
// at the boundary.
func errNoJoinFloor(msg string) error {
	return rpcerr.New(codes.Aborted, rpcerr.ReasonNoJoinFloor, msg, nil)
}

// listsServer reports whether d has a replica on server.
func listsServer(d *pb.RangeDescriptor, server string) bool {
	for _, r := range d.GetReplicas() {
		if r.GetServerId() == server {
			return true
		}
	}
	return false
}

// joinFloorRefusal decides whether server may have a join floor for range
// id, whose descriptor in the map is d (ok: the map has the range): nil, or
// the refusal to answer. Pure.
func joinFloorRefusal(id uint64, d *pb.RangeDescriptor, ok bool, server string) error {
	if !ok {
		return rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, fmt.Sprintf("range %d not found", id), nil)
	}
	if server == "" || !listsServer(d, server) {
		// Moved away since the server's assignments: it must not create
		// the replica at all.
		return rpcerr.New(codes.FailedPrecondition, "", fmt.Sprintf("range %d (generation %d) has no replica on %q", id, d.GetGeneration(), server), nil)
	}
	return nil
}

// JoinFloor gives a partition server the join floor of a replica it is
// about to create empty from its heartbeat's assignments: the map lists it
// in the range, but it hosts none (a lost data directory; a delete that
// ran under a recorded add). Such a replica is as empty as the one a move
// re-creates, and votes for any candidate: a member that missed this
// server's earlier removal, or writes acknowledged before the replica was
// lost, would win with it (reliability.md 19, "Join floor for heartbeat
// re-creations"). A range still at generation 1 comes here too once it
// has started (rangestart.go): its initial members have no earlier
// removal, and the floor covers the writes acknowledged before the loss.
//
// Why the floor is high enough: the map is read first, and it lists the
// server only once the change that (last) added it is committed, so every
// earlier removal of the server is committed before the floor is taken;
// the leader's verified commit index is at or past them.
func (v *service) JoinFloor(ctx context.Context, req *pb.JoinFloorRequest) (*pb.JoinFloorResponse, error) {
	s := v.s
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	id, server := req.GetRangeId(), req.GetServerId()
	d, ok := s.rangeDesc(id)
	if err := joinFloorRefusal(id, d, ok, server); err != nil {
		return nil, err
	}
	// Bounded below the server's own wait (partitionserver joinFloorWait,
	// 5 s), so a range without a leader that can confirm itself answers
	// errNoJoinFloor with the reason instead of the caller's deadline.
	lctx, cancel := context.WithTimeout(ctx, joinFloorLeaderWait)
	defer cancel()
	term, index, err := s.leaderFloor(lctx, id, joinFloorSearch)
	if err != nil {
		return nil, errNoJoinFloor(err.Error())
	}
	// The map again: a change recorded meanwhile (a move that removed the
	// server, committed after the floor's index was read) would leave the
	// floor below that removal. The server asks again.
	if now, ok := s.rangeDesc(id); !ok || now.GetGeneration() != d.GetGeneration() {
		return nil, errNoJoinFloor(fmt.Sprintf("range %d changed while its join floor was taken", id))
	}
	if term == 0 {
		joinFloorMissingTotal.Inc()
		s.logger.Warn("range leader gave no join floor: the re-created replica joins without one", "range", id, "server", server)
	} else {
		s.logger.Info("join floor for a replica re-created from the map", "range", id, "server", server, "floor_term", term, "floor_index", index)
	}
	return &pb.JoinFloorResponse{Range: d, FloorTerm: term, FloorIndex: index}, nil
}
