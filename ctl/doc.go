// Package ctl owns `tablestore ctl`, the operator's command line for the
// master: it shows the partition map (ranges with their load, partition
// servers), reads and follows the master's event log, asks the master to
// split, merge, move or transfer the leadership of a range, and collects a
// zip for a bug report (`debug zip`: the master's view and every process's
// metrics, health, version and goroutines, found through the master).
//
// Every command prints either aligned human tables or, with --json, one JSON
// object per line (per range, server, event or operation result) whose field
// names are stable and documented in docs/operations.md. Errors the master
// answers (gRPC statuses carrying an internal/rpcerr reason) are returned as
// *MasterError so the caller prints code, reason and message and exits
// non-zero; with --json a failure is also one JSON object on stderr
// (ErrorRecord) and comes back as *ReportedError.
//
// ctl reaches the master group through internal/masterclient, following the
// Raft leader; it holds no state of its own.
package ctl
