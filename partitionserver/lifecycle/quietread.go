package lifecycle

// Quiet reads (issue 9): a quiet replica that led its range when it closed
// serves a linearizable read from its state file, without opening its Raft
// member, once enough other voters confirm that they too are still where
// the range went quiet. The safety argument is in docs/architecture.md,
// "Quiet reads"; these are its two decisions, pure so they can be tested
// case by case.

// Position is where a member's Raft state is: its current term and its
// last log entry. A quiet read asks the other voters whether they are at
// the reader's position.
type Position struct {
	Term, LastIndex, LastTerm uint64
}

// QuietReason says why a quiet replica cannot serve a read without
// opening; the registry counts them (quiet_reads_total{outcome}).
type QuietReason int

// The reasons.
const (
	// QuietOK: the replica may read its state and ask for confirmation.
	QuietOK QuietReason = iota
	// NotQuiet: the member is open, opening or closing (the normal read
	// path serves it).
	NotQuiet
	// NoMark: quiet without a recorded mark (found at start, or the mark
	// could not be read): its position is unknown.
	NoMark
	// NotLeader: it was not the leader when it closed, or its mark does not
	// show a leader's last entry (the QUIESCE marker is the leader's own
	// entry, so the last entry's term is its current term).
	NotLeader
	// NotApplied: the state file does not hold exactly the log up to the
	// last entry (entries it has not applied, or a snapshot the log store
	// does not show).
	NotApplied
	// NotAtMarker: the mark's last entry is not the QUIESCE marker the
	// voters were recorded at (an entry was appended between the marker
	// check and the close), so the recorded voters may not be the
	// configuration at the mark.
	NotAtMarker
	// Busy: the replica has served QuietReadsPerWake reads since it went
	// quiet. Reads that keep coming are cheaper on an open member (a read
	// lease, no round trip per read) than confirmed one by one, so this
	// one wakes the range.
	Busy
)

// QuietReadsPerWake is how many reads a quiet replica serves before the
// next one wakes its range. A wake costs an election (about five fsyncs
// over the three servers, ~2 ms of CPU here); a quiet read costs a
// confirmation round that a leased read on an open member does not,
// ~60 µs of CPU over the servers (docs/performance.md, session 14). So a
// range read steadily while quiet pays the wake back within about 40
// reads, and one read now and then wakes at most once per this many
// reads. It counts reads, not time, so the rule needs no clock.
const QuietReadsPerWake = 64

var quietReasonNames = [...]string{"ok", "not_quiet", "no_mark", "not_leader", "not_applied", "not_at_marker", "busy"}

func (r QuietReason) String() string {
	if int(r) < len(quietReasonNames) {
		return quietReasonNames[r]
	}
	return "unknown"
}

// QuietRead decides whether a replica in state s, with mark m (nil when
// none is recorded), which led its range when it closed (wasLeader), may
// serve a read from its state file; on QuietOK it returns the position the
// other voters must confirm. The state file then holds exactly the entries
// up to that position's last index, every one of them committed.
//
// votersAt is the index of the QUIESCE marker at which the voters to ask
// were recorded: the mark must end at it, so that they are the
// configuration at the mark's last entry. served is how many reads the
// replica has served quietly since it went quiet (Busy).
func QuietRead(s State, m *Mark, wasLeader bool, votersAt, served uint64) (Position, QuietReason) {
	switch {
	case s != Quiet:
		return Position{}, NotQuiet
	case served >= QuietReadsPerWake:
		return Position{}, Busy
	case m == nil || m.LastIndex == 0:
		return Position{}, NoMark
	case !wasLeader || m.LastTerm != m.Term:
		return Position{}, NotLeader
	case m.Applied != m.LastIndex:
		return Position{}, NotApplied
	case m.LastIndex != votersAt:
		return Position{}, NotAtMarker
	}
	return Position{Term: m.Term, LastIndex: m.LastIndex, LastTerm: m.LastTerm}, QuietOK
}

// OpenView is an open member's position, read without its lock: the term
// before and after reading the last index (equal: the member was at that
// term when its last index was read) and whether it was still the slot's
// running member after both.
type OpenView struct {
	TermBefore, LastIndex, TermAfter uint64
	Live                             bool
}

// ConfirmQuiet decides a voter's answer to "are you, right now, at
// position p?". A quiet member answers from its mark (nil: no). An open
// member (open non-nil, s Active) answers from its live term and last
// index. A member opening or closing, or one with any doubt, answers no:
// the reader then takes the wake path, which is always correct.
//
// A yes promises that this member's current term is p.Term (it has voted
// in no later term, so no leader of a later term counted it) and that its
// log ends at p.LastIndex (it holds no entry after it).
func ConfirmQuiet(s State, m *Mark, open *OpenView, p Position) bool {
	if p.LastIndex == 0 {
		return false
	}
	switch s {
	case Quiet:
		// Applied past the log's last index: a snapshot the log store
		// does not show, so the mark's last index may understate.
		return m != nil && m.Term == p.Term && m.LastIndex == p.LastIndex && m.LastTerm == p.LastTerm &&
			m.Applied <= m.LastIndex
	case Active:
		return open != nil && open.Live && open.TermBefore == p.Term && open.TermAfter == p.Term &&
			open.LastIndex == p.LastIndex
	}
	return false
}

// ConfirmsNeeded is how many other voters must confirm a quiet read: a
// majority of the voters, the reader being one of them. ok is false when
// the reader is not a voter of the configuration it closed with.
func ConfirmsNeeded(voters int, readerIsVoter bool) (n int, ok bool) {
	if !readerIsVoter || voters == 0 {
		return 0, false
	}
	return voters/2 + 1 - 1, true
}
