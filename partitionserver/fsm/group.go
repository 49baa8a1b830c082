package fsm

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// Group is the state machine of one Raft group's replica: the group's log
// applied to the spans (ranges) it serves (docs/range-groups.md). A group
// is named by the range it started as, and serves exactly that range until
// a split in the group (SPLIT_SPAN) gives it a second span; a record whose
// group_id is 0 is its group's only span, so a group with several spans
// names itself in every span's record.
//
// Every span's record carries the group's applied index, written with the
// span in every batch's transaction: a restart skips what any record says
// was applied (all say the same), and a span's Summary keeps its meaning.
type Group struct {
	store  *Store
	id     uint64
	logger *slog.Logger

	// mu guards spans, last, and each span's state between the apply
	// goroutine (the only writer) and readers.
	mu    sync.RWMutex
	spans map[uint64]*Range
	// sorted is spans' values in range id order (resortLocked), replaced
	// whole whenever spans changes.
	sorted []*Range
	// last is the index of the last entry applied, committed to the file
	// or still in the pending group commit.
	last uint64

	// checkedSnapshot is the id of the newest stored snapshot whose header
	// RestoreNewerSnapshot found not ahead of the state.
	checkedSnapshot atomic.Pointer[string]

	hooks Hooks

	// bufs are the last batch's apply states of the spans, for the next
	// (takeBufs); only the apply goroutine touches them.
	bufs applyBufs

	// checked is 1 + the store's records count when this group last
	// read every span's record (0: never); only the apply goroutine
	// touches it.
	checked uint64

	applied  atomic.Uint64 // committed to the file
	retired  atomic.Bool   // every span merged away: serves nothing
	waitMu   sync.Mutex
	appliedC chan struct{} // closed and replaced on every applied batch
}

var _ raft.BatchingFSM = (*Group)(nil)

// OpenGroup returns the state machine of a group whose spans are in the
// store: every range whose record names the group.
func (s *Store) OpenGroup(groupID uint64, logger *slog.Logger) (*Group, error) {
	var states []*pb.RangeState
	err := s.db.View(func(tx *bolt.Tx) error {
		ids, err := spanIDs(tx, groupID)
		if err != nil {
			return err
		}
		for _, id := range ids {
			st, err := getState(tx, id)
			if err != nil {
				return err
			}
			states = append(states, st)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: group %d: %v", ErrRangeNotFound, groupID, err)
	}
	if len(states) == 0 {
		return nil, fmt.Errorf("%w: group %d has no span here", ErrRangeNotFound, groupID)
	}
	return newGroup(s, groupID, logger, states), nil
}

func newGroup(s *Store, groupID uint64, logger *slog.Logger, states []*pb.RangeState) *Group {
	g := &Group{store: s, id: groupID, logger: logger, spans: make(map[uint64]*Range, len(states)), appliedC: make(chan struct{})}
	for _, st := range states {
		g.spans[st.GetRange().GetRangeId()] = g.newSpan(st)
		g.last = max(g.last, st.GetAppliedIndex())
	}
	g.resortLocked()
	g.applied.Store(g.last)
	return g
}

func (g *Group) newSpan(st *pb.RangeState) *Range {
	r := g.pendingSpan(st)
	r.committed.Store(st)
	return r
}

// pendingSpan is a span a batch created: its state is not in the file
// until the batch is committed, so it has no committed state yet, and
// Span and Spans do not show it (Group.committed stores it).
func (g *Group) pendingSpan(st *pb.RangeState) *Range {
	return &Range{g: g, store: g.store, id: st.GetRange().GetRangeId(), logger: g.logger, state: st}
}

// spanIDs lists, in range id order, the ranges stored in tx whose records
// name group: the file is the one owner of which spans a group serves.
// It reads each record's group id without decoding the record (a group
// opens on every wake from quiescence).
func spanIDs(tx *bolt.Tx, group uint64) ([]uint64, error) {
	var ids []uint64
	err := tx.Bucket(bucketRanges).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("fsm: range key %x", k)
		}
		id := binary.BigEndian.Uint64(k)
		g, err := recordGroup(v)
		if err != nil {
			return fmt.Errorf("fsm: range state %d: %w", id, err)
		}
		if g == 0 {
			g = id
		}
		if g == group {
			ids = append(ids, id)
		}
		return nil
	})
	return ids, err
}

