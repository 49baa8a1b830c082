package fsm

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// Result is what applying one command returns to the proposer through
// raft's ApplyFuture.Response.
type Result struct {
	// TimestampUnixNano is the Timestamp (and ETag) given to every entity
	// the command wrote.
	TimestampUnixNano int64
	// Range is the range's descriptor after a split, merge or membership
	// change; Right is the new right-hand range of a split.
	Range *pb.RangeDescriptor
	Right *pb.RangeDescriptor
	// Spans are the descriptors of every span of the group after a
	// membership change (SET_REPLICAS rewrites them all), Range's
	// included, in the group's span order.
	Spans []*pb.RangeDescriptor
	// Index is the log index of a freeze.
	Index uint64
	// Batch holds one result per write of a coalesced write batch, in the
	// batch's order.
	Batch []*Result
	Err   error
}

// Hooks lets the server react to ranges a command created; they run after
// the command's transaction committed, on the apply goroutine, so they must
// not block.
type Hooks interface {
	// RangeCreated reports the right-hand range of a split of range
	// parent, now stored, and the replica meant to lead it.
	RangeCreated(parent uint64, desc *pb.RangeDescriptor, preferredLeader string)
	// RangeMerged reports that range into took over range right here:
	// right's state is gone from the file and its group must stop.
	RangeMerged(into, right uint64)
}

// SplitMissedHooks is implemented by Hooks that want to hear of splits a
// replica never applied: a snapshot restored over its own state (applied
// up to oldApplied, not 0) carried it past them (MissedSplits). group is
// the Raft group whose log the splits were entries of (the parent's
// group: its span may be named otherwise). Optional, so that hooks of
// tests need not implement it.
type SplitMissedHooks interface {
	SplitsMissed(group, oldApplied uint64, missed []*pb.SplitBirth)
}

// applyCtx is what a command handler may touch: the open write transaction
// and the group's spans' states, which the batch writes back once at its
// end.
type applyCtx struct {
	tx    *bolt.Tx
	group uint64
	// spans are the group's live spans, in range id order.
	spans []*spanApply
	// edited are the spans of spans whose state the batch copied (edit,
	// addSpan), in the order it did: what the batch's end writes back,
	// publishes and commits while the set of spans is the one it started
	// with (touched), so that a batch writing one span of a large group
	// costs that span, not every span (docs/performance.md, session 37).
	edited []*spanApply
	// commit lists the states the batch's commit makes its spans'
	// committed ones (writeBack): those of touched.
	commit []spanCommit
	// state is the state of the span the command (for a write batch,
	// the write) addresses; nil when it names none of the group's.
	state *pb.RangeState
	// target is the span the entry's envelope names (0: the group's own).
	target uint64
	// owner is the group applying the batch (spans a command creates are
	// its).
	owner *Group
	// spansChanged: the batch changed the group's set of spans (a span
	// split off, one gone); live is the set after it, in range id order
	// (Group.settle), for SpanHooks.
	spansChanged bool
	live         []uint64
	// dropped are spans a command of the batch removed from the group
	// (MERGE_SPANS: its record deleted; DETACH_SPAN: its record now its
	// own group's): no longer in spans, their records not written back.
	dropped []*Range
	log     *raft.Log
	created []created
	merged  []mergedSpan
	// attached are ranges ATTACH_SPAN took into the group (AttachHooks).
	attached []attachedSpan
	// quiesced is the index of the last QUIESCE marker applied.
	quiesced uint64
	// arena holds the keys and values a client write entry hands to
	// bbolt (write.go, reserve).
	arena []byte
	// store holds the prune state of the range's table (dedup.go);
	// prunes caches it for the entries of one apply (of table
	// prunesTable).
	store       *Store
	prunes      *tablePrune
	prunesTable uint64
}

// spanApply is one span's state as a batch changes it. Until a command
// edits it, state is the span's state from before the batch (shared with
// r.state, never changed in place), and the batch does not write its
// record: a batch costs the spans it changes, not every span of the group
// (docs/range-groups.md, "a batch writes only what it changed").
type spanApply struct {
	r     *Range
	state *pb.RangeState
	// edited: state is the batch's own copy, written back at its end.
	edited bool
}

// spanCommit is a span's state as a batch left it, for its commit.
type spanCommit struct {
	r     *Range
	state *pb.RangeState
}

// edit returns the span's state for a command to change, copying it the
// first time in the batch (and listing it in c.edited).
func (sp *spanApply) edit(c *applyCtx) *pb.RangeState {
	if !sp.edited {
		sp.state = proto.Clone(sp.state).(*pb.RangeState)
		sp.edited = true
		c.edited = append(c.edited, sp)
	}
	return sp.state
}

