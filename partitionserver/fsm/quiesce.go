package fsm

import (
	pb "tablestore/proto/tablestorepb"
)

func init() { registerGroupWide(pb.CommandKind_COMMAND_KIND_QUIESCE, applyQuiesce) }

// QuiesceHook is the optional part of Hooks told when a QUIESCE entry was
// applied (committed to the file); the server closes the range's Raft
// member if that entry is still its last.
type QuiesceHook interface {
	// group is the group's id (a range that is its group's only span
	// names it).
	Quiesced(group, index uint64)
}

// EncodeQuiesce returns the log entry of a QUIESCE marker.
func EncodeQuiesce() ([]byte, error) {
	return Encode(pb.CommandKind_COMMAND_KIND_QUIESCE, &pb.QuiesceCommand{})
}

// applyQuiesce changes no state: the marker only tells members that the
// leader saw no traffic and that this index is a point to go quiet at.
func applyQuiesce(c *applyCtx, _ []byte) *Result {
	c.quiesced = c.log.Index
	return &Result{Index: c.log.Index}
}
