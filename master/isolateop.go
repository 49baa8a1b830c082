package master

import (
	"context"
	"fmt"
	"maps"
	"time"

	"tablestore/internal/rangegroup"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// A span that gets hot or large leaves its anchor group
// (docs/range-groups.md, stage 7, step 7). The scheduler's detach-hot and
// detach-large plan an Isolate of the span (master/scheduler/detach_hot.go);
// isolateSpan runs it. split takes a span of an anchor group out of its
// group first (leaveAnchorGroup), whoever asked for the split: an
// operator's, or a plan of a master that predates the rule, would
// otherwise leave the left half in the shared group and make only the
// right half a group of its own.

// anchorSpan reports whether range d is a span of an anchor group other
// than the anchor: its group is another range's, and that range is an
// anchor in the map.
func (s *Server) anchorSpan(d *pb.RangeDescriptor) bool {
	g := rangegroup.GroupOf(d)
	if d == nil || g == d.GetRangeId() {
		return false
	}
	var a *pb.RangeDescriptor
	s.fsm.read(func(st *state) { a = st.ranges[g] })
	return isAnchor(a)
}

// isolateSpan runs a scheduled Isolate: range o.Range leaves its anchor
// group for a group of its own on the same replicas (detachFor, one
// DETACH_SPAN entry in the group's log; the event names the rule), every
// other range of the group claimed meanwhile, as isolate claims them. A
// range no longer a span of an anchor group (it left by another way since
// the plan) is done; the anchor itself is never taken out (isolating the
// namesake would detach every table).
func (s *Server) isolateSpan(ctx context.Context, o scheduler.Op) error {
	start := time.Now()
	d, ok := s.rangeDesc(o.Range)
	if !ok {
		return fmt.Errorf("%w: %d", ErrRangeNotFound, o.Range)
	}
	if !s.anchorSpan(d) {
		return nil
	}
	peers := s.groupPeers(o.Range)
	if err := s.ops.claim(peers...); err != nil {
		return err
	}
	defer s.ops.release(peers...)
	if _, err := s.detachFor(ctx, o.Range, causePolicy, o.Reason+" ["+o.Rule+"]", maps.Clone(o.Figures)); err != nil {
		return err
	}
	opSeconds.WithLabelValues("isolate").Observe(time.Since(start).Seconds())
	return nil
}

// leaveAnchorGroup takes range d out of its anchor group before a split
// of it (isolate: the caller claimed d, isolate claims the rest of the
// group) and returns its descriptor after; d itself when it is no span of
// an anchor group.
func (s *Server) leaveAnchorGroup(ctx context.Context, d *pb.RangeDescriptor, cause string) (*pb.RangeDescriptor, error) {
	if !s.anchorSpan(d) {
		return d, nil
	}
	return s.isolate(ctx, d.GetRangeId(), cause)
}