// touched is the spans whose states the batch's end may have to write
// back, publish and commit: the edited ones, unless the batch changed the
// set of spans (created, dropped or lost one), when it is every live span
// (such a batch is rare and resorts the group anyway). Either way a span
// no longer live is not in it.
func (c *applyCtx) touched() []*spanApply {
	if c.spansChanged {
		return c.spans
	}
	return c.edited
}

// spanID is the span a command names: 0 names the span the group is named
// after. Not "the group's only span": which spans a replica still holds
// differs between servers for a moment (a span merged away by another
// group's entry is gone here and frozen there), and a rule read from that
// would resolve alike-looking entries differently on different replicas.
func (c *applyCtx) spanID(id uint64) uint64 {
	if id == 0 {
		return c.group
	}
	return id
}

// address makes the span id names the one commands change, and reports
// whether the group serves it.
func (c *applyCtx) address(id uint64) bool {
	c.state = nil
	if sp := c.span(c.spanID(id)); sp != nil {
		c.state = sp.edit(c)
	}
	return c.state != nil
}

// span is the live span of range id (nil: none). spans is in range id
// order, and a write entry looks its span up once per write: a scan was
// most of a one-write entry's cost in a group of a thousand tables.
func (c *applyCtx) span(id uint64) *spanApply {
	i, ok := slices.BinarySearchFunc(c.spans, id, func(sp *spanApply, id uint64) int { return cmp.Compare(sp.r.id, id) })
	if !ok {
		return nil
	}
	return c.spans[i]
}

// addressWrite addresses the span a write names, or the entry's.
func (c *applyCtx) addressWrite(w *pb.WriteCommand) bool {
	if id := w.GetRangeId(); id != 0 {
		return c.address(id)
	}
	return c.address(c.target)
}

// serves reports whether range id is one of the group's live spans.
func (c *applyCtx) serves(id uint64) bool { return c.span(id) != nil }

// tablePrune is the prune state shared by the ranges of the addressed
// span's table here (the store's write lock is held while applying).
func (c *applyCtx) tablePrune() *tablePrune {
	table := c.state.GetRange().GetTableId()
	if c.prunes == nil || c.prunesTable != table {
		c.prunes, c.prunesTable = c.store.tablePrune(table), table
	}
	return c.prunes
}

// created is a range a command created, for the hooks.
type created struct {
	parent          uint64
	desc            *pb.RangeDescriptor
	preferredLeader string
}

// mergedSpan is a range another took over, for the hooks.
type mergedSpan struct{ into, right uint64 }

// handler applies one command's payload.
type handler func(c *applyCtx, payload []byte) *Result

var handlers = map[pb.CommandKind]handler{}

// groupWide holds the kinds whose handlers find their spans themselves
// (writes name theirs; a quiesce marker is the group's): applyCommand
// hands them entries whose envelope names no span of the group.
var groupWide = map[pb.CommandKind]bool{}

// register adds a command handler; each command kind registers itself from
// its own file.
func register(kind pb.CommandKind, h handler) {
	if _, dup := handlers[kind]; dup {
		panic(fmt.Sprintf("fsm: handler for %v registered twice", kind))
	}
	handlers[kind] = h
}

// registerGroupWide adds a handler that addresses spans itself.
func registerGroupWide(kind pb.CommandKind, h handler) {
	register(kind, h)
	groupWide[kind] = true
}

// Range is one range replica: a span of the group that serves it
// (Group). Its reads and reports are the span's; its state machine methods
// (ApplyBatch, Snapshot, Restore, ...) are its group's, so a range that is
// its group's only span is used as the group's state machine, as before
// groups could hold several spans.
type Range struct {
	g      *Group
	store  *Store
	id     uint64
	logger *slog.Logger

	// state is the span's state as applied (guarded by g.mu; the apply
	// goroutine is the only writer).
	state *pb.RangeState
	// committed is the state as the file holds it (the last commit of
	// this group's entries, a restore): what Summary reports. Never
	// modified (ApplyBatch works on a copy).
	committed atomic.Pointer[pb.RangeState]

	// prune is where the range's next request prune starts (dedup.go);
	// used by the apply goroutine only.
	prune pruneCursor

	// readState caches the decoded committed state for reads.
	readState atomic.Pointer[stateView]

	retired atomic.Bool // merged away: serves nothing
}

var _ raft.BatchingFSM = (*Range)(nil)

