package fsm

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
// up to oldApplied, not 0) carried it past them (MissedSplits). Optional,
// so that hooks of tests need not implement it.
type SplitMissedHooks interface {
	SplitsMissed(parent, oldApplied uint64, missed []*pb.SplitBirth)
}

// applyCtx is what a command handler may touch: the open write transaction
// and the range's state, which the batch writes back once at its end.
type applyCtx struct {
	tx      *bolt.Tx
	state   *pb.RangeState
	log     *raft.Log
	created []created
	merged  []uint64
	// quiesced is the index of the last QUIESCE marker applied.
	quiesced uint64
	// arena holds the keys and values a client write entry hands to
	// bbolt (write.go, reserve).
	arena []byte
	// store holds the prune state of the range's table (dedup.go);
	// prunes caches it for the entries of one apply (one table).
	store  *Store
	prunes *tablePrune
}

// tablePrune is the prune state shared by the ranges of the range's table
// here (the store's write lock is held while applying).
func (c *applyCtx) tablePrune() *tablePrune {
	if c.prunes == nil {
		c.prunes = c.store.tablePrune(c.state.GetRange().GetTableId())
	}
	return c.prunes
}

// created is a range a command created, for the hooks.
type created struct {
	desc            *pb.RangeDescriptor
	preferredLeader string
}

// handler applies one command's payload.
type handler func(c *applyCtx, payload []byte) *Result

var handlers = map[pb.CommandKind]handler{}

// register adds a command handler; each command kind registers itself from
// its own file.
func register(kind pb.CommandKind, h handler) {
	if _, dup := handlers[kind]; dup {
		panic(fmt.Sprintf("fsm: handler for %v registered twice", kind))
	}
	handlers[kind] = h
}

// Range is the state machine of one range replica.
type Range struct {
	store  *Store
	id     uint64
	logger *slog.Logger

	// mu guards state between the apply goroutine and readers of the
	// descriptor; apply is the only writer.
	mu    sync.RWMutex
	state *pb.RangeState
	// committed is the state as the file holds it (the last commit of
	// this range's entries, a restore): what Summary reports. Never
	// modified (ApplyBatch works on a copy).
	committed atomic.Pointer[pb.RangeState]
	// checkedSnapshot is the id of the newest stored snapshot whose header
	// RestoreNewerSnapshot found not ahead of the state.
	checkedSnapshot atomic.Pointer[string]

	hooks Hooks

	// prune is where the range's next request prune starts (dedup.go);
	// used by the apply goroutine only.
	prune pruneCursor

	// readState caches the decoded committed state for reads.
	readState atomic.Pointer[stateView]

	applied  atomic.Uint64
	retired  atomic.Bool // merged away: serves nothing
	waitMu   sync.Mutex
	appliedC chan struct{} // closed and replaced on every applied batch
}

var _ raft.BatchingFSM = (*Range)(nil)

// OpenRange returns the state machine of a range already in the store.
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
	r := &Range{store: s, id: rangeID, logger: logger, state: st, appliedC: make(chan struct{})}
	r.committed.Store(st)
	r.applied.Store(st.GetAppliedIndex())
	return r, nil
}

// SetHooks installs the server's hooks; call before the Raft group starts.
func (r *Range) SetHooks(h Hooks) { r.hooks = h }

// ID is the range id.
func (r *Range) ID() uint64 { return r.id }

// Descriptor returns the range's current descriptor.
func (r *Range) Descriptor() *pb.RangeDescriptor {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.GetRange()
}

