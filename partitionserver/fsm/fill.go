package fsm

import bolt "go.etcd.io/bbolt"

// How full a commit leaves the entity pages it splits.
//
// bbolt splits a node that outgrew its page at the bucket's FillPercent
// (0.5 by default). That suits inserts at scattered places: a page split
// full would split again at the next insert near it. Writes that extend a
// PartitionKey in RowKey order (entity group transactions, a log-like
// PartitionKey whose RowKeys grow) only ever add to the page after the
// split, so there half-full pages cost about twice the pages written per
// write and twice the file. The threshold is read when the commit spills
// the bucket, so it is chosen per table and commit, from the writes the
// pending transaction holds (BenchmarkCommitPattern). A hot PartitionKey
// with random RowKeys (GUIDs) is scattered inserts and keeps the default:
// at 0.9 it took 43 % more pages (the review of session 16).

// runFillPercent is the threshold for a table written in order. Below 1.0,
// so that an entity a later Merge or Replace grows does not split its page
// at once.
const runFillPercent = 0.9

// tableFill counts, for one table in the pending transaction, the entity
// writes and those that followed a write on the same PartitionKey with a
// smaller RowKey.
type tableFill struct {
	lastPK, lastRK string
	writes, run    int
}

func (f *tableFill) note(pk, rk string) {
	f.writes++
	if f.writes > 1 && pk == f.lastPK && rk > f.lastRK {
		f.run++
	}
	f.lastPK, f.lastRK = pk, rk
}

// fillPercentFor is the split threshold of a table's pages for a commit of
// writes entity writes, run of which continued the one before in key
// order: runFillPercent when at least three in four did, bbolt's default
// otherwise. Random keys continue the one before half of the time.
func fillPercentFor(run, writes int) float64 {
	if writes > 1 && 4*run >= 3*writes {
		return runFillPercent
	}
	return bolt.DefaultFillPercent
}

// tableFill is the pending transaction's count for a table; wmu is held.
func (s *Store) tableFill(tableID uint64) *tableFill {
	f := s.fills[tableID]
	if f == nil {
		f = &tableFill{}
		s.fills[tableID] = f
	}
	return f
}
