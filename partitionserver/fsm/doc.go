// Package fsm owns a partition server's replicated state: the bbolt file that
// holds every range replica's entities and per-range state, and the
// raft.BatchingFSM of each range that applies that range's Raft log to it.
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