// State returns a copy of the range's state.
func (r *Range) State() *pb.RangeState {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return proto.Clone(r.state).(*pb.RangeState)
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
func (r *Range) Summary() Summary {
	st := r.committed.Load()
	return Summary{Range: st.GetRange(), AppliedIndex: st.GetAppliedIndex(), Frozen: st.GetFrozen(),
		FrozenIndex: st.GetFrozenIndex(), EntityCount: st.GetEntityCount(), Bytes: st.GetBytes(), Bootstrap: st.GetBootstrap()}
}

// Urge asks for the pending group commit now (a reader waits for it).
func (r *Range) Urge() { r.store.Urge() }

// AppliedIndex is the index of the last log entry committed to the file.
func (r *Range) AppliedIndex() uint64 { return r.applied.Load() }

// WaitApplied blocks until the applied index reaches idx.
func (r *Range) WaitApplied(ctx context.Context, idx uint64) error {
	for {
		r.waitMu.Lock()
		ch := r.appliedC
		r.waitMu.Unlock()
		if r.applied.Load() >= idx {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *Range) notifyApplied(idx uint64) {
	r.applied.Store(idx)
	r.waitMu.Lock()
	close(r.appliedC)
	r.appliedC = make(chan struct{})
	r.waitMu.Unlock()
}

// Apply applies one log entry (raft calls ApplyBatch instead; kept for the
// plain FSM interface).
func (r *Range) Apply(l *raft.Log) interface{} {
	return r.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in one bbolt transaction together with
// the new applied index. Entries at or below the stored applied index were
// applied before a restart and are skipped.
func (r *Range) ApplyBatch(logs []*raft.Log) []interface{} {
	results := make([]interface{}, len(logs))
	r.mu.RLock()
	state := proto.Clone(r.state).(*pb.RangeState)
	r.mu.RUnlock()
	applied := state.GetAppliedIndex()
	if len(logs) == 0 || logs[len(logs)-1].Index <= applied {
		return results
	}
	r.waitMerges(logs, applied)
	var made []created
	var merged []uint64
	var quiesced uint64
	gone := false
	// Entries other than client writes (splits, freezes, merges, membership)
	// are rare and others wait for their effects (hooks that run after the
	// commit, the master's reshaping steps): commit them at once instead of
	// after the group-commit interval.
	urgent := false
	last := state.GetAppliedIndex()
	err := r.store.apply(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketRanges).Get(u64(r.id)) == nil {
			// Merged into the left neighbour (or deleted) by an entry of
			// another group: this group is over, and writing its state
			// back would resurrect it.
			gone = true
			return nil
		}
		c := &applyCtx{tx: tx, state: state, store: r.store}
		defer func() { made, merged, quiesced = c.created, c.merged, c.quiesced }()
		for i, l := range logs {
			if l.Index <= applied {
				continue
			}
			c.log = l
			switch l.Type {
			case raft.LogCommand:
				results[i] = r.applyCommand(c, l.Data)
				urgent = urgent || !isClientWrite(l.Data)
			case raft.LogConfiguration:
				urgent = true
			}
			state.AppliedIndex = l.Index
			// A frozen range's records stay as the freeze left them: a
			// merge takes them over from each server's replica, which may
			// have applied entries past the freeze that another has not
			// (the merge needs only the freeze), so a prune here would
			// leave the merged range's replicas with different records.
			if l.Index%pruneEvery == 0 && !state.GetFrozen() {
				if err := r.store.prune(tx, state, &r.prune); err != nil {
					return err
				}
			}
		}
		last = state.GetAppliedIndex()
		return putState(tx, state)
	}, func() {
		// Committed: readers may see it, and ranges it created exist.
		if !gone {
			r.committed.Store(state)
		}
		r.notifyApplied(last)
		if r.hooks != nil {
			for _, m := range made {
				r.hooks.RangeCreated(r.id, m.desc, m.preferredLeader)
			}
			for _, id := range merged {
				r.hooks.RangeMerged(r.id, id)
			}
			if q, ok := r.hooks.(QuiesceHook); ok && quiesced != 0 {
				q.Quiesced(r.id, quiesced)
			}
		}
	})
	if err != nil {
		// The file can no longer follow the log; continuing would diverge
		// from the other replicas.
		panic(fmt.Sprintf("fsm: range %d: apply failed: %v", r.id, err))
	}
	if urgent {
		r.store.Urge()
	}
	if gone {
		r.retired.Store(true)
		for i := range results {
			results[i] = &Result{Err: ErrRangeNotFound}
		}
		return results
	}
	r.mu.Lock()
	r.state = state
	r.mu.Unlock()
	return results
}

func (r *Range) applyCommand(c *applyCtx, data []byte) *Result {
	kind, payload, err := decodeCommand(data)
	if err != nil {
		return &Result{Err: err}
	}
	h, ok := handlers[kind]
	if !ok {
		return &Result{Err: fmt.Errorf("%w: %v", ErrUnknownCommand, kind)}
	}
	return h(c, payload)
}

// Snapshot captures the range at the current applied index. The bbolt read
// transaction it opens keeps that view until Release; what is applied but
// not yet committed is committed first, so the view holds every entry raft
// handed to the state machine.
func (r *Range) Snapshot() (raft.FSMSnapshot, error) {
	if err := r.store.Flush(); err != nil {
		return nil, err
	}
	tx, err := r.store.db.Begin(false)
	if err != nil {
		return nil, err
	}
	st, err := getState(tx, r.id)
	if err != nil {
		tx.Rollback()
		return nil, err
	}
	return &snapshot{tx: tx, state: st}, nil
}

// Restore replaces the range's entities and state with a snapshot's.
func (r *Range) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var state *pb.RangeState
	var subsumed []uint64
	oldApplied := r.AppliedIndex()
	err := r.store.update(func(tx *bolt.Tx) error {
		var err error
		state, subsumed, err = restoreInto(tx, rc, r.id)
		if state != nil {
			// Ownership of the table's records changed here, and records
			// were added: every range of the table rescans once.
			r.store.tablePrune(state.GetRange().GetTableId()).invalidate()
		}
		return err
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.state = state
	r.mu.Unlock()
	r.committed.Store(state)
	r.notifyApplied(state.GetAppliedIndex())
	if r.hooks != nil {
		for _, id := range subsumed {
			r.hooks.RangeMerged(r.id, id)
		}
		if h, ok := r.hooks.(SplitMissedHooks); ok {
			if missed := MissedSplits(state.GetRecentSplits(), oldApplied, state.GetAppliedIndex()); len(missed) > 0 {
				h.SplitsMissed(r.id, oldApplied, missed)
			}
		}
	}
	return nil
}

// Frozen reports whether the range is frozen for a merge, or merged away:
// it serves neither reads nor writes.
func (r *Range) Frozen() bool {
	if r.retired.Load() {
		return true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.GetFrozen()
}

// isClientWrite reports whether a log entry is a client write (field 1,
// the kind, comes first in an encoded Command; anything else counts as not
// a write).
func isClientWrite(data []byte) bool {
	return len(data) >= 2 && data[0] == 0x08 &&
		(data[1] == byte(pb.CommandKind_COMMAND_KIND_WRITE) || data[1] == byte(pb.CommandKind_COMMAND_KIND_WRITE_BATCH))
}

// mergeKind is the first two bytes of an encoded merge Command (field 1,
// varint): the apply loop spots merges without decoding every entry.
var mergeKind = [2]byte{0x08, byte(pb.CommandKind_COMMAND_KIND_MERGE)}

// waitMerges blocks until, for every merge among logs, the right range's
// replica in this file has applied its freeze. The master proposes a merge
// only after every replica of the right range reported that, so this
// returns at once unless the file is being rebuilt; it runs outside the
// shared transaction, which the right range's own apply needs.
func (r *Range) waitMerges(logs []*raft.Log, applied uint64) {
	for _, l := range logs {
		if l.Index <= applied || l.Type != raft.LogCommand || len(l.Data) < 2 || l.Data[0] != mergeKind[0] || l.Data[1] != mergeKind[1] {
			continue
		}
		kind, payload, err := decodeCommand(l.Data)
		var m pb.MergeCommand
		if err != nil || kind != pb.CommandKind_COMMAND_KIND_MERGE || proto.Unmarshal(payload, &m) != nil {
			continue
		}
		right := m.GetRight().GetRangeId()
		for waited := time.Duration(0); ; waited += 5 * time.Millisecond {
			var st *pb.RangeState
			_ = r.store.db.View(func(tx *bolt.Tx) error {
				st, _ = getState(tx, right)
				return nil
			})
			if st == nil || st.GetAppliedIndex() >= m.GetRightFreezeIndex() {
				break // absent: applyMerge reports it
			}
			if waited%(5*time.Second) == 0 && waited > 0 {
				r.logger.Warn("merge waits for the right range's replica to apply its freeze", "range", r.id, "right", right, "applied", st.GetAppliedIndex(), "freeze", m.GetRightFreezeIndex())
			}
			r.store.Urge()
			time.Sleep(5 * time.Millisecond)
		}
	}
}
