// Package disklatency keeps a partition server's recent disk commit
// latencies (the state file's group commits, the shared Raft log's syncs)
// and summarises them for the heartbeat: the master takes the leaderships
// off a server whose commits are persistently slow (issue 10; TiKV's PD
// evicts the leaders of a slow store the same way).
//
// The summary is the median over the last Span, not the maximum: one
// hiccup (a loaded machine, a neighbour's fsync) sets a maximum, while the
// median moves only when most commits are slow. A stall also yields few
// commits against the many a healthy disk makes, so the median of a
// window mostly healthy stays healthy.
package disklatency
