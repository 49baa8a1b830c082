package fsm

import (
	"bytes"
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"

	pb "tablestore/proto/tablestorepb"
)

// Write requests are remembered so that a client's retry of a write whose
// outcome it did not learn (the leader changed after the entry was appended)
// returns the first attempt's result rather than applying it twice: without
// it a retried insert that had committed would answer EntityAlreadyExists.
//
//	table-requests/<table id, 8 bytes><request id> -> timestamp (8) | proposed (8) | PartitionKey
//
// Records are keyed by table, not by range, like the entities: a range owns
// the records whose PartitionKey it serves, so a split or a merge moves no
// record (a range is only a key span). They live in the state machine (same
// transaction as the write, carried in snapshots), and are pruned
// deterministically by the log's own clock.

var bucketRequests = []byte("table-requests")

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

// requestPK is the PartitionKey a record was written for.
func requestPK(v []byte) (string, bool) {
	if len(v) < 16 {
		return "", false
	}
	return string(v[16:]), true
}

// lookupRequest finds the record at key (appendRequestKey) when its
// PartitionKey belongs to the range d.
func lookupRequest(tx *bolt.Tx, d *pb.RangeDescriptor, key []byte) (int64, bool) {
	v := tx.Bucket(bucketRequests).Get(key)
	if len(v) < 16 || !InRange(d, string(v[16:])) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// appendRequestRecord appends a record's value to dst: the write's
// Timestamp, its proposal time (the pruning clock) and its PartitionKey.
func appendRequestRecord(dst []byte, ts, proposed int64, pk string) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	dst = binary.BigEndian.AppendUint64(dst, uint64(proposed))
	return append(dst, pk...)
}

// forEachRequest visits the records of the range's span (key: table id and
// request id).
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
// selects (nil: all).
func deleteRequests(tx *bolt.Tx, d *pb.RangeDescriptor, doomed func(v []byte) bool) error {
	var ks [][]byte
	err := forEachRequest(tx, d, func(k, v []byte) error {
		if doomed == nil || doomed(v) {
			ks = append(ks, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	b := tx.Bucket(bucketRequests)
	for _, k := range ks {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// pruneRequests forgets requests proposed more than requestTTL before now
// (the range's last timestamp: the log's clock, the same on every replica).
func pruneRequests(tx *bolt.Tx, st *pb.RangeState) error {
	horizon := st.GetLastTimestampUnixNano() - int64(requestTTL)
	return deleteRequests(tx, st.GetRange(), func(v []byte) bool {
		return int64(binary.BigEndian.Uint64(v[8:16])) < horizon
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
	nb := tx.Bucket(bucketRequests)
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
		return nb.Put(requestKey(tableID, k[8:]), append([]byte(nil), v...))
	})
	if err != nil {
		return err
	}
	return tx.DeleteBucket(bucketRangeRequests)
}
