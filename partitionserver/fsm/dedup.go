package fsm

import (
	"bytes"
	"encoding/binary"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	pb "tablestore/proto/tablestorepb"
)

// Write requests are remembered so that a client's retry of a write whose
// outcome it did not learn (the leader changed after the entry was appended)
// returns the first attempt's result rather than applying it twice: without
// it a retried insert that had committed would answer EntityAlreadyExists.
//
//	table-requests/<table id, 8 bytes><request id> -> timestamp (8) | kept-by time (8) | PartitionKey
//	table-requests-by-time/<table id><kept-by time, 8 bytes, ordered><request id> -> PartitionKey
//
// The kept-by time is the write's Timestamp (files written before held its
// proposal time there, which a proposer whose clock was behind the range's
// log clock put below the prune horizon at once).
//
// Records are keyed by table, not by range, like the entities: a range owns
// the records whose PartitionKey it serves, so a split or a merge moves no
// record (a range is only a key span). They live in the state machine (same
// transaction as the write, carried in snapshots), and are pruned
// deterministically by the log's own clock.
//
// The second bucket indexes every well-formed record by proposal time, so a
// prune reads only the records below its horizon instead of every record
// of the table (at 5,000 writes/s the 10-minute TTL keeps ~3 M of them). It
// is derived data: this file's own, never in a snapshot, changed only
// together with the records (putRequest, deleteRequest, the prune) and
// built once for a file written before it (indexRequests), or again when
// the file had commits by a binary that does not keep it (a downgrade:
// keyLastCommit in store.go).

var bucketRequests = []byte("table-requests")

// bucketRequestsByTime is the proposal-time index of bucketRequests.
var bucketRequestsByTime = []byte("table-requests-by-time")

// bucketRangeRequests is the layout before records were keyed by table
// (<range id><request id>); Open migrates it.
var bucketRangeRequests = []byte("requests")

// requestTTL is how long a request id is remembered.
const requestTTL = 10 * time.Minute

// pruneEvery: requests are pruned when the applied index crosses a multiple
// of it, which every replica does at the same entry.
const pruneEvery = 1024

func requestKey(tableID uint64, id []byte) []byte {
	return appendRequestKey(make([]byte, 0, 8+len(id)), tableID, id)
}

// appendRequestKey appends the record key of request id of a table to dst.
func appendRequestKey(dst []byte, tableID uint64, id []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, tableID)
	return append(dst, id...)
}

// timeOrder encodes a proposal time so that byte order is numeric order
// (the sign bit flipped: a negative time, never proposed, still sorts first).
func timeOrder(t int64) uint64 { return uint64(t) ^ 1<<63 }

// appendTimePrefix appends the index position of a table's records proposed
// at t.
func appendTimePrefix(dst []byte, tableID uint64, t int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, tableID)
	return binary.BigEndian.AppendUint64(dst, timeOrder(t))
}

// appendRequestTimeKey appends to dst the index key of the record (key, v);
// false if v is malformed (such a record has no index entry).
func appendRequestTimeKey(dst, key, v []byte) ([]byte, bool) {
	if len(key) < 8 || len(v) < 16 {
		return dst, false
	}
	dst = appendTimePrefix(dst, binary.BigEndian.Uint64(key), int64(binary.BigEndian.Uint64(v[8:16])))
	return append(dst, key[8:]...), true
}

// requestPK is the PartitionKey a record was written for.
func requestPK(v []byte) (string, bool) {
	if len(v) < 16 {
		return "", false
	}
	return string(v[16:]), true
}

// lookupRequest finds the record at key (appendRequestKey) and reports its
// Timestamp when its PartitionKey belongs to the range d (known). stored is
// the record found whatever its range (nil: none), for putRequest to
// replace; it is bbolt's memory.
func lookupRequest(tx *bolt.Tx, d *pb.RangeDescriptor, key []byte) (ts int64, known bool, stored []byte) {
	v := tx.Bucket(bucketRequests).Get(key)
	if len(v) < 16 || !InRange(d, string(v[16:])) {
		return 0, false, v
	}
	return int64(binary.BigEndian.Uint64(v)), true, v
}

