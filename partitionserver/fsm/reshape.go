package fsm

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/keys"
	pb "tablestore/proto/tablestorepb"
)

func init() {
	register(pb.CommandKind_COMMAND_KIND_SPLIT, applySplit)
	register(pb.CommandKind_COMMAND_KIND_FREEZE, applyFreeze)
	register(pb.CommandKind_COMMAND_KIND_ABSORB, applyAbsorb)
	// A membership change is the group's, whichever span it names.
	registerGroupWide(pb.CommandKind_COMMAND_KIND_SET_REPLICAS, applySetReplicas)
	register(pb.CommandKind_COMMAND_KIND_MERGE, applyMerge)
	register(pb.CommandKind_COMMAND_KIND_UNFREEZE, applyUnfreeze)
}

// countSpan counts the entities and bytes of a descriptor's span.
func countSpan(tx *bolt.Tx, d *pb.RangeDescriptor) (n, size uint64, err error) {
	b, err := tableBucket(tx, d.GetTableId(), false)
	if err != nil || b == nil {
		return 0, 0, err
	}
	err = walkSpan(b, d, func(_, v []byte) error {
		n++
		size += uint64(len(v))
		return nil
	})
	return n, size, err
}

// applySplit shrinks the range to [start, key) and stores the right-hand
// range [key, end) with the same replicas, in the same transaction. The data
// stays where it is: both ranges share the table's bucket.
func applySplit(c *applyCtx, payload []byte) *Result {
	var cmd pb.SplitCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil || cmd.GetNewRangeId() == 0 {
		return &Result{Err: fmt.Errorf("%w: split", ErrBadCommand)}
	}
	desc := c.state.GetRange()
	key := cmd.GetSplitKey()
	if right := splitAlready(c.tx, desc, key, cmd.GetNewRangeId()); right != nil {
		return &Result{Range: desc, Right: right}
	}
	if c.state.GetFrozen() {
		return &Result{Err: ErrRangeFrozen}
	}
	if key <= desc.GetStart() || !InRange(desc, key) {
		return &Result{Err: fmt.Errorf("%w: %q", ErrBadSplitKey, key)}
	}
	// A split must apply on every replica or on none: were the new range's
	// state already stored here (created ahead of the split by mistake),
	// failing on this replica alone would fork the group. The split is the
	// authority on the new range, so its state replaces any such record.
	left, right, n, size, err := c.cut(key, cmd.GetNewRangeId(), 0)
	if err != nil {
		return &Result{Err: err}
	}
	c.state.RecentSplits = recordSplit(c.state.GetRecentSplits(), c.log.Index, right)
	rs := &pb.RangeState{
		Range: right, LastTimestampUnixNano: c.state.GetLastTimestampUnixNano(),
		EntityCount: n, Bytes: size, Bootstrap: true,
	}
	if err := putState(c.tx, rs); err != nil {
		return &Result{Err: err}
	}
	// The right range's state may replace one stored ahead of the split,
	// whose Range here would keep a cursor for another span.
	c.tablePrune().invalidate()
	c.created = append(c.created, created{parent: left.GetRangeId(), desc: right, preferredLeader: cmd.GetPreferredLeader()})
	return &Result{Range: left, Right: right}
}

// cut shrinks the addressed span to [start, key) (generation + 1, group
// group: 0 keeps its own) and returns it with the right-hand part [key,
// end) as range newID of group group (0: its own), and the entities and
// bytes the right part holds, taken off the span's counters: what a split,
// in its group or into a new one, does to the span it divides.
func (c *applyCtx) cut(key string, newID, group uint64) (left, right *pb.RangeDescriptor, n, size uint64, err error) {
	desc := c.state.GetRange()
	right = &pb.RangeDescriptor{
		RangeId: newID, GroupId: group, Table: desc.GetTable(), TableId: desc.GetTableId(),
		Start: key, End: desc.GetEnd(), Generation: desc.GetGeneration() + 1, Replicas: desc.GetReplicas(),
	}
	if n, size, err = countSpan(c.tx, right); err != nil {
		return nil, nil, 0, 0, err
	}
	left = proto.Clone(desc).(*pb.RangeDescriptor)
	left.End = key
	left.Generation++
	if group != 0 {
		left.GroupId = group
	}
	c.state.Range = left
	c.state.EntityCount -= min(n, c.state.GetEntityCount())
	c.state.Bytes -= min(size, c.state.GetBytes())
	return left, right, n, size, nil
}

