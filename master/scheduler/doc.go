// Package scheduler decides what the master does to the cluster's ranges:
// split, merge, move a replica, transfer a leader. It is a pure function of a
// Snapshot (servers, ranges, replicas, leaders, load and size figures,
// operations in flight and recently done, the time): Schedule returns the
// operations to start, each with the rule and the figures that caused it.
//
// There are no goroutines, no clock and no I/O here: the master gathers the
// snapshot from its Raft catalog and the heartbeats and runs what comes out;
// the simulator (package sim) feeds it simulated clusters; the golden
// scenarios in testdata/ script it. One policy per file, each behind the
// Policy interface, run in the order of Policies (data safety first, then
// load, then balance); tikv/pd's pkg/schedule/schedulers is the model.
package scheduler
