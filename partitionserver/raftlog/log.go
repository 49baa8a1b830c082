package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// ErrMiddleDelete is a DeleteRange that would leave a hole: raft only
// truncates a suffix or compacts a prefix.
var ErrMiddleDelete = errors.New("raftlog: deleting the middle of a log")

// Log is one group's view of the shared store: its raft.LogStore and
// raft.StableStore.
type Log struct {
	s  *Store
	id uint64
}

// Log returns group id's view. A group exists once something is written.
func (s *Store) Log(id uint64) *Log { return &Log{s: s, id: id} }

var (
	_ raft.LogStore          = (*Log)(nil)
	_ raft.StableStore       = (*Log)(nil)
	_ raft.MonotonicLogStore = (*Log)(nil)
)

// FirstIndex implements raft.LogStore.
func (l *Log) FirstIndex() (uint64, error) {
	l.s.mu.RLock()
	defer l.s.mu.RUnlock()
	if g, ok := l.s.groups[l.id]; ok && len(g.locs) > 0 {
		return g.first, nil
	}
	return 0, nil
}

// LastIndex implements raft.LogStore.
func (l *Log) LastIndex() (uint64, error) {
	l.s.mu.RLock()
	defer l.s.mu.RUnlock()
	if g, ok := l.s.groups[l.id]; ok {
		return g.last(), nil
	}
	return 0, nil
}

// GetLog implements raft.LogStore: it reads the entry from its segment.
func (l *Log) GetLog(index uint64, out *raft.Log) error {
	l.s.mu.RLock()
	g, ok := l.s.groups[l.id]
	if !ok || len(g.locs) == 0 || index < g.first || index > g.last() {
		l.s.mu.RUnlock()
		return raft.ErrLogNotFound
	}
	at := g.locs[index-g.first]
	seg, ok := l.s.segs[at.seg]
	if !ok {
		l.s.mu.RUnlock()
		return raft.ErrLogNotFound
	}
	buf := make([]byte, at.n)
	_, err := seg.f.ReadAt(buf, at.off)
	l.s.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("raftlog: read group %d entry %d: %w", l.id, index, err)
	}
	if err := decodeEntry(buf, out); err != nil {
		return err
	}
	if out.Index != index {
		return fmt.Errorf("%w: group %d entry %d holds index %d", ErrCorrupt, l.id, index, out.Index)
	}
	return nil
}

// StoreLog implements raft.LogStore.
func (l *Log) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

var encodePool = sync.Pool{New: func() any { return new([]byte) }}

// StoreLogs implements raft.LogStore: the entries become one record of the
// next group commit, durable when this returns.
func (l *Log) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	var recs []record
	// A gap after the last entry (or a write below the first) starts the
	// log afresh: raft appends after a hole only following a snapshot
	// install that passed the log's end.
	l.s.mu.RLock()
	if g, ok := l.s.groups[l.id]; ok && len(g.locs) > 0 && (logs[0].Index > g.last()+1 || logs[0].Index < g.first) {
		recs = append(recs, encodeDelete(l.id, 0, ^uint64(0)))
	}
	l.s.mu.RUnlock()

	for i := range logs {
		// One entry is one record; a record over maxRecord would be
		// acknowledged here and then cut as torn at the next Open.
		if n := len(logs[i].Data) + len(logs[i].Extensions); n > maxEntryData {
			return fmt.Errorf("%w: entry %d holds %d bytes, over %d", ErrTooLarge, logs[i].Index, n, maxEntryData)
		}
		if i > 0 && logs[i].Index != logs[i-1].Index+1 {
			return fmt.Errorf("raftlog: entries %d and %d not contiguous", logs[i-1].Index, logs[i].Index)
		}
	}
	var bufs []*[]byte
	defer func() {
		for _, bp := range bufs {
			encodePool.Put(bp)
		}
	}()
	for len(logs) > 0 {
		bp := encodePool.Get().(*[]byte)
		bufs = append(bufs, bp)
		var rec record
		rec, logs = l.encodeEntries((*bp)[:0], logs)
		*bp = rec.frame
		recs = append(recs, rec)
	}
	return l.s.submit(recs...)
}

// maxEntryData bounds an entry's data and extensions: with its fields and
// framing it must fit one record (maxRecord). Range writes are at most a
// few MiB (the front-end's request limits, maxBatchBytes).
const maxEntryData = maxRecord - 1<<20

// recordTarget is the payload size after which StoreLogs starts another
// record, well below maxRecord.
var recordTarget = 32 << 20