// appendRequestRecord appends a record's value to dst: the write's
// Timestamp, the time it is kept by (the pruning clock: the write path
// gives its Timestamp again) and its PartitionKey.
func appendRequestRecord(dst []byte, ts, keptBy int64, pk string) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	dst = binary.BigEndian.AppendUint64(dst, uint64(keptBy))
	return append(dst, pk...)
}

// putRequest stores the record (key, v) and its index entry timeKey
// (appendRequestTimeKey; nil for a malformed v), replacing stored, the
// record at key before (nil: none). bbolt keeps v (the index entry's value
// is its PartitionKey part) until the transaction ends: it must not be
// reused before.
func putRequest(tx *bolt.Tx, key, v, timeKey, stored []byte) error {
	byTime := tx.Bucket(bucketRequestsByTime)
	if stored != nil {
		var buf [64]byte
		if old, ok := appendRequestTimeKey(buf[:0], key, stored); ok && !bytes.Equal(old, timeKey) {
			if err := byTime.Delete(old); err != nil {
				return err
			}
		}
	}
	if err := tx.Bucket(bucketRequests).Put(key, v); err != nil {
		return err
	}
	if timeKey == nil {
		return nil
	}
	return byTime.Put(timeKey, v[16:])
}

// storeRequest is putRequest for callers off the write path: it looks up
// the record it replaces and builds the index key (fresh memory).
func storeRequest(tx *bolt.Tx, key, v []byte) error {
	tk, ok := appendRequestTimeKey(nil, key, v)
	if !ok {
		tk = nil
	}
	return putRequest(tx, key, v, tk, tx.Bucket(bucketRequests).Get(key))
}

// deleteRequest removes the record (key, v) and its index entry.
func deleteRequest(tx *bolt.Tx, key, v []byte) error {
	if tk, ok := appendRequestTimeKey(nil, key, v); ok {
		if err := tx.Bucket(bucketRequestsByTime).Delete(tk); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketRequests).Delete(key)
}

