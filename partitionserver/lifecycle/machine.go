package lifecycle

import (
	"fmt"
	"strings"
)

// State is where a replica is in its life on this server.
type State int

// The states. Opening and Closing last while their action runs; the
// registry holds the replica's lock meanwhile, so other events wait.
const (
	// Absent: not hosted here (never was, or removed).
	Absent State = iota
	// Opening: its Raft member is being started.
	Opening
	// Active: its Raft member runs.
	Active
	// Closing: its Raft member is being stopped.
	Closing
	// Quiet: hosted, state on disk, Raft member not running. Costs no
	// goroutine or timer; Raft traffic that needs it, or a request, opens
	// it again.
	Quiet
	// Removing: its data is being deleted.
	Removing
	// Broken: hosted, but its open found its files damaged (the
	// registry's openFailed). It is not opened again on requests or
	// Raft traffic (each would fail the same way), reports itself broken to
	// the master, which replaces it, and waits for the master's delete.
	Broken
)

var stateNames = [...]string{"absent", "opening", "active", "closing", "quiet", "removing", "broken"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Event is what happened to a replica.
type Event int

// The events.
const (
	// Found: the server's start found the range in its state file.
	Found Event = iota
	// Create: the master (heartbeat, CreateReplica) or a split here asks
	// this server to host the range; its state is stored.
	Create
	// Request: a client or master request needs the range's leader.
	Request
	// RaftMessage: a Raft RPC arrived that the quiet answer cannot give.
	RaftMessage
	// Opened, OpenFailed: the open action finished.
	Opened
	OpenFailed
	// Quiesced: a QUIESCE marker is the last entry this member applied and
	// nothing used the range since.
	Quiesced
	// Closed: the close action finished.
	Closed
	// Restart: the Raft member is stuck (a leadership transfer raft never
	// finished) and must be restarted from its durable state.
	Restart
	// Delete: the range's table was dropped or the replica moved away.
	Delete
	// Merged: the left neighbour here took the range over; its state is
	// already gone from the file.
	Merged
	// Removed: the remove actions finished.
	Removed
	// Shutdown: the server stops.
	Shutdown
)

var eventNames = [...]string{"found", "create", "request", "raft-message", "opened", "open-failed",
	"quiesced", "closed", "restart", "delete", "merged", "removed", "shutdown"}

func (e Event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", int(e))
}

// ParseEvent is the inverse of Event.String.
func ParseEvent(s string) (Event, bool) {
	for i, n := range eventNames {
		if n == s {
			return Event(i), true
		}
	}
	return 0, false
}

// Input is one event with its details.
type Input struct {
	Event Event
	// Campaign (Create, Request): the opened member starts an election at
	// once instead of waiting for a leader to contact it.
	Campaign bool
	// MustOpen (Found): the replica must run now (it was to bootstrap when
	// the server stopped, or lazy opening is off).
	MustOpen bool
	// Followed (Request): the quiet replica voted for, or stored the
	// entries of, another member since it closed (a closed vote or store,
	// see AnswerVote): that member is campaigning or leads, so a request
	// here opens it as a follower instead of starting an election that
	// would depose it (the request then learns the leader).
	Followed bool
	// Broken (OpenFailed): the open found the replica's files damaged
	// (the registry's openFailed decides).
	Broken bool
}

// Action is one effect the registry must execute, in order.
type Action int

// The actions.
const (
	// Open starts the Raft member (OpenCampaign: and makes it campaign).
	Open Action = iota + 1
	OpenCampaign
	// Close stops the Raft member; its log and state stay.
	Close
	// RecordQuiet remembers the closed member's term and last entry, for
	// Answer.
	RecordQuiet
	// DeleteState deletes the range from the state file.
	DeleteState
	// DropLog drops the range's Raft log group and snapshot files.
	DropLog
	// Wait: an action of another event is under way; retry after it.
	Wait
	// Refuse: the replica is not hosted here (or is going away); the
	// request is answered "range not found".
	Refuse
)

var actionNames = [...]string{"", "open", "open-campaign", "close", "record-quiet", "delete-state", "drop-log", "wait", "refuse"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Output is a transition: the state after the event and what to do.
type Output struct {
	From, To State
	Actions  []Action
}

func (o Output) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s -> %s", o.From, o.To)
	for i, a := range o.Actions {
		if i == 0 {
			b.WriteString(":")
		}
		b.WriteString(" " + a.String())
	}
	return b.String()
}

// Changed reports whether the transition changed the state.
func (o Output) Changed() bool { return o.From != o.To }

// Machine is one replica's lifecycle. The zero value is Absent.
type Machine struct {
	state State
	// after is where a Closing or Opening transition lands.
	after State
}

// State is the current state.
func (m *Machine) State() State { return m.state }

// Step applies one event and returns the transition.
func (m *Machine) Step(in Input) Output {
	from := m.state
	to, acts := m.next(in)
	m.state = to
	return Output{From: from, To: to, Actions: acts}
}

func (m *Machine) next(in Input) (State, []Action) {
	open := func(campaign bool) (State, []Action) {
		m.after = Active
		if campaign {
			return Opening, []Action{OpenCampaign}
		}
		return Opening, []Action{Open}
	}
	switch m.state {
	case Absent:
		switch in.Event {
		case Found:
			if in.MustOpen {
				return open(false)
			}
			return Quiet, nil
		case Create:
			return open(in.Campaign)
		case Delete:
			// Leftovers of an interrupted delete go too.
			m.after = Absent
			return Removing, []Action{DeleteState, DropLog}
		case Request, RaftMessage:
			return Absent, []Action{Refuse}
		}
	case Opening:
		switch in.Event {
		case Opened:
			return Active, nil
		case OpenFailed:
			if in.Broken {
				return Broken, nil
			}
			// Not known to be damaged: the next request tries again.
			return Quiet, nil
		case Request, RaftMessage, Quiesced, Restart, Delete, Merged, Shutdown:
			return Opening, []Action{Wait}
		}
	case Active:
		switch in.Event {
		case Quiesced:
			m.after = Quiet
			return Closing, []Action{Close, RecordQuiet}
		case Restart:
			m.after = Active
			return Opening, []Action{Close, Open}
		case Delete:
			m.after = Absent
			return Removing, []Action{Close, DeleteState, DropLog}
		case Merged:
			m.after = Absent
			return Removing, []Action{Close, DropLog}
		case Shutdown:
			m.after = Absent
			return Closing, []Action{Close}
		}
	case Closing:
		switch in.Event {
		case Closed:
			return m.after, nil
		case Request, RaftMessage, Delete, Merged, Shutdown:
			return Closing, []Action{Wait}
		}
	case Quiet:
		switch in.Event {
		case Request:
			return open(!in.Followed)
		case RaftMessage:
			return open(false)
		case Create:
			// Already hosted. A create that asks for a campaign (a split's
			// preferred leader) opens it.
			if in.Campaign {
				return open(true)
			}
		case Delete:
			m.after = Absent
			return Removing, []Action{DeleteState, DropLog}
		case Merged:
			m.after = Absent
			return Removing, []Action{DropLog}
		case Shutdown:
			return Absent, nil
		}
	case Broken:
		switch in.Event {
		case Request, RaftMessage:
			// Not retried: answered "not hosted", so requests go to the
			// range's other replicas.
			return Broken, []Action{Refuse}
		case Delete:
			// Its member never ran: nothing to close.
			m.after = Absent
			return Removing, []Action{DeleteState, DropLog}
		case Merged:
			m.after = Absent
			return Removing, []Action{DropLog}
		case Shutdown:
			// Not remembered: the next start tries to open it again.
			return Absent, nil
		}
	case Removing:
		// Removing outlasts its step only when one of its actions failed
		// (the registry reports Removed once all succeeded): the replica is
		// half removed, its member closed, its state or log perhaps still
		// there. A delete or merge asked again runs the removal again
		// (every action of it is idempotent) rather than nothing, which
		// would end the removal with the state left in the file (hosted
		// again at the next start) or the log never dropped.
		switch in.Event {
		case Removed:
			return Absent, nil
		case Delete:
			return Removing, []Action{DeleteState, DropLog}
		case Merged:
			return Removing, []Action{DropLog}
		case Create:
			// Not hosted until the removal has finished.
			return Removing, []Action{Wait}
		case Request, RaftMessage:
			return Removing, []Action{Refuse}
		}
	}
	// Everything else changes nothing: a create of a hosted replica, a
	// quiesce marker that is no longer the last entry, a second delete.
	return m.state, nil
}