// maxRecentSplits bounds the splits a range's state remembers
// (RangeState.recent_splits). A replica that missed more splits than that
// by one snapshot finds the oldest children unrecorded: it waits for their
// leaders' join floors, as before the record.
const maxRecentSplits = 4

// recordSplit appends the split at index that created right to recent,
// dropping the oldest beyond maxRecentSplits.
func recordSplit(recent []*pb.SplitBirth, index uint64, right *pb.RangeDescriptor) []*pb.SplitBirth {
	out := append(recent, &pb.SplitBirth{Index: index, Right: right})
	if n := len(out); n > maxRecentSplits {
		out = append([]*pb.SplitBirth(nil), out[n-maxRecentSplits:]...)
	}
	return out
}

// MissedSplits returns the splits of recent that a replica whose state
// was applied up to oldApplied never applied, and which a snapshot
// applied up to newApplied carried past: index in (oldApplied,
// newApplied]. None when oldApplied is 0: a replica with no state of its
// own has no history to tell what it missed. Pure.
func MissedSplits(recent []*pb.SplitBirth, oldApplied, newApplied uint64) []*pb.SplitBirth {
	if oldApplied == 0 {
		return nil
	}
	var out []*pb.SplitBirth
	for _, b := range recent {
		if b.GetIndex() > oldApplied && b.GetIndex() <= newApplied && b.GetRight() != nil {
			out = append(out, b)
		}
	}
	return out
}

// splitAlready returns the right range this split created, if it applied
// before: the range ends at the split key and the split's new range is
// stored here starting there. A split proposed again after it applied
// (its answer lost to a leader change or a timeout, the master's range
// client asking again) then answers its result, not ErrBadSplitKey: the
// master would otherwise record neither half, nor place the new range's
// leader, for a split that happened. It changes nothing, so that it reads
// the new range's state here (another group's, not this log's) is safe:
// a replica where that state is gone (moved off, merged away) refuses
// instead, and refusing changes nothing either.
func splitAlready(tx *bolt.Tx, desc *pb.RangeDescriptor, key string, newID uint64) *pb.RangeDescriptor {
	if key == "" || key != desc.GetEnd() {
		return nil
	}
	rs, err := getState(tx, newID)
	if err != nil || rs.GetRange().GetTableId() != desc.GetTableId() || rs.GetRange().GetStart() != key {
		return nil
	}
	return rs.GetRange()
}

// applyFreeze stops reads and writes: the range is about to be merged into
// its left neighbour. The freeze's index is remembered: the merge waits
// until every replica has applied it. A freeze for a deleted table
// (table_deleted) is for good: applyUnfreeze refuses to undo it, so a
// merge aborted around the delete cannot make the range serve again. A
// malformed payload (none: a freeze from before the field) is a merge's.
func applyFreeze(c *applyCtx, payload []byte) *Result {
	if !c.state.GetFrozen() {
		c.state.Frozen = true
		c.state.FrozenIndex = c.log.Index
	}
	var cmd pb.FreezeCommand
	if proto.Unmarshal(payload, &cmd) == nil && cmd.GetTableDeleted() {
		c.state.TableDeleted = true
	}
	return &Result{Range: c.state.GetRange(), Index: c.state.GetFrozenIndex()}
}

