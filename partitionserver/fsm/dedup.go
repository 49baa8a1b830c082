package fsm

import (
	"bytes"
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"

	pb "tablestore/proto/tablestorepb"
)

// Write requests are remembered per range so that a client's retry of a
// write whose outcome it did not learn (the leader changed after the entry
// was appended) returns the first attempt's result rather than applying it
// twice: without it a retried insert that had committed would answer
// EntityAlreadyExists.
//
//	requests/<range id, 8 bytes><request id> -> timestamp (8) | proposed (8) | PartitionKey
//
// Records live in the state machine (same transaction as the write, carried
// in snapshots, split with the range), and are pruned deterministically by
// the log's own clock.

var bucketRequests = []byte("requests")

// requestTTL is how long a request id is remembered.
const requestTTL = 10 * time.Minute

// pruneEvery: requests are pruned when the applied index crosses a multiple
// of it, which every replica does at the same entry.
const pruneEvery = 1024

func requestKey(rangeID uint64, id []byte) []byte {
	k := make([]byte, 0, 8+len(id))
	k = binary.BigEndian.AppendUint64(k, rangeID)
	return append(k, id...)
}

func lookupRequest(tx *bolt.Tx, rangeID uint64, id []byte) (int64, bool) {
	v := tx.Bucket(bucketRequests).Get(requestKey(rangeID, id))
	if len(v) < 16 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

func recordRequest(tx *bolt.Tx, rangeID uint64, id []byte, ts, proposed int64, pk string) error {
	v := make([]byte, 0, 16+len(pk))
	v = binary.BigEndian.AppendUint64(v, uint64(ts))
	v = binary.BigEndian.AppendUint64(v, uint64(proposed))
	v = append(v, pk...)
	return tx.Bucket(bucketRequests).Put(requestKey(rangeID, id), v)
}

// forEachRequest visits the range's request records.
func forEachRequest(tx *bolt.Tx, rangeID uint64, fn func(k, v []byte) error) error {
	prefix := binary.BigEndian.AppendUint64(nil, rangeID)
	c := tx.Bucket(bucketRequests).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// deleteRequests removes the range's records, or only those keep rejects.
func deleteRequests(tx *bolt.Tx, rangeID uint64, keep func(v []byte) bool) error {
	var doomed [][]byte
	err := forEachRequest(tx, rangeID, func(k, v []byte) error {
		if keep == nil || !keep(v) {
			doomed = append(doomed, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	b := tx.Bucket(bucketRequests)
	for _, k := range doomed {
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
	return deleteRequests(tx, st.GetRange().GetRangeId(), func(v []byte) bool {
		return len(v) >= 16 && int64(binary.BigEndian.Uint64(v[8:16])) >= horizon
	})
}

// copyRequests gives the right-hand range of a split the records of the
// keys it now serves.
func copyRequests(tx *bolt.Tx, from uint64, to *pb.RangeDescriptor) error {
	type rec struct{ id, v []byte }
	var moved []rec
	err := forEachRequest(tx, from, func(k, v []byte) error {
		if len(v) >= 16 && InRange(to, string(v[16:])) {
			moved = append(moved, rec{append([]byte(nil), k[8:]...), append([]byte(nil), v...)})
		}
		return nil
	})
	if err != nil {
		return err
	}
	b := tx.Bucket(bucketRequests)
	for _, r := range moved {
		if err := b.Put(requestKey(to.GetRangeId(), r.id), r.v); err != nil {
			return err
		}
	}
	return nil
}
