package lifecycle

import "time"

// A replica whose open fails again and again (a damaged snapshot, a log
// it cannot read) used to go back to Quiet and be opened again by the next
// request or Raft message, forever, silently: its range ran on two
// replicas until one more failed. OpenFailures.Record is the rule that
// calls it broken instead (state Broken): the registry stops opening it,
// and the master replaces it (as CockroachDB and TiKV replace a corrupt
// replica).
//
// Only damage breaks a replica. A plain failure, however often repeated,
// says nothing of the replica's own files: most causes are the server's
// (a full disk, too many open files, wrong permissions, a shared-log read
// error) and would strike every replica at once; breaking them all would
// have the master replace (in place: wipe) every replica of the server
// for a fault that freeing space or fixing permissions ends. Such a
// replica stays Quiet and is retried by the next request or Raft message,
// each failure logged.

// FailureKind classifies why an open failed (the registry's openFailure
// decides from the error).
type FailureKind int

const (
	// Transient: the server is shutting down, or the open did not get to
	// run (a wake timeout under load). It says nothing of the replica's
	// files and is not counted.
	Transient FailureKind = iota
	// Failure: the open failed for a reason not known to be damage (an
	// I/O error, a full disk). Counted and retried, never broken.
	Failure
	// Damage: the replica's files are known to be damaged (a snapshot
	// whose header cannot be read): opening again cannot help.
	Damage
)

// OpenFailures counts a replica's consecutive failed opens (for the
// registry's logs). The zero value is none; a successful open resets it.
type OpenFailures struct {
	// Count failures since the last successful open, the first at First.
	Count int
	First time.Time
}

// Record adds a failed open of kind at now and reports whether the
// replica is now broken: only on Damage. A Failure is counted and never
// breaks it; a Transient one is not counted.
func (f OpenFailures) Record(kind FailureKind, now time.Time) (OpenFailures, bool) {
	if kind == Transient {
		return f, false
	}
	if f.Count == 0 {
		f.First = now
	}
	f.Count++
	return f, kind == Damage
}
