// Package master owns the control plane: a hashicorp/raft group (three voters
// in production, one in dev) whose state machine holds the tables, the range
// descriptors and the partition-server registry. The leader places new
// tables' ranges, tracks server liveness and range leaders from heartbeats,
// and serves the partition map (fetch and watch) to front-ends.
package master