// OpenRange returns the state machine of a range already in the store:
// the range as a span of the group that serves it, which opens with it.
func (s *Store) OpenRange(rangeID uint64, logger *slog.Logger) (*Range, error) {
	var st *pb.RangeState
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		st, err = getState(tx, rangeID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %d: %v", ErrRangeNotFound, rangeID, err)
	}
	if st.GetRange().GetGroupId() == 0 {
		// Its group's only span: no need to look for others.
		return newGroup(s, rangeID, logger, []*pb.RangeState{st}).spans[rangeID], nil
	}
	g, err := s.OpenGroup(st.GetRange().GetGroupId(), logger)
	if err != nil {
		return nil, err
	}
	r, ok := g.Span(rangeID)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrRangeNotFound, rangeID)
	}
	return r, nil
}

// Group is the group that serves the range.
func (r *Range) Group() *Group { return r.g }

// SetHooks installs the server's hooks on the range's group; call before
// the Raft group starts.
func (r *Range) SetHooks(h Hooks) { r.g.SetHooks(h) }

// ID is the range id.
func (r *Range) ID() uint64 { return r.id }

// Descriptor returns the range's current descriptor.
func (r *Range) Descriptor() *pb.RangeDescriptor {
	r.g.mu.RLock()
	defer r.g.mu.RUnlock()
	return r.state.GetRange()
}

// State returns a copy of the range's state, with the group's applied
// index (a span's own record holds a lower bound: ApplyBatch).
func (r *Range) State() *pb.RangeState {
	r.g.mu.RLock()
	defer r.g.mu.RUnlock()
	st := proto.Clone(r.state).(*pb.RangeState)
	st.AppliedIndex = max(st.GetAppliedIndex(), r.g.last)
	return st
}

// Summary is what a status report needs of the state.
type Summary struct {
	Range        *pb.RangeDescriptor
	AppliedIndex uint64
	Frozen       bool
	FrozenIndex  uint64
	EntityCount  uint64
	Bytes        uint64
	// Bootstrap: a member of the group's initial configuration (its empty
	// state at applied index 0 is the range's); otherwise a replica at
	// applied index 0 waits for its first snapshot.
	Bootstrap bool
}

// Summary returns the reported part of the state without copying it (the
// heartbeat reads it for every hosted range twice a second; State's deep
// copy was a tenth of an idle server's CPU at 1,000 ranges). It is the
// state the file holds, not one applied but still in the pending group
// commit: the master acts on reports (a merge is recorded COMMIT once every
// replica of the right range reported its freeze applied, and each
// server's replica of the left range then waits for its replica of the
// right one to hold the freeze, waitMerges), and a crash loses what the
// file does not hold.
//
// Its applied index is the group's committed one: a span's record holds a
// lower bound (ApplyBatch).
func (r *Range) Summary() Summary {
	st := r.committed.Load()
	return Summary{Range: st.GetRange(), AppliedIndex: max(st.GetAppliedIndex(), r.g.applied.Load()), Frozen: st.GetFrozen(),
		FrozenIndex: st.GetFrozenIndex(), EntityCount: st.GetEntityCount(), Bytes: st.GetBytes(), Bootstrap: st.GetBootstrap()}
}

// Urge asks for the pending group commit now (a reader waits for it).
func (r *Range) Urge() { r.g.Urge() }

// AppliedIndex is the index of the last log entry of the range's group
// committed to the file.
func (r *Range) AppliedIndex() uint64 { return r.g.AppliedIndex() }

// WaitApplied blocks until the group's applied index reaches idx.
func (r *Range) WaitApplied(ctx context.Context, idx uint64) error {
	return r.g.WaitApplied(ctx, idx)
}

// Apply applies one entry of the range's group's log.
func (r *Range) Apply(l *raft.Log) interface{} { return r.g.Apply(l) }

// ApplyBatch applies entries of the range's group's log (Group.ApplyBatch).
func (r *Range) ApplyBatch(logs []*raft.Log) []interface{} { return r.g.ApplyBatch(logs) }

// Snapshot captures the range's group (Group.Snapshot).
func (r *Range) Snapshot() (raft.FSMSnapshot, error) { return r.g.Snapshot() }

// Restore replaces the range's group with a snapshot's (Group.Restore).
func (r *Range) Restore(rc io.ReadCloser) error { return r.g.Restore(rc) }

// Frozen reports whether the range is frozen for a merge, or merged away:
// it serves neither reads nor writes.
func (r *Range) Frozen() bool {
	if r.retired.Load() || r.g.retired.Load() {
		return true
	}
	r.g.mu.RLock()
	defer r.g.mu.RUnlock()
	return r.state.GetFrozen()
}

// isClientWrite reports whether a log entry is a client write (field 1,
// the kind, comes first in an encoded Command; anything else counts as not
// a write).
func isClientWrite(data []byte) bool {
	return len(data) >= 2 && data[0] == 0x08 &&
		(data[1] == byte(pb.CommandKind_COMMAND_KIND_WRITE) || data[1] == byte(pb.CommandKind_COMMAND_KIND_WRITE_BATCH))
}
