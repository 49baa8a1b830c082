package fsm

import bolt "go.etcd.io/bbolt"

// How full a commit leaves the entity pages it splits.
//
// bbolt splits a node that outgrew its page at the bucket's FillPercent
// (0.5 by default). That suits inserts at scattered places: a page split
// full would split again at the next insert near it. Writes that come in
// runs on one PartitionKey (entity group transactions, a hot
// PartitionKey's ascending RowKeys) only ever extend the page after the
// split, so there half-full pages cost about twice the pages written per
// write and twice the file. The threshold is read when the commit spills
// the bucket, so it is chosen per table and commit, from the writes the
// pending transaction holds (BenchmarkCommitPattern).

// runFillPercent is the threshold for a table written in runs. Below 1.0,
// so that an entity a later Merge or Replace grows does not split its page
// at once.
const runFillPercent = 0.9

// tableFill counts, for one table in the pending transaction, the entity
// writes and those on the same PartitionKey as the write before.
type tableFill struct {
	lastPK      string
	writes, run int
}

func (f *tableFill) note(pk string) {
	f.writes++
	if f.writes > 1 && pk == f.lastPK {
		f.run++
	}
	f.lastPK = pk
}

// fillPercentFor is the split threshold of a table's pages for a commit of
// writes entity writes, run of which followed one on the same
// PartitionKey: runFillPercent when more than half did, bbolt's default
// otherwise.
func fillPercentFor(run, writes int) float64 {
	if 2*run > writes {
		return runFillPercent
	}
	return bolt.DefaultFillPercent
}

// tableFill is the pending transaction's count for a table; wmu is held.
func (s *Store) tableFill(tableID uint64) *tableFill {
	f := s.fills[tableID]
	if f == nil {
		if s.fills == nil {
			s.fills = map[uint64]*tableFill{}
		}
		f = &tableFill{}
		s.fills[tableID] = f
	}
	return f
}
