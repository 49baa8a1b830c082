package rangegroup

import (
	"strings"

	pb "tablestore/proto/tablestorepb"
)

// GroupOf is the id of the Raft group serving d's range: its group_id, or
// its range id when group_id is 0 (the range is its own group).
func GroupOf(d *pb.RangeDescriptor) uint64 {
	if g := d.GetGroupId(); g != 0 {
		return g
	}
	return d.GetRangeId()
}

// AnchorPrefix starts the name of every anchor table: a reserved table of
// one empty range that founds a Raft group tables share
// (docs/range-groups.md, stage 7; the master's --table-groups).
const AnchorPrefix = "_groups/"

// IsAnchor reports whether range d is an anchor: the range of a reserved
// table, its group's namesake. Operators see it marked (ctl ranges, the
// master's dashboard); it holds no rows.
func IsAnchor(d *pb.RangeDescriptor) bool {
	return d != nil && strings.HasPrefix(strings.ToLower(d.GetTable()), AnchorPrefix) && d.GetGroupId() == d.GetRangeId()
}

// GroupSpans counts the ranges of each Raft group among ranges (by
// GroupOf): an anchor group's count includes the anchor, as the master's
// --table-group-spans counts it.
func GroupSpans(ranges []*pb.RangeDescriptor) map[uint64]int {
	out := map[uint64]int{}
	for _, d := range ranges {
		out[GroupOf(d)]++
	}
	return out
}
