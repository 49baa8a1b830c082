// Package partitionserver owns the partition server role: a process hosting
// many range replicas, each its own hashicorp/raft group, all groups sharing
// a few connections per peer server (grouptransport), with entities in one
// bbolt file (fsm). It serves
// linearizable reads and committed writes over gRPC, creates the replicas the
// master assigns, and reports its ranges to the master by heartbeat.
package partitionserver
