package rangegroup

import pb "tablestore/proto/tablestorepb"

// GroupOf is the id of the Raft group serving d's range: its group_id, or
// its range id when group_id is 0 (the range is its own group).
func GroupOf(d *pb.RangeDescriptor) uint64 {
	if g := d.GetGroupId(); g != 0 {
		return g
	}
	return d.GetRangeId()
}