// recordGroup is RangeState.range.group_id of an encoded state (0 when
// unset), read as the generated code would (the last value wins).
func recordGroup(v []byte) (uint64, error) {
	var group uint64
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		v = v[n:]
		if num != 1 || typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, v)
			if m < 0 {
				return 0, protowire.ParseError(m)
			}
			v = v[m:]
			continue
		}
		d, m := protowire.ConsumeBytes(v)
		if m < 0 {
			return 0, protowire.ParseError(m)
		}
		v = v[m:]
		for len(d) > 0 {
			num, typ, n := protowire.ConsumeTag(d)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			d = d[n:]
			if num == 8 && typ == protowire.VarintType {
				x, m := protowire.ConsumeVarint(d)
				if m < 0 {
					return 0, protowire.ParseError(m)
				}
				group, d = x, d[m:]
				continue
			}
			m := protowire.ConsumeFieldValue(num, typ, d)
			if m < 0 {
				return 0, protowire.ParseError(m)
			}
			d = d[m:]
		}
	}
	return group, nil
}

// ID is the group's id.
func (g *Group) ID() uint64 { return g.id }

// SetHooks installs the server's hooks; call before the Raft group starts.
func (g *Group) SetHooks(h Hooks) { g.hooks = h }

// Span returns the group's span of range id, if it serves it and the file
// holds it (a span split off by a batch not yet committed is not shown).
func (g *Group) Span(rangeID uint64) (*Range, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	r, ok := g.spans[rangeID]
	if !ok || r.committed.Load() == nil {
		return nil, false
	}
	return r, true
}

// Spans returns the group's spans in range id order (those the file
// holds, as Span).
func (g *Group) Spans() []*Range {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return slices.DeleteFunc(slices.Clone(g.spansLocked()), func(r *Range) bool { return r.committed.Load() == nil })
}

// spansLocked lists every span the group's log made, committed or not:
// what the next batch applies to. The slice is shared: read it, never
// change it.
func (g *Group) spansLocked() []*Range { return g.sorted }

// resortLocked rebuilds sorted after spans changed; mu is held for
// writing. Every batch reads the list, and sorting a group of many spans
// per batch was a measurable part of a one-write entry.
func (g *Group) resortLocked() {
	out := make([]*Range, 0, len(g.spans))
	for _, r := range g.spans {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *Range) int { return cmp.Compare(a.id, b.id) })
	g.sorted = out
}

// Urge asks for the pending group commit now (a reader waits for it).
func (g *Group) Urge() { g.store.Urge() }

// AppliedIndex is the index of the last log entry committed to the file.
func (g *Group) AppliedIndex() uint64 { return g.applied.Load() }