// applyUnfreeze lets the range serve again after a freeze whose merge the
// master recorded as aborted (the master sends it only then, so no Merge
// for this freeze is ever proposed to the left range). It undoes only the
// freeze at the command's index: a late unfreeze of an earlier freeze,
// arriving after the range froze again, must not undo the new one, and a
// repeated one finds the range unfrozen. Either way a no-op, the same on
// every replica (the state it reads is the log's).
func applyUnfreeze(c *applyCtx, payload []byte) *Result {
	var cmd pb.UnfreezeCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil || cmd.GetFreezeIndex() == 0 {
		return &Result{Err: fmt.Errorf("%w: unfreeze", ErrBadCommand)}
	}
	if c.state.GetFrozen() && c.state.GetFrozenIndex() == cmd.GetFreezeIndex() && !c.state.GetTableDeleted() {
		c.state.Frozen = false
		c.state.FrozenIndex = 0
	}
	return &Result{Range: c.state.GetRange(), Index: c.state.GetFrozenIndex()}
}

// applyMerge extends the range over its frozen right neighbour without
// moving a row: on every server holding a replica of this range the
// neighbour's replica shares the state file, has applied the freeze (the
// master waited for it before proposing, and the apply loop waits again,
// see waitMerges), and cannot change after it, so its entities and request
// records, keyed by table and PartitionKey, already sit in this range's
// new span. The merge takes over the neighbour's counters and clock and
// deletes its state in the same transaction: the neighbour's replica here
// ends with this entry (Hooks.RangeMerged stops its group).
func applyMerge(c *applyCtx, payload []byte) *Result {
	var cmd pb.MergeCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil || cmd.GetRight() == nil {
		return &Result{Err: fmt.Errorf("%w: merge", ErrBadCommand)}
	}
	desc := c.state.GetRange()
	right := cmd.GetRight()
	if right.GetTableId() == desc.GetTableId() && desc.GetStart() < right.GetStart() && desc.GetEnd() == right.GetEnd() {
		return &Result{Range: desc} // a retried proposal: merged already
	}
	if c.state.GetFrozen() {
		// This range is itself frozen for a merge into its left
		// neighbour (a deposed master's freeze racing a new master's
		// merge): widened, it would no longer be the span that merge
		// names. Refused from this range's own replicated state, so
		// identically on every replica.
		return &Result{Err: fmt.Errorf("%w: range %d cannot merge its right neighbour", ErrRangeFrozen, desc.GetRangeId())}
	}
	if right.GetTableId() != desc.GetTableId() || desc.GetEnd() == "" || right.GetStart() != desc.GetEnd() {
		return &Result{Err: fmt.Errorf("%w: %q..%q after %q..%q", ErrNotAdjacent, right.GetStart(), right.GetEnd(), desc.GetStart(), desc.GetEnd())}
	}
	if c.serves(right.GetRangeId()) {
		// Two spans of one group share its log: their merge needs no
		// freeze, and this command's checks (a freeze in another log)
		// do not hold. Refused from the group's own state: alike on
		// every replica.
		return &Result{Err: fmt.Errorf("%w: range %d is a span of this group", ErrBadCommand, right.GetRangeId())}
	}
	rs, err := getState(c.tx, right.GetRangeId())
	if err != nil || !rs.GetFrozen() || rs.GetAppliedIndex() < cmd.GetRightFreezeIndex() ||
		rs.GetFrozenIndex() != cmd.GetRightFreezeIndex() ||
		rs.GetRange().GetStart() != right.GetStart() || rs.GetRange().GetEnd() != right.GetEnd() {
		// The master only proposes a merge once every replica of the right
		// range has applied its freeze on this range's servers, and after
		// recording the merge as committed for that freeze, so the right
		// range is never unfrozen from it (an unfreeze is sent only for a
		// freeze recorded as aborted): every replica here is frozen at
		// exactly that index from it on. Without it this replica cannot
		// take over the rows, and going on would diverge.
		//
		// It panics rather than refuse: a refusal is safe only if every
		// replica of this range decides alike, and this reads the right
		// range's replica on this server, which is not this range's log:
		// each server's replica of it may have applied a different
		// prefix of its own log (one still frozen at the freeze, another
		// past an unfreeze), so some replicas would merge and others
		// refuse, and the group would diverge silently. The leader checks
		// before proposing (partitionserver checkMergeFreeze) instead.
		panic(fmt.Sprintf("fsm: range %d: merge of range %d at freeze index %d, but its replica here is %v (err %v)",
			desc.GetRangeId(), right.GetRangeId(), cmd.GetRightFreezeIndex(), rs, err))
	}
	if err := c.tx.Bucket(bucketRanges).Delete(u64(right.GetRangeId())); err != nil {
		return &Result{Err: err}
	}
	merged := proto.Clone(desc).(*pb.RangeDescriptor)
	merged.End = right.GetEnd()
	merged.Generation = max(desc.GetGeneration(), rs.GetRange().GetGeneration()) + 1
	c.state.Range = merged
	c.state.EntityCount += rs.GetEntityCount()
	c.state.Bytes += rs.GetBytes()
	if ts := rs.GetLastTimestampUnixNano(); ts > c.state.GetLastTimestampUnixNano() {
		c.state.LastTimestampUnixNano = ts
	}
	// The range's span widened over records its cursor skipped.
	c.tablePrune().invalidate()
	c.merged = append(c.merged, mergedSpan{into: merged.GetRangeId(), right: right.GetRangeId()})
	return &Result{Range: merged}
}

