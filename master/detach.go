package master

import (
	"context"
	"fmt"
	"time"

	"tablestore/internal/failpoint"
	"tablestore/internal/rangegroup"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// isolate makes range id its Raft group's only range before an operation
// on it alone, a move or an operator's leadership transfer
// (docs/range-groups.md, stage 4): a membership change or a transfer is
// the whole group's. A span born in the group leaves it; the span the
// group is named after stays, and every other span leaves instead (each a
// group of its own, led where the group is). Every other span of the
// group is claimed for the while: an operation on one of them is refused
// as busy, and one in flight (a merge taking a frozen sibling, whose
// freeze would have the detach refused) makes this one busy. The
// leadership does not change. Returns the range's descriptor after.
func (s *Server) isolate(ctx context.Context, id uint64, cause string) (*pb.RangeDescriptor, error) {
	d, ok := s.rangeDesc(id)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	peers := s.groupPeers(id)
	if len(peers) == 0 {
		return d, nil
	}
	if err := s.ops.claim(peers...); err != nil {
		return nil, err
	}
	defer s.ops.release(peers...)
	leaving := []uint64{id}
	if rangegroup.GroupOf(d) == id {
		leaving = peers
	}
	for _, r := range leaving {
		start := time.Now()
		got, err := s.detach(ctx, r, cause)
		if err != nil {
			return nil, err
		}
		// Recorded as the scheduler's own isolates are (the runner), so
		// that its rules see the range left its group lately: attach-cold
		// would otherwise co-locate an operator's moved or transferred
		// span straight back into an anchor group (its cold trend
		// predates the detach), undoing the operator's move.
		s.ops.record(scheduler.Op{Kind: scheduler.Isolate, Range: r, Rule: cause, At: start}, time.Now(), nil)
		if r == id {
			d = got
		}
	}
	return d, nil
}

// detach moves range id out of its Raft group into a group of its own on
// the same replicas (the partition server's DetachRange, one entry in the
// group's log), records it in the map and waits (bounded) for the new
// group's leader, which is the group's leader's server.
func (s *Server) detach(ctx context.Context, id uint64, cause string) (*pb.RangeDescriptor, error) {
	return s.detachFor(ctx, id, cause, "", nil)
}

// detachFor is detach whose event carries why it ran (a policy's reason
// and rule) and the policy's figures.
func (s *Server) detachFor(ctx context.Context, id uint64, cause, reason string, figures map[string]float64) (*pb.RangeDescriptor, error) {
	start := time.Now()
	d, ok := s.rangeDesc(id)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, id)
	}
	group, leader := rangegroup.GroupOf(d), s.leaderOf(id)
	var got *pb.RangeDescriptor
	err := s.onLeader(ctx, id, func(ctx context.Context, c pb.PartitionServiceClient) error {
		resp, err := c.DetachRange(ctx, &pb.DetachRangeRequest{RangeId: id, PreferredLeader: leader})
		if err == nil {
			got = resp.GetRange()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("range %d leaves Raft group %d: %w", id, group, err)
	}
	if err := failpoint.Inject("master/detach/after-detach"); err != nil {
		return nil, err
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{got}}); err != nil {
		return nil, err
	}
	if leader == "" {
		leader = s.leaderOf(id)
	}
	done := time.Since(start)
	led := s.leadRight(ctx, got, leader, start, done)
	if figures == nil {
		figures = map[string]float64{}
	}
	figures["detach_seconds"], figures["leader_move_seconds"] = done.Seconds(), led.Seconds()
	s.event(&pb.Event{
		Kind: pb.EventKind_EVENT_KIND_GROUP_SPLIT, Table: d.GetTable(), RangeIds: []uint64{id, group},
		Servers: []string{s.leaderOf(id)}, Cause: cause, Figures: figures,
		Message:         fmt.Sprintf("range %d [%q, %q) left Raft group %d for a group of its own", id, d.GetStart(), d.GetEnd(), group) + withReason(reason),
		DurationSeconds: time.Since(start).Seconds(),
	})
	opSeconds.WithLabelValues("detach").Observe(time.Since(start).Seconds())
	return got, nil
}