// WaitApplied blocks until the applied index reaches idx.
func (g *Group) WaitApplied(ctx context.Context, idx uint64) error {
	for {
		g.waitMu.Lock()
		ch := g.appliedC
		g.waitMu.Unlock()
		if g.applied.Load() >= idx {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (g *Group) notifyApplied(idx uint64) {
	g.applied.Store(idx)
	g.waitMu.Lock()
	close(g.appliedC)
	g.appliedC = make(chan struct{})
	g.waitMu.Unlock()
}

// Apply applies one log entry (raft calls ApplyBatch instead; kept for the
// plain FSM interface).
func (g *Group) Apply(l *raft.Log) interface{} {
	return g.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in one bbolt transaction. Entries
// at or below the applied index were applied before a restart and are
// skipped.
//
// A batch writes back only the spans its commands changed, plus the
// group's carrier (carrier), each with the batch's last index: a span's
// stored applied index is a lower bound, and the group's is the highest
// of its records (newGroup). Every change to a span is written in the same
// transaction as the carrier's raised index, so a restart skips every
// entry whose effects the file holds, and one that it replays touched no
// span still the group's (a span it changed would carry its index).
func (g *Group) ApplyBatch(logs []*raft.Log) []interface{} {
	results := make([]interface{}, len(logs))
	g.mu.RLock()
	applied := g.last
	if len(logs) == 0 || logs[len(logs)-1].Index <= applied {
		g.mu.RUnlock()
		return results
	}
	bufs := g.takeBufs()
	g.mu.RUnlock()
	g.waitMerges(logs, applied)
	c := &applyCtx{store: g.store, group: g.id, owner: g}
	var gone []*Range
	// Entries other than client writes (splits, freezes, merges, membership)
	// are rare and others wait for their effects (hooks that run after the
	// commit, the master's reshaping steps): commit them at once instead of
	// after the group-commit interval.
	urgent := false
	last := applied
	err := g.store.apply(func(tx *bolt.Tx) error {
		c.tx = tx
		check := g.store.records.Load() + 1
		c.spans, c.edited = bufs.spans, bufs.edited
		if g.checked != check {
			c.spans, gone = g.liveSpans(tx, bufs.spans)
		}
		c.spansChanged = len(gone) > 0
		g.checked = check
		if len(c.spans) == 0 {
			g.settle(c, gone)
			return nil
		}
		for i, l := range logs {
			if l.Index <= applied {
				continue
			}
			c.log = l
			switch l.Type {
			case raft.LogCommand:
				results[i] = applyCommand(c, l.Data)
				if !isClientWrite(l.Data) {
					// Splits, merges, detaches and adds create, take or
					// delete records; client writes never do.
					urgent = true
					g.store.records.Add(1)
				}
			case raft.LogConfiguration:
				urgent = true
			}
			if err := c.entryApplied(l.Index); err != nil {
				return err
			}
			last = l.Index
		}
		if len(c.spans) > 0 {
			c.carrier().edit(c).AppliedIndex = last
		}
		if err := c.writeBack(); err != nil {
			return err
		}
		g.settle(c, gone)
		return nil
	}, func() { g.committed(c, last) })
	if err != nil {
		// The file can no longer follow the log; continuing would diverge
		// from the other replicas.
		panic(fmt.Sprintf("fsm: group %d: apply failed: %v", g.id, err))
	}
	if urgent {
		g.store.Urge()
	}
	if len(c.spans) == 0 {
		for i := range results {
			results[i] = &Result{Err: ErrRangeNotFound}
		}
		return results
	}
	g.mu.Lock()
	// A span the batch did not edit kept the state it started from.
	for _, sc := range c.commit {
		sc.r.state = sc.state
	}
	g.last = last
	g.mu.Unlock()
	g.keepBufs(c)
	return results
}

// applyBufs are the group's spans as a batch applies to them
// (applyCtx.spans, each span's state from before the batch), kept for the
// next batch: a batch that leaves the set of spans as it was leaves every
// entry holding its span's state again once it published them (keepBufs),
// so the next batch starts from them without reading every span, and a
// batch that writes one span of a group of a thousand costs that span
// (docs/performance.md, session 37). Only the apply goroutine touches
// them; nothing keeps an entry past ApplyBatch (Group.committed reads
// applyCtx.commit).
type applyBufs struct {
	// sorted is the group's sorted list the entries were made from:
	// replaced whenever the set of spans changes (resortLocked), which
	// makes them stale.
	sorted []*Range
	spans  []*spanApply
	edited []*spanApply
	// ok: the last batch left the entries matching their spans' states.
	ok bool
}

// takeBufs returns the batch's spans' apply states: the last batch's when
// they still match the group's spans, else made anew from them. g.mu is
// held.
func (g *Group) takeBufs() *applyBufs {
	b, sorted := &g.bufs, g.spansLocked()
	if b.ok && len(sorted) > 0 && len(b.sorted) == len(sorted) && &b.sorted[0] == &sorted[0] {
		b.ok = false // until keepBufs: a batch that panics leaves them stale
		return b
	}
	all := make([]spanApply, len(sorted))
	spans := make([]*spanApply, len(sorted))
	for i, r := range sorted {
		all[i] = spanApply{r: r, state: r.state}
		spans[i] = &all[i]
	}
	*b = applyBufs{sorted: sorted, spans: spans, edited: b.edited[:0]}
	return b
}

// keepBufs readies the group's apply states for the next batch once c's
// batch published its spans' states: every entry holds its span's state
// and is unedited again. A batch that changed the set of spans resorted
// the group's list; the next batch makes its entries anew.
func (g *Group) keepBufs(c *applyCtx) {
	if c.spansChanged {
		return
	}
	for _, sp := range c.edited {
		sp.edited = false
	}
	g.bufs.edited = c.edited[:0]
	g.bufs.ok = true
}

// liveSpans is spans without those whose stored records no longer name
// the group (gone): read when the store's records changed since the group
// last looked (Group.checked).
func (g *Group) liveSpans(tx *bolt.Tx, spans []*spanApply) (live []*spanApply, gone []*Range) {
	live = spans
	for i, sp := range spans {
		if namesGroup(tx.Bucket(bucketRanges).Get(u64(sp.r.id)), sp.r.id, g.id) {
			if gone != nil {
				live = append(live, sp)
			}
			continue
		}
		// Merged into its left neighbour (or deleted) by an entry of
		// another group, or its record taken by another group (a
		// snapshot of the group that serves it now, a split replacing a
		// record stored ahead): writing its state back would resurrect
		// it, or take the span from the group its record names.
		if gone == nil {
			live = append(make([]*spanApply, 0, len(spans)), spans[:i]...)
		}
		gone = append(gone, sp.r)
	}
	return live, gone
}

// writeBack stores the state of every span the batch edited, in range id
// order, and lists the states its commit makes the spans' (commit).
func (c *applyCtx) writeBack() error {
	if !c.spansChanged && len(c.edited) > 1 {
		slices.SortFunc(c.edited, func(a, b *spanApply) int { return cmp.Compare(a.r.id, b.r.id) })
	}
	touched := c.touched()
	c.commit = make([]spanCommit, 0, len(touched))
	for _, sp := range touched {
		c.commit = append(c.commit, spanCommit{r: sp.r, state: sp.state})
		if !sp.edited {
			continue
		}
		if err := putState(c.tx, sp.state); err != nil {
			return err
		}
	}
	return nil
}

// entryApplied records entry index as applied in every span the batch
// changed, and prunes every span's expired request records when the index
// crosses a multiple of pruneEvery, which every replica does at the same
// entry (the prune reads a span's state and changes only its records).
func (c *applyCtx) entryApplied(index uint64) error {
	for _, sp := range c.touched() {
		if sp.edited {
			sp.state.AppliedIndex = index
		}
	}
	if index%pruneEvery != 0 {
		return nil
	}
	for _, sp := range c.spans {
		// A frozen range's records stay as the freeze left them: a
		// merge takes them over from each server's replica, which may
		// have applied entries past the freeze that another has not
		// (the merge needs only the freeze), so a prune here would
		// leave the merged range's replicas with different records.
		if !sp.state.GetFrozen() {
			if err := c.store.prune(c.tx, sp.state, &sp.r.prune); err != nil {
				return err
			}
		}
	}
	return nil
}

// carrier is the span whose record carries the group's applied index in
// every batch, changed or not: the namesake while it is one of the
// group's spans, else the span of lowest id. Chosen after the batch's
// commands, so a span they took away never carries it.
func (c *applyCtx) carrier() *spanApply {
	if sp := c.span(c.group); sp != nil {
		return sp
	}
	return c.spans[0]
}

// settle makes the group's span set the batch's, at the end of its
// transaction: before its commit, whose hooks (SpansChanged) may look the
// spans up, and before the next batch, which applies to them. Spans gone
// serve nothing from now on; spans the batch created join (Span shows
// them once committed).
func (g *Group) settle(c *applyCtx, gone []*Range) {
	// Spans a command of the batch took away (a merge of spans) go as
	// spans another group's entry took.
	gone = append(gone, c.dropped...)
	for _, r := range gone {
		r.retired.Store(true)
	}
	if len(c.spans) == 0 {
		g.retired.Store(true)
	}
	if !c.spansChanged {
		return
	}
	c.live = make([]uint64, 0, len(c.spans))
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range gone {
		delete(g.spans, r.id)
	}
	for _, sp := range c.spans {
		g.spans[sp.r.id] = sp.r
		c.live = append(c.live, sp.r.id)
	}
	g.resortLocked()
}

// namesGroup reports whether v, the stored record of span id (nil: none),
// names group. A record that does not decode counts as the group's: the
// batch writes its state over it, as before the group was checked.
func namesGroup(v []byte, id, group uint64) bool {
	if v == nil {
		return false
	}
	grp, err := recordGroup(v)
	if err != nil {
		return true
	}
	if grp == 0 {
		grp = id
	}
	return grp == group
}

// committed runs once a batch's transaction is committed: readers may see
// it, and ranges it created exist.
func (g *Group) committed(c *applyCtx, last uint64) {
	// A span the batch did not edit holds the state an earlier batch's
	// commit stored. Not c.spans: the next batch, which may have started,
	// reuses its entries (applyBufs).
	for _, sc := range c.commit {
		sc.r.committed.Store(sc.state)
	}
	if len(c.spans) == 0 {
		// Gone: nothing was applied.
		g.notifyApplied(g.applied.Load())
	} else {
		g.notifyApplied(last)
	}
	if g.hooks == nil {
		return
	}
	if h, ok := g.hooks.(SpanHooks); ok && c.spansChanged {
		h.SpansChanged(g.id, c.live)
	}
	if len(c.spans) == 0 {
		return
	}
	for _, m := range c.created {
		g.hooks.RangeCreated(m.parent, m.desc, m.preferredLeader)
	}
	for _, m := range c.merged {
		g.hooks.RangeMerged(m.into, m.right)
	}
	if h, ok := g.hooks.(AttachHooks); ok {
		for _, a := range c.attached {
			h.RangeAttached(a.group, a.right)
		}
	}
	if q, ok := g.hooks.(QuiesceHook); ok && c.quiesced != 0 {
		q.Quiesced(g.id, c.quiesced)
	}
}

// applyCommand applies one entry's command to the span it addresses.
func applyCommand(c *applyCtx, data []byte) *Result {
	e, err := decodeEnvelope(data)
	if err != nil {
		return &Result{Err: err}
	}
	h, ok := handlers[e.kind]
	if !ok {
		return &Result{Err: fmt.Errorf("%w: %v", ErrUnknownCommand, e.kind)}
	}
	c.target = e.rangeID
	if !c.address(e.rangeID) && !groupWide[e.kind] {
		return &Result{Err: fmt.Errorf("%w: range %d in group %d", ErrRangeNotFound, c.spanID(e.rangeID), c.group)}
	}
	return h(c, e.payload)
}

// Snapshot captures the group's spans at the current applied index. The
// bbolt read transaction it opens keeps that view until Release; what is
// applied but not yet committed is committed first, so the view holds
// every entry raft handed to the state machine.
func (g *Group) Snapshot() (raft.FSMSnapshot, error) {
	if err := g.store.Flush(); err != nil {
		return nil, err
	}
	tx, err := g.store.db.Begin(false)
	if err != nil {
		return nil, err
	}
	var states []*pb.RangeState
	var applied uint64
	for _, r := range g.Spans() {
		st, err := getState(tx, r.id)
		if err != nil {
			continue // merged away since
		}
		states = append(states, st)
		applied = max(applied, st.GetAppliedIndex())
	}
	if len(states) == 0 {
		tx.Rollback()
		return nil, fmt.Errorf("%w: group %d", ErrRangeNotFound, g.id)
	}
	// A span's record holds a lower bound of the group's index
	// (ApplyBatch); a snapshot's spans are all at the group's, which the
	// flush above committed (raft takes a snapshot between batches).
	applied = max(applied, g.AppliedIndex())
	for _, st := range states {
		st.AppliedIndex = applied
	}
	return &snapshot{tx: tx, states: states}, nil
}

// Restore replaces the group's spans, their entities and state with a
// snapshot's.
func (g *Group) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var states []*pb.RangeState
	var subsumed []mergedSpan
	var attached []attachedSpan
	oldApplied := g.AppliedIndex()
	err := g.store.update(func(tx *bolt.Tx) error {
		var err error
		states, subsumed, attached, err = restoreInto(tx, rc, g.id)
		for _, st := range states {
			// Ownership of the table's records changed here, and
			// records were added: every range of the table rescans
			// once.
			g.store.tablePrune(st.GetRange().GetTableId()).invalidate()
		}
		return err
	})
	if err != nil {
		return err
	}
	g.mu.Lock()
	before := slices.Sorted(maps.Keys(g.spans))
	kept := make(map[uint64]*Range, len(states))
	for _, st := range states {
		r, ok := g.spans[st.GetRange().GetRangeId()]
		if !ok {
			r = g.newSpan(st)
		}
		r.state = st
		r.committed.Store(st)
		kept[r.id] = r
	}
	for id, r := range g.spans {
		if kept[id] == nil {
			r.retired.Store(true) // not the group's at the snapshot
		}
	}
	g.spans = kept
	g.resortLocked()
	after := slices.Sorted(maps.Keys(kept))
	g.last = states[0].GetAppliedIndex()
	g.mu.Unlock()
	g.notifyApplied(states[0].GetAppliedIndex())
	if g.hooks == nil {
		return nil
	}
	if h, ok := g.hooks.(SpanHooks); ok && !slices.Equal(before, after) {
		h.SpansChanged(g.id, after)
	}
	for _, m := range subsumed {
		g.hooks.RangeMerged(m.into, m.right)
	}
	if h, ok := g.hooks.(AttachHooks); ok {
		for _, a := range attached {
			h.RangeAttached(a.group, a.right)
		}
	}
	if h, ok := g.hooks.(SplitMissedHooks); ok {
		// Every span's births were entries of this group's log: one
		// call, which reads the log's floor once.
		var missed []*pb.SplitBirth
		for _, st := range states {
			missed = append(missed, MissedSplits(st.GetRecentSplits(), oldApplied, st.GetAppliedIndex())...)
		}
		if len(missed) > 0 {
			h.SplitsMissed(g.id, oldApplied, missed)
		}
	}
	return nil
}

// mergeKind and attachKind are the first two bytes of an encoded merge
// and attach Command (field 1, varint): the apply loop spots them without
// decoding every entry.
var (
	mergeKind  = [2]byte{0x08, byte(pb.CommandKind_COMMAND_KIND_MERGE)}
	attachKind = [2]byte{0x08, byte(pb.CommandKind_COMMAND_KIND_ATTACH_SPAN)}
)

// waitsFreeze returns the range whose replica in this file must have
// applied its freeze before entry l applies, and the freeze's index: the
// right range of a merge (MERGE) or of an attach (ATTACH_SPAN), which
// take its rows over where they are (attach: an attach's). ok false for
// any other entry.
func waitsFreeze(l *raft.Log) (right, freeze uint64, attach, ok bool) {
	if l.Type != raft.LogCommand || len(l.Data) < 2 || l.Data[0] != mergeKind[0] || (l.Data[1] != mergeKind[1] && l.Data[1] != attachKind[1]) {
		return 0, 0, false, false
	}
	kind, payload, err := decodeCommand(l.Data)
	if err != nil {
		return 0, 0, false, false
	}
	switch kind {
	case pb.CommandKind_COMMAND_KIND_MERGE:
		var m pb.MergeCommand
		if proto.Unmarshal(payload, &m) != nil {
			return 0, 0, false, false
		}
		return m.GetRight().GetRangeId(), m.GetRightFreezeIndex(), false, true
	case pb.CommandKind_COMMAND_KIND_ATTACH_SPAN:
		var a pb.AttachSpanCommand
		if proto.Unmarshal(payload, &a) != nil {
			return 0, 0, false, false
		}
		return a.GetRight().GetRangeId(), a.GetRightFreezeIndex(), true, true
	}
	return 0, 0, false, false
}

// waitMerges blocks until, for every merge and attach among logs, the
// right range's replica in this file has applied its freeze. The master
// proposes either only after every replica of the right range reported
// that, so this returns at once unless the file is being rebuilt; it runs
// outside the shared transaction, which the right range's own apply
// needs. An attach's right range whose record here no longer names its
// own group (attached already: a replay, or a snapshot brought it) waits
// for nothing: the apply answers from the group's own state.
func (g *Group) waitMerges(logs []*raft.Log, applied uint64) {
	for _, l := range logs {
		if l.Index <= applied {
			continue
		}
		right, freeze, attach, ok := waitsFreeze(l)
		if !ok {
			continue
		}
		for waited := time.Duration(0); ; waited += 5 * time.Millisecond {
			var st *pb.RangeState
			_ = g.store.db.View(func(tx *bolt.Tx) error {
				st, _ = getState(tx, right)
				return nil
			})
			if st == nil || st.GetAppliedIndex() >= freeze || (attach && rangegroup.GroupOf(st.GetRange()) != right) {
				break // absent: applyMerge (applyAttachSpan) reports it
			}
			if waited%(5*time.Second) == 0 && waited > 0 {
				g.logger.Warn("merge waits for the right range's replica to apply its freeze", "group", g.id, "right", right, "applied", st.GetAppliedIndex(), "freeze", freeze)
			}
			g.store.Urge()
			time.Sleep(5 * time.Millisecond)
		}
	}
}
