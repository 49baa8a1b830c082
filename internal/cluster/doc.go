// Package cluster owns the in-process composition of every role: masters,
// partition servers and front-ends started in one process on loopback with
// real listeners, real Raft and real bbolt files. `tablestore dev` runs it
// with fixed ports; integration tests run it with free ports and use its
// fault injection (stop, restart, isolate a server).
package cluster