// applyAbsorb extends the range over its frozen right neighbour with the
// neighbour's entities, carried in the command. Merges no longer propose
// it (see applyMerge); it stays so that a log written before still replays.
func applyAbsorb(c *applyCtx, payload []byte) *Result {
	var cmd pb.AbsorbCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil {
		return &Result{Err: fmt.Errorf("%w: absorb", ErrBadCommand)}
	}
	desc := c.state.GetRange()
	right := cmd.GetRight()
	if right.GetTableId() != desc.GetTableId() || desc.GetEnd() == "" || right.GetStart() != desc.GetEnd() {
		return &Result{Err: fmt.Errorf("%w: %q..%q after %q..%q", ErrNotAdjacent, right.GetStart(), right.GetEnd(), desc.GetStart(), desc.GetEnd())}
	}
	b, err := tableBucket(c.tx, desc.GetTableId(), true)
	if err != nil {
		return &Result{Err: err}
	}
	lo, hi := span(right)
	for _, kv := range cmd.GetRows() {
		k := kv.GetKey()
		if bytes.Compare(k, lo) < 0 || (hi != nil && bytes.Compare(k, hi) >= 0) {
			return &Result{Err: fmt.Errorf("%w: absorbed key outside the right range", ErrBadCommand)}
		}
	}
	// Whatever this file held in the span (a local replica of the right
	// range, possibly behind) is replaced by the frozen range's rows.
	if err := deleteSpanAll(b, right); err != nil {
		return &Result{Err: err}
	}
	var n, size uint64
	for _, kv := range cmd.GetRows() {
		if err := b.Put(kv.GetKey(), kv.GetValue()); err != nil {
			return &Result{Err: err}
		}
		n++
		size += uint64(len(kv.GetValue()))
	}
	// Records added and a span widened: the table's prunes rescan.
	c.tablePrune().invalidate()
	for _, kv := range cmd.GetRequests() {
		if err := storeRequest(c.tx, requestKey(desc.GetTableId(), kv.GetKey()), kv.GetValue()); err != nil {
			return &Result{Err: err}
		}
	}
	merged := proto.Clone(desc).(*pb.RangeDescriptor)
	merged.End = right.GetEnd()
	merged.Generation = max(desc.GetGeneration(), right.GetGeneration()) + 1
	c.state.Range = merged
	c.state.EntityCount += n
	c.state.Bytes += size
	if ts := cmd.GetRightLastTimestampUnixNano(); ts > c.state.GetLastTimestampUnixNano() {
		c.state.LastTimestampUnixNano = ts
	}
	return &Result{Range: merged}
}

