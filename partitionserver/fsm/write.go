package fsm

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/edm"
	"tablestore/internal/keys"
	pb "tablestore/proto/tablestorepb"
)

func init() {
	register(pb.CommandKind_COMMAND_KIND_WRITE, applyWrite)
	register(pb.CommandKind_COMMAND_KIND_WRITE_BATCH, applyWriteBatch)
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
	value   []byte // nil: deleted
	oldSize int    // size of the stored value before this command, -1 if absent
}

func applyWrite(c *applyCtx, payload []byte) *Result {
	var cmd pb.WriteCommand
	if err := proto.Unmarshal(payload, &cmd); err != nil {
		return &Result{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	return applyWriteCommand(c, &cmd)
}

// applyWriteBatch applies coalesced writes one after the other in the
// entry's transaction, each all or nothing with its own result in
// Result.Batch: a failing write leaves the others' effects in place, as if
// each had been its own entry.
func applyWriteBatch(c *applyCtx, payload []byte) *Result {
	var batch pb.WriteBatchCommand
	if err := proto.Unmarshal(payload, &batch); err != nil {
		return &Result{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	out := &Result{Batch: make([]*Result, len(batch.GetWrites()))}
	for i, w := range batch.GetWrites() {
		out.Batch[i] = applyWriteCommand(c, w)
	}
	return out
}

// applyWriteCommand applies one client write.
func applyWriteCommand(c *applyCtx, cmd *pb.WriteCommand) *Result {
	if len(cmd.GetOps()) == 0 {
		return &Result{Err: fmt.Errorf("%w: write without operations", ErrBadCommand)}
	}
	desc := c.state.GetRange()
	if c.state.GetFrozen() {
		return &Result{Err: &OpError{Index: 0, Err: ErrRangeFrozen}}
	}
	if id := cmd.GetRequestId(); len(id) > 0 {
		if ts, ok := lookupRequest(c.tx, desc, id); ok {
			// A retry of a write already applied: its result, not again.
			return &Result{TimestampUnixNano: ts}
		}
	}
	bucket, err := tableBucket(c.tx, desc.GetTableId(), true)
	if err != nil {
		return &Result{Err: err}
	}
	// The timestamp is consumed only when the command succeeds.
	saved := c.state.GetLastTimestampUnixNano()
	ts := nextTimestamp(c.state, cmd.GetProposedUnixNano())
	stamp := time.Unix(0, ts).UTC()

	// Validate every operation against the stored data plus the command's own
	// earlier operations before writing anything: a write is all or nothing.
	pending := make(map[string]*pendingWrite, len(cmd.GetOps()))
	order := make([]string, 0, len(cmd.GetOps()))
	for i, op := range cmd.GetOps() {
		if err := applyOp(bucket, desc, op, stamp, pending, &order); err != nil {
			c.state.LastTimestampUnixNano = saved
			return &Result{Err: &OpError{Index: i, Err: err}}
		}
	}
	for _, k := range order {
		p := pending[k]
		var err error
		if p.value == nil {
			if p.oldSize >= 0 {
				err = bucket.Delete([]byte(k))
				c.state.EntityCount--
				c.state.Bytes -= uint64(p.oldSize)
			}
		} else {
			err = bucket.Put([]byte(k), p.value)
			if p.oldSize < 0 {
				c.state.EntityCount++
			} else {
				c.state.Bytes -= uint64(p.oldSize)
			}
			c.state.Bytes += uint64(len(p.value))
		}
		if err != nil {
			return &Result{Err: err}
		}
	}
	if id := cmd.GetRequestId(); len(id) > 0 {
		if err := recordRequest(c.tx, desc.GetTableId(), id, ts, cmd.GetProposedUnixNano(), cmd.GetOps()[0].GetPartitionKey()); err != nil {
			return &Result{Err: err}
		}
	}
	return &Result{TimestampUnixNano: ts}
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

func applyOp(bucket *bolt.Bucket, desc *pb.RangeDescriptor, op *pb.EntityOp, stamp time.Time,
	pending map[string]*pendingWrite, order *[]string) error {
	if !InRange(desc, op.GetPartitionKey()) {
		return ErrKeyOutOfRange
	}
	key := string(keys.Encode(op.GetPartitionKey(), op.GetRowKey()))
	p, seen := pending[key]
	if !seen {
		old := bucket.Get([]byte(key))
		p = &pendingWrite{value: old, oldSize: -1}
		if old != nil {
			p.oldSize = len(old)
		}
	}
	cur := p.value
	kind := op.GetKind()

	mustExist := kind == pb.OpKind_OP_KIND_REPLACE || kind == pb.OpKind_OP_KIND_MERGE || kind == pb.OpKind_OP_KIND_DELETE
	switch {
	case kind == pb.OpKind_OP_KIND_INSERT && cur != nil:
		return ErrEntityExists
	case mustExist && cur == nil:
		return ErrEntityNotFound
	}
	var existing *edm.Entity
	if cur != nil && (kind == pb.OpKind_OP_KIND_MERGE || kind == pb.OpKind_OP_KIND_INSERT_OR_MERGE || (!op.GetIfMatchAny() && op.GetIfMatchUnixNano() != 0)) {
		var err error
		if existing, err = edm.UnmarshalBinary(cur); err != nil {
			return err
		}
		if !op.GetIfMatchAny() && op.GetIfMatchUnixNano() != 0 && existing.Timestamp.UnixNano() != op.GetIfMatchUnixNano() {
			return ErrConditionFailed
		}
	}

	var next []byte
	switch kind {
	case pb.OpKind_OP_KIND_DELETE:
		next = nil
	case pb.OpKind_OP_KIND_INSERT, pb.OpKind_OP_KIND_REPLACE, pb.OpKind_OP_KIND_MERGE,
		pb.OpKind_OP_KIND_INSERT_OR_REPLACE, pb.OpKind_OP_KIND_INSERT_OR_MERGE:
		if existing == nil || (kind != pb.OpKind_OP_KIND_MERGE && kind != pb.OpKind_OP_KIND_INSERT_OR_MERGE) {
			// The leader validated the entity before proposing
			// (ValidateOps): stamp it without decoding it.
			var err error
			if next, err = edm.Restamp(nil, op.GetEntity(), op.GetPartitionKey(), op.GetRowKey(), stamp); err != nil {
				return fmt.Errorf("%w: %v", ErrInvalidEntity, err)
			}
			break
		}
		e, err := edm.UnmarshalBinary(op.GetEntity())
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidEntity, err)
		}
		existing.MergeFrom(e)
		e = existing
		e.PartitionKey, e.RowKey, e.Timestamp = op.GetPartitionKey(), op.GetRowKey(), stamp
		if err := e.Validate(); err != nil {
			return err
		}
		next = edm.MarshalBinary(e)
	default:
		return fmt.Errorf("%w: operation kind %v", ErrBadCommand, kind)
	}
	if !seen {
		pending[key] = p
		*order = append(*order, key)
	}
	p.value = next
	return nil
}