// forEachRequest visits the records of the range's span (key: table id and
// request id). It reads every record of the table: for snapshots and span
// removal, not for the periodic prune.
func forEachRequest(tx *bolt.Tx, d *pb.RangeDescriptor, fn func(k, v []byte) error) error {
	prefix := binary.BigEndian.AppendUint64(nil, d.GetTableId())
	c := tx.Bucket(bucketRequests).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if pk, ok := requestPK(v); !ok || !InRange(d, pk) {
			continue
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// deleteRequests removes the records of the range's span that doomed
// selects (nil: all), reading every record of the table.
func deleteRequests(tx *bolt.Tx, d *pb.RangeDescriptor, doomed func(v []byte) bool) error {
	var ks, vs [][]byte
	err := forEachRequest(tx, d, func(k, v []byte) error {
		if doomed == nil || doomed(v) {
			ks = append(ks, append([]byte(nil), k...))
			vs = append(vs, append([]byte(nil), v...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, k := range ks {
		if err := deleteRequest(tx, k, vs[i]); err != nil {
			return err
		}
	}
	return nil
}

// tablePrune is what the ranges of one table stored here share about their
// prune cursors (Store.tablePrune): an epoch that invalidates every cursor
// of the table, and the highest cursor position, below which a new record
// invalidates them.
type tablePrune struct {
	epoch    uint64
	maxBelow int64
}

// invalidate makes every range of the table prune its next time from the
// table's oldest record: ownership of records may have changed (a split, a
// merge, a snapshot install, a range created or deleted), or a record was
// added below some cursor.
func (t *tablePrune) invalidate() {
	t.epoch++
	t.maxBelow = math.MinInt64
}

// added is told of a record added to the table with proposal time p.
func (t *tablePrune) added(p int64) {
	if p < t.maxBelow {
		t.invalidate()
	}
}

// pruneCursor is one range's position in its table's time index: while
// valid (ok, and epoch is the table's), no index entry of the table
// proposed before below is of the range's span, so a prune starts there.
// It is this file's memory, not replicated state: it decides only where the
// scan starts, never what is deleted, and a lost or invalidated cursor
// costs one scan from the table's oldest record.
type pruneCursor struct {
	ok    bool
	epoch uint64
	below int64
}

// pruneRequests forgets the range's requests kept by a time more than requestTTL
// before now (the range's last timestamp: the log's clock, the same on every
// replica): exactly the records the full scan of the table deleted
// (pruneRequestsByScan), read from the time index. Records of the table's
// other ranges stored here are skipped, left to their own ranges' prunes
// (deleting them here would forget them at an index of this range's log,
// which their own replicas elsewhere do not share); the cursor keeps each
// skipped record from being read again by the next prunes.
func pruneRequests(tx *bolt.Tx, st *pb.RangeState, tp *tablePrune, cur *pruneCursor) (pruned, skipped int, err error) {
	d := st.GetRange()
	horizon := st.GetLastTimestampUnixNano() - int64(requestTTL)
	from := int64(math.MinInt64)
	if cur.ok && cur.epoch == tp.epoch {
		from = cur.below
	}
	if from < horizon {
		prefix := binary.BigEndian.AppendUint64(nil, d.GetTableId())
		end := appendTimePrefix(nil, d.GetTableId(), horizon)
		var doomed [][]byte
		c := tx.Bucket(bucketRequestsByTime).Cursor()
		for k, v := c.Seek(appendTimePrefix(nil, d.GetTableId(), from)); k != nil && bytes.HasPrefix(k, prefix) && bytes.Compare(k, end) < 0; k, v = c.Next() {
			if !InRange(d, string(v)) {
				skipped++
				continue
			}
			doomed = append(doomed, append([]byte(nil), k...))
		}
		recs, byTime := tx.Bucket(bucketRequests), tx.Bucket(bucketRequestsByTime)
		for _, k := range doomed {
			if err := byTime.Delete(k); err != nil {
				return 0, 0, err
			}
			if err := recs.Delete(append(k[:8:8], k[16:]...)); err != nil {
				return 0, 0, err
			}
		}
		pruned = len(doomed)
	}
	*cur = pruneCursor{ok: true, epoch: tp.epoch, below: max(from, horizon)}
	tp.maxBelow = max(tp.maxBelow, cur.below)
	return pruned, skipped, nil
}

// indexRequests builds the time index of every record, once, when a file
// written before it existed is opened.
func indexRequests(tx *bolt.Tx) error {
	byTime := tx.Bucket(bucketRequestsByTime)
	// Front-end ids start with their time, so the entries come mostly in
	// key order: full pages halve the index's pages and the build's memory
	// (1 M records: 105 → 52 MB of leaves).
	byTime.FillPercent = 1.0
	return tx.Bucket(bucketRequests).ForEach(func(k, v []byte) error {
		tk, ok := appendRequestTimeKey(nil, k, v)
		if !ok {
			return nil
		}
		return byTime.Put(tk, append([]byte(nil), v[16:]...))
	})
}

// migrateRequests moves records of the per-range layout to the per-table
// one, once, when a file written before the change is opened. Records of a
// range no longer stored are dropped (their range is gone).
func migrateRequests(tx *bolt.Tx) error {
	old := tx.Bucket(bucketRangeRequests)
	if old == nil {
		return nil
	}
	tables := map[uint64]uint64{}
	ranges := tx.Bucket(bucketRanges)
	err := old.ForEach(func(k, v []byte) error {
		if len(k) < 8 {
			return nil
		}
		rangeID := binary.BigEndian.Uint64(k)
		tableID, ok := tables[rangeID]
		if !ok {
			if ranges.Get(u64(rangeID)) == nil {
				return nil
			}
			st, err := getState(tx, rangeID)
			if err != nil {
				return err
			}
			tableID = st.GetRange().GetTableId()
			tables[rangeID] = tableID
		}
		return storeRequest(tx, requestKey(tableID, k[8:]), append([]byte(nil), v...))
	})
	if err != nil {
		return err
	}
	return tx.DeleteBucket(bucketRangeRequests)
}