// encodeEntries encodes a prefix of logs as one entries record into buf
// and returns the rest.
func (l *Log) encodeEntries(buf []byte, logs []*raft.Log) (record, []*raft.Log) {
	buf, start := beginFrame(buf, recEntries)
	buf = binary.AppendUvarint(buf, l.id)
	n := len(logs)
	size := 0
	for i, e := range logs {
		size += len(e.Data) + len(e.Extensions) + 64
		if i > 0 && size > recordTarget {
			n = i
			break
		}
	}
	buf = binary.AppendUvarint(buf, uint64(n))
	payload := start + frameHeader + 1
	refs := make([]entryRef, n)
	for i, e := range logs[:n] {
		size := entrySize(e)
		buf = binary.AppendUvarint(buf, uint64(size))
		mark := len(buf)
		buf = appendEntry(buf, e)
		refs[i] = entryRef{index: e.Index, off: mark - payload, n: size}
	}
	buf = endFrame(buf, start)
	return record{frame: buf, ev: event{kind: recEntries, group: l.id, entries: refs}}, logs[n:]
}

// DeleteRange implements raft.LogStore for suffix truncation and prefix
// compaction.
func (l *Log) DeleteRange(lo, hi uint64) error {
	l.s.mu.RLock()
	g, ok := l.s.groups[l.id]
	middle := ok && len(g.locs) > 0 && lo > g.first && hi < g.last()
	l.s.mu.RUnlock()
	if middle {
		return fmt.Errorf("%w: group %d [%d, %d]", ErrMiddleDelete, l.id, lo, hi)
	}
	return l.s.submit(encodeDelete(l.id, lo, hi))
}

func encodeDelete(id, lo, hi uint64) record {
	buf, start := beginFrame(nil, recDelete)
	buf = binary.AppendUvarint(buf, id)
	buf = binary.AppendUvarint(buf, lo)
	buf = binary.AppendUvarint(buf, hi)
	return record{frame: endFrame(buf, start), ev: event{kind: recDelete, group: id, min: lo, max: hi}}
}

// IsMonotonic implements raft.MonotonicLogStore, answering false: raft
// then compacts the log up to an installed snapshot and keeps the entries
// after it, as with raft-boltdb. Declared monotonic, hashicorp/raft
// (v1.7.3) deleted the whole log after installing a snapshot but kept its
// in-memory last index: when the follower's log ran past the snapshot, an
// AppendEntries naming that stale index as its previous entry was accepted,
// its entries were stored after a hole, and applying them panicked with
// "log not found" on every restart (chaos seed 26;
// TestSnapshotOlderThanTheLog). A gap raft leaves otherwise (a snapshot
// past the log's end) still starts the log afresh (StoreLogs).
func (l *Log) IsMonotonic() bool { return false }

// Set implements raft.StableStore.
func (l *Log) Set(key, val []byte) error {
	return l.s.submit(l.setRecord(key, val))
}

// Get implements raft.StableStore.
func (l *Log) Get(key []byte) ([]byte, error) {
	l.s.mu.RLock()
	defer l.s.mu.RUnlock()
	if g, ok := l.s.groups[l.id]; ok {
		if v, ok := g.kv[string(key)]; ok {
			return append([]byte(nil), v...), nil
		}
	}
	return nil, ErrKeyNotFound
}

// SetVote records a vote as hashicorp/raft's RequestVote handling would
// (its term as the current term, the candidate, the vote's term), in one
// group commit: one fdatasync instead of three. The records are written
// in that order, so a torn tail keeps a prefix of them, and every prefix
// means "no vote in this term": the new term alone, or with the candidate
// beside an older vote term (raft takes a candidate as voted for only
// with a vote term equal to the request's, and refuses requests of older
// terms). Written the other way round, a prefix could pair the new vote
// term with the previous candidate, whom raft would then grant again in
// this term without checking its log.
func (l *Log) SetVote(term uint64, candidate []byte) error {
	t := binary.BigEndian.AppendUint64(nil, term)
	return l.s.submit(l.setRecord([]byte("CurrentTerm"), t), l.setRecord([]byte("LastVoteCand"), candidate),
		l.setRecord([]byte("LastVoteTerm"), t))
}

func (l *Log) setRecord(key, val []byte) record {
	buf, start := beginFrame(nil, recSet)
	buf = binary.AppendUvarint(buf, l.id)
	buf = appendBytes(buf, key)
	buf = appendBytes(buf, val)
	ev := event{kind: recSet, group: l.id, key: append([]byte(nil), key...), val: append([]byte(nil), val...)}
	return record{frame: endFrame(buf, start), ev: ev}
}

// SetUint64 implements raft.StableStore.
func (l *Log) SetUint64(key []byte, val uint64) error {
	return l.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 implements raft.StableStore.
func (l *Log) GetUint64(key []byte) (uint64, error) {
	v, err := l.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: key %q holds %d bytes, not a uint64", ErrCorrupt, key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Drop deletes this group's log and stable keys.
func (l *Log) Drop() error { return l.s.Drop(l.id) }
