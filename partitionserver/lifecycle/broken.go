package lifecycle

import "time"

// A replica whose open fails again and again (a damaged snapshot, a log
// it cannot read) used to go back to Quiet and be opened again by the next
// request or Raft message, forever, silently: its range ran on two
// replicas until one more failed. OpenFailures.Record is the rule that
// calls it broken instead (state Broken): the registry stops opening it,
// and the master replaces it (as CockroachDB and TiKV replace a corrupt
// replica).

// FailureKind classifies why an open failed (the registry's openFailure
// decides from the error).
type FailureKind int

const (
	// Transient: the server is shutting down, or the open did not get to
	// run (a wake timeout under load). It says nothing of the replica's
	// files and is not counted.
	Transient FailureKind = iota
	// Failure: the open failed for a reason not known to be damage (an
	// I/O error, a full disk). Persistent only when repeated.
	Failure
	// Damage: the replica's files are known to be damaged (a snapshot
	// whose header cannot be read): opening again cannot help.
	Damage
)

// A Failure makes the replica broken once BrokenAfterFailures of them
// followed each other, spanning at least BrokenAfterSpan: Raft traffic
// retries an open many times a second, so a count alone would call a
// few seconds of a full disk or an I/O hiccup broken.
const (
	BrokenAfterFailures = 5
	BrokenAfterSpan     = 30 * time.Second
)

// OpenFailures counts a replica's consecutive failed opens. The zero
// value is none; a successful open resets it.
type OpenFailures struct {
	// Count failures since the last successful open, the first at First.
	Count int
	First time.Time
}

// Record adds a failed open of kind at now and reports whether the
// replica is now broken: at once on Damage, after BrokenAfterFailures
// failures over BrokenAfterSpan otherwise; never on a Transient one.
func (f OpenFailures) Record(kind FailureKind, now time.Time) (OpenFailures, bool) {
	if kind == Transient {
		return f, false
	}
	if f.Count == 0 {
		f.First = now
	}
	f.Count++
	broken := kind == Damage || (f.Count >= BrokenAfterFailures && now.Sub(f.First) >= BrokenAfterSpan)
	return f, broken
}
