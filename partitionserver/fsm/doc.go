// Package fsm owns a partition server's replicated state: the bbolt file that
// holds every range replica's entities and per-range state, and the
// raft.BatchingFSM of each Raft group (Group) that applies the group's log
// to the ranges it serves, its spans (docs/range-groups.md). A range whose
// record names no group (group_id 0) is its own group's only span, and is
// used as that group's state machine (Range forwards to its Group).
//
// Layout of the bbolt file (one per server):
//
//	ranges/<range id, 8 bytes BE>          -> RangeState proto (descriptor, applied index, …)
//	data/<table id, 8 bytes BE>/<key>      -> entity in edm binary form
//	meta/last-commit                       -> id of the last bbolt transaction this code committed
//
// where <key> is keys.Encode(PartitionKey, RowKey). Ranges of one table share
// the table's bucket, so splitting a range changes descriptors, not data.
// The applied index is written in the same transaction as the data, so a
// restart replays only log entries the file does not hold yet
// (raft's NoSnapshotRestoreOnStart). bbolt reuses freed pages but never
// shrinks the file: OpenCompacting copies a mostly free file compact at
// start (compact.go).
package fsm
