// Package clustertest holds what the in-process cluster tests share: it
// starts a cluster of package cluster for one test (Start, StartTuned),
// hands out SDK and master clients, polls with deadlines (WaitFor), reads
// the partition map and the master's events, asks for splits and merges
// the way an operator would (retrying the answers an operator would
// retry), and runs a background write workload whose acknowledged writes
// it verifies exactly once.
//
// It is an ordinary package so that the cluster tests can live in more
// than one test binary (cluster, cluster/reshape), each well within go
// test's timeout; production binaries do not import it.
package clustertest
