// Package raftmux owns the single TCP listener that carries the Raft traffic
// of every range group on a partition server. Each connection starts with an
// 8-byte big-endian range id; the mux hands it to that group's
// raft.StreamLayer, so hashicorp/raft's NetworkTransport runs unchanged per
// group while the server needs one port.
package raftmux