// deleteSpanAll removes every key of a descriptor's span from b.
func deleteSpanAll(b *bolt.Bucket, d *pb.RangeDescriptor) error {
	lo, hi := span(d)
	c := b.Cursor()
	var k []byte
	if lo == nil {
		k, _ = c.First()
	} else {
		k, _ = c.Seek(lo)
	}
	for k != nil && (hi == nil || bytes.Compare(k, hi) < 0) {
		cur := append([]byte(nil), k...)
		if err := c.Delete(); err != nil {
			return err
		}
		k, _ = c.Seek(cur)
	}
	return nil
}

// applySetReplicas records the group's membership in the descriptor of
// every span of the group: the spans of a group list the same replicas.
func applySetReplicas(c *applyCtx, payload []byte) *Result {
	var cmd pb.SetReplicasCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil || len(cmd.GetReplicas()) == 0 {
		return &Result{Err: fmt.Errorf("%w: set replicas", ErrBadCommand)}
	}
	for _, sp := range c.spans {
		if sp.state.GetFrozen() {
			// Frozen for a merge: the merge gives the merged range a
			// generation past the right range's, read from each
			// server's replica of it once that replica holds the
			// freeze, so a generation this range's log changed after
			// the freeze would reach some servers' merges and not
			// others'. Refused from the group's own replicated state:
			// alike on every replica. (The master makes no membership
			// change on a frozen range; an operator's move or a deposed
			// master's can race its freeze.)
			return &Result{Err: fmt.Errorf("%w: range %d: set replicas", ErrRangeFrozen, sp.r.id)}
		}
	}
	for _, sp := range c.spans {
		st := sp.edit(c)
		d := proto.Clone(st.GetRange()).(*pb.RangeDescriptor)
		d.Replicas = cmd.GetReplicas()
		d.Generation++
		st.Range = d
	}
	// Every span's descriptor after the change, for the master to record
	// at once (ChangeReplicasResponse.spans).
	spans := make([]*pb.RangeDescriptor, 0, len(c.spans))
	for _, sp := range c.spans {
		spans = append(spans, sp.state.GetRange())
	}
	if c.state == nil {
		// Named no span of the group (the one named like the group,
		// merged away): the first span's descriptor answers.
		return &Result{Range: c.spans[0].state.GetRange(), Spans: spans}
	}
	return &Result{Range: c.state.GetRange(), Spans: spans}
}

// MedianKey returns the PartitionKey at which the range splits into two
// halves by size, if there is one above the first PartitionKey the range
// holds: a split at that key would leave the left half empty (a range
// holding one key above its start was split into an empty range and
// itself, and the right half, one key at its start, could never split).
func (r *Range) MedianKey() (string, bool, error) {
	var key, first string
	var ok, seen bool
	err := r.store.db.View(func(tx *bolt.Tx) error {
		st, err := getState(tx, r.id)
		if err != nil {
			return ErrRangeNotFound
		}
		desc := st.GetRange()
		half := st.GetBytes() / 2
		b, err := tableBucket(tx, desc.GetTableId(), false)
		if err != nil || b == nil {
			return err
		}
		var acc uint64
		return walkSpan(b, desc, func(k, v []byte) error {
			acc += uint64(len(v))
			if acc < half && seen {
				return nil
			}
			pk, err := keys.DecodePartitionKey(k)
			if err != nil {
				return err
			}
			if !seen {
				first, seen = pk, true
			}
			if acc >= half && pk > first {
				key, ok = pk, true
				return errStopWalk
			}
			return nil
		})
	})
	return key, ok, err
}
