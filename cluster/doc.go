// Package cluster owns the in-process composition of every role: masters,
// partition servers and front-ends started in one process on loopback with
// real listeners, real Raft and real bbolt files. `tablestore dev` runs it;
// integration tests run it with free ports and use its fault injection
// (stop, restart, crash, isolate, pause a server, add one).
//
// It is the composition root, so it sits beside cmd/ rather than under
// internal/: it imports every role, and internal/ holds only code the roles
// share, which imports none of them.
package cluster
