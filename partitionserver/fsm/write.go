package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"tablestore/internal/edm"
	"tablestore/internal/keys"
	pb "tablestore/proto/tablestorepb"
)

func init() {
	registerGroupWide(pb.CommandKind_COMMAND_KIND_WRITE, applyWrite)
	registerGroupWide(pb.CommandKind_COMMAND_KIND_WRITE_BATCH, applyWriteBatch)
}

// tick is Azure's Timestamp resolution.
const tick = 100 * time.Nanosecond

// nextTimestamp gives every write of a range a distinct, increasing
// Timestamp: the proposer's clock unless that would not move past the last
// one. Deterministic, so every replica computes the same ETag.
func nextTimestamp(st *pb.RangeState, proposed int64) int64 {
	ts := proposed - proposed%int64(tick)
	if last := st.GetLastTimestampUnixNano(); ts <= last {
		ts = last + int64(tick)
	}
	st.LastTimestampUnixNano = ts
	return ts
}

type pendingWrite struct {
	key     []byte
	value   []byte // nil: deleted
	oldSize int    // size of the stored value before this command, -1 if absent
}

func applyWrite(c *applyCtx, payload []byte) *Result {
	cmd, err := unmarshalWrite(payload)
	if err != nil {
		return &Result{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	c.reserve([]*pb.WriteCommand{cmd})
	res := &Result{}
	if !c.addressWrite(cmd) {
		res.Err = spanMissing(c, cmd)
		return res
	}
	applyWriteCommand(c, cmd, res)
	return res
}

// spanMissing is the error of a write whose span the group does not serve
// (merged away, or another group's).
func spanMissing(c *applyCtx, w *pb.WriteCommand) error {
	id := w.GetRangeId()
	if id == 0 {
		id = c.target
	}
	return fmt.Errorf("%w: range %d in group %d", ErrRangeNotFound, c.spanID(id), c.group)
}

// applyWriteBatch applies coalesced writes one after the other in the
// entry's transaction, each all or nothing with its own result in
// Result.Batch: a failing write leaves the others' effects in place, as if
// each had been its own entry.
func applyWriteBatch(c *applyCtx, payload []byte) *Result {
	writes, err := unmarshalWriteBatch(payload)
	if err != nil {
		return &Result{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	c.reserve(writes)
	// One allocation for the results of every write of the entry.
	results := make([]Result, len(writes))
	out := &Result{Batch: make([]*Result, len(writes))}
	for i, w := range writes {
		out.Batch[i] = &results[i]
		if !c.addressWrite(w) {
			results[i].Err = spanMissing(c, w)
			continue
		}
		applyWriteCommand(c, w, &results[i])
	}
	return out
}

// reserve makes the arena hold what the writes' keys, stamped entities and
// request records take (the bound edm.Restamp grows by): one allocation
// per entry instead of several per write. bbolt keeps the slices it is
// given until the commit, as long as the arena lives anyway.
func (c *applyCtx) reserve(writes []*pb.WriteCommand) {
	n := 0
	for _, w := range writes {
		ops := w.GetOps()
		if len(ops) > 0 {
			// The request record: key and value, and its time index key
			// (bbolt copies keys, but a key escapes to its debug logger:
			// from the arena it costs no allocation of its own).
			n += 8 + len(w.GetRequestId()) + 16 + len(ops[0].GetPartitionKey()) + 16 + len(w.GetRequestId())
		}
		for _, op := range ops {
			keys := len(op.GetPartitionKey()) + len(op.GetRowKey())
			// The key (each byte escaped at worst, two terminators) and
			// Restamp's bound.
			n += 2*keys + 4 + 2 + 4*binary.MaxVarintLen64 + keys + len(op.GetEntity())
		}
	}
	c.arena = make([]byte, 0, n)
}

// carved takes b out of the arena when b was appended to the arena's spare
// room (it shares the arena's capacity), so that later appends do not
// overwrite it; a b that outgrew the room is a buffer of its own. The
// result is capped at its length: nothing appends into the arena through
// it.
func (c *applyCtx) carved(b []byte, room []byte) []byte {
	if cap(b) == cap(room) {
		c.arena = c.arena[:len(c.arena)+len(b)]
	}
	return b[:len(b):len(b)]
}

// room is the arena's spare capacity, to append one buffer to.
func (c *applyCtx) room() []byte { return c.arena[len(c.arena):len(c.arena)] }

// entityKey is the bbolt key of (pk, rk), carved from the arena.
func (c *applyCtx) entityKey(pk, rk string) []byte {
	room := c.room()
	return c.carved(keys.AppendString(keys.AppendString(room, pk), rk), room)
}

// pendingIndexAbove is the number of operations above which a write finds
// the pending value of a key through a map rather than a scan.
const pendingIndexAbove = 8

// applyWriteCommand applies one client write and puts its outcome in res.
func applyWriteCommand(c *applyCtx, cmd *pb.WriteCommand, res *Result) {
	ops := cmd.GetOps()
	if len(ops) == 0 {
		res.Err = fmt.Errorf("%w: write without operations", ErrBadCommand)
		return
	}
	desc := c.state.GetRange()
	if c.state.GetFrozen() {
		res.Err = &OpError{Index: 0, Err: ErrRangeFrozen}
		return
	}
	var reqKey, reqStored []byte
	if id := cmd.GetRequestId(); len(id) > 0 {
		room := c.room()
		reqKey = c.carved(appendRequestKey(room, desc.GetTableId(), id), room)
		first, known, stored := lookupRequest(c.tx, desc, reqKey)
		if known {
			// A retry of a write already applied: its result, not again.
			res.TimestampUnixNano = first
			return
		}
		// A record of this id for a PartitionKey of another range: the
		// write is new here, and its record replaces that one (copied:
		// rare, and bbolt's memory is not to be held across puts).
		reqStored = bytes.Clone(stored)
	}
	bucket, err := tableBucket(c.tx, desc.GetTableId(), true)
	if err != nil {
		res.Err = err
		return
	}
	// The timestamp is consumed only when the command succeeds.
	saved := c.state.GetLastTimestampUnixNano()
	ts := nextTimestamp(c.state, cmd.GetProposedUnixNano())
	stamp := time.Unix(0, ts).UTC()

	// Validate every operation against the stored data plus the command's own
	// earlier operations before writing anything: a write is all or nothing.
	// Nearly every write has one operation: no map for those.
	var one [1]pendingWrite
	pending := one[:0]
	var index map[string]int
	if len(ops) > pendingIndexAbove {
		pending = make([]pendingWrite, 0, len(ops))
		index = make(map[string]int, len(ops))
	} else if len(ops) > 1 {
		pending = make([]pendingWrite, 0, len(ops))
	}
	for i, op := range ops {
		if !InRange(desc, op.GetPartitionKey()) {
			c.state.LastTimestampUnixNano = saved
			res.Err = &OpError{Index: i, Err: ErrKeyOutOfRange}
			return
		}
		key := c.entityKey(op.GetPartitionKey(), op.GetRowKey())
		j := findPending(pending, index, key)
		if j < 0 {
			old := bucket.Get(key)
			p := pendingWrite{key: key, value: old, oldSize: -1}
			if old != nil {
				p.oldSize = len(old)
			}
			pending = append(pending, p)
			j = len(pending) - 1
			if index != nil {
				index[string(key)] = j
			}
		}
		next, err := applyOp(c, op, pending[j].value, stamp)
		if err != nil {
			c.state.LastTimestampUnixNano = saved
			res.Err = &OpError{Index: i, Err: err}
			return
		}
		pending[j].value = next
	}
	for _, p := range pending {
		var err error
		if p.value == nil {
			if p.oldSize >= 0 {
				err = bucket.Delete(p.key)
				c.state.EntityCount--
				c.state.Bytes -= uint64(p.oldSize)
			}
		} else {
			err = bucket.Put(p.key, p.value)
			if p.oldSize < 0 {
				c.state.EntityCount++
			} else {
				c.state.Bytes -= uint64(p.oldSize)
			}
			c.state.Bytes += uint64(len(p.value))
		}
		if err != nil {
			res.Err = err
			return
		}
	}
	f := c.store.tableFill(desc.GetTableId())
	for _, op := range ops {
		f.note(op.GetPartitionKey(), op.GetRowKey())
	}
	bucket.FillPercent = fillPercentFor(f.run, f.writes)
	if reqKey != nil {
		// The record is kept by the write's Timestamp (the range's log
		// clock), not by the proposer's clock: a leader whose clock is
		// behind the log clock (an earlier leader's ran ahead) would
		// write records already below the prune horizon, forgotten at
		// the next prune, and a retry of the write would apply again.
		room := c.room()
		v := c.carved(appendRequestRecord(room, ts, ts, ops[0].GetPartitionKey()), room)
		room = c.room()
		tk, _ := appendRequestTimeKey(room, reqKey, v)
		tk = c.carved(tk, room)
		if err := putRequest(c.tx, reqKey, v, tk, reqStored); err != nil {
			res.Err = err
			return
		}
		c.tablePrune().added(ts)
	}
	res.TimestampUnixNano = ts
}

// findPending is the position of key among the write's pending values, -1
// if absent.
func findPending(pending []pendingWrite, index map[string]int, key []byte) int {
	if index != nil {
		if j, ok := index[string(key)]; ok {
			return j
		}
		return -1
	}
	for j := range pending {
		if bytes.Equal(pending[j].key, key) {
			return j
		}
	}
	return -1
}

// ValidateOps checks the entities of a write before it is proposed: the
// leader does it once, so that replicas applying the entry only stamp each
// entity (a merge with a stored entity is validated again after merging).
// A failure is an *OpError naming the operation.
func ValidateOps(ops []*pb.EntityOp) error {
	for i, op := range ops {
		if op.GetKind() == pb.OpKind_OP_KIND_DELETE {
			continue
		}
		e, err := edm.UnmarshalBinary(op.GetEntity())
		if err != nil {
			return &OpError{Index: i, Err: fmt.Errorf("%w: %v", ErrInvalidEntity, err)}
		}
		e.PartitionKey, e.RowKey = op.GetPartitionKey(), op.GetRowKey()
		if err := e.Validate(); err != nil {
			return &OpError{Index: i, Err: err}
		}
	}
	return nil
}

// applyOp returns the value op leaves for its key, given the key's current
// value cur (nil: absent): nil deletes it.
func applyOp(c *applyCtx, op *pb.EntityOp, cur []byte, stamp time.Time) ([]byte, error) {
	kind := op.GetKind()

	mustExist := kind == pb.OpKind_OP_KIND_REPLACE || kind == pb.OpKind_OP_KIND_MERGE || kind == pb.OpKind_OP_KIND_DELETE
	switch {
	case kind == pb.OpKind_OP_KIND_INSERT && cur != nil:
		return nil, ErrEntityExists
	case mustExist && cur == nil:
		return nil, ErrEntityNotFound
	}
	var existing *edm.Entity
	if cur != nil && (kind == pb.OpKind_OP_KIND_MERGE || kind == pb.OpKind_OP_KIND_INSERT_OR_MERGE || (!op.GetIfMatchAny() && op.GetIfMatchUnixNano() != 0)) {
		var err error
		if existing, err = edm.UnmarshalBinary(cur); err != nil {
			return nil, err
		}
		if !op.GetIfMatchAny() && op.GetIfMatchUnixNano() != 0 && existing.Timestamp.UnixNano() != op.GetIfMatchUnixNano() {
			return nil, ErrConditionFailed
		}
	}

	switch kind {
	case pb.OpKind_OP_KIND_DELETE:
		return nil, nil
	case pb.OpKind_OP_KIND_INSERT, pb.OpKind_OP_KIND_REPLACE, pb.OpKind_OP_KIND_MERGE,
		pb.OpKind_OP_KIND_INSERT_OR_REPLACE, pb.OpKind_OP_KIND_INSERT_OR_MERGE:
		if existing == nil || (kind != pb.OpKind_OP_KIND_MERGE && kind != pb.OpKind_OP_KIND_INSERT_OR_MERGE) {
			// The leader validated the entity before proposing
			// (ValidateOps): stamp it without decoding it.
			room := c.room()
			next, err := edm.Restamp(room, op.GetEntity(), op.GetPartitionKey(), op.GetRowKey(), stamp)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrInvalidEntity, err)
			}
			return c.carved(next, room), nil
		}
		e, err := edm.UnmarshalBinary(op.GetEntity())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidEntity, err)
		}
		existing.MergeFrom(e)
		e = existing
		e.PartitionKey, e.RowKey, e.Timestamp = op.GetPartitionKey(), op.GetRowKey(), stamp
		if err := e.Validate(); err != nil {
			return nil, err
		}
		return edm.MarshalBinary(e), nil
	default:
		return nil, fmt.Errorf("%w: operation kind %v", ErrBadCommand, kind)
	}
}
