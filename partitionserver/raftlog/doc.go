// Package raftlog holds the Raft logs and stable stores of every range group
// on one partition server in one append-only, segmented write-ahead log.
//
// Each group gets a view (Log) implementing raft.LogStore and
// raft.StableStore. Appends, truncations and stable-key writes of all groups
// become records of one shared log; records submitted while the previous
// write is being synced are written together and made durable with one
// fdatasync (group commit), so N busy groups cost one sync stream instead of
// N bbolt transactions.
//
// Every record carries a CRC; on open the tail of the newest segment is
// scanned and cut at the first torn or corrupt record. An in-memory index
// per group maps log indexes to record positions. Deletions (suffix
// truncation on conflict, prefix compaction, dropping a retired group) are
// records too. Every segment starts with a checkpoint of all groups' bounds
// and stable keys, so a segment that holds no live entry of any group can be
// deleted without losing state (see docs/architecture.md).
package raftlog
