// Package reshape holds the in-process cluster tests of ranges and Raft
// groups changing shape: splits, merges and moves (and crashes, master
// failovers and lagging or removed replicas across them), and table groups
// (tables sharing an anchor group, detach, ungroup, group moves and caps).
// They were split from package cluster's tests, with which they share
// cluster/clustertest, so that each test binary stays well within go
// test's timeout and `make test` runs the two side by side.
package reshape
