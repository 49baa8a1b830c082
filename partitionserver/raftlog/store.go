package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tablestore/internal/durable"
)

// Options tune a Store.
type Options struct {
	// SegmentSize is the size after which the next write starts a new
	// segment file (default 64 MiB).
	SegmentSize int64
	// ObserveSync, when set, is told the end and duration of every group
	// commit's fdatasync (only the sync: not the write, a new segment's
	// creation or the index's update) that succeeded, after its writers
	// were released: the server's slow-disk report
	// (partitionserver/disklatency).
	ObserveSync func(at time.Time, d time.Duration)
}

const defaultSegmentSize = 64 << 20

// Store is the shared log of every Raft group on one server.
type Store struct {
	dir     string
	segSize int64
	// observeSync is Options.ObserveSync.
	observeSync func(at time.Time, d time.Duration)
	// syncAt and syncTook are the end and duration of the last batch's
	// data fdatasync (only the writer of the batch touches them): what observeSync is
	// told, not the whole flush (a new segment's creation and checkpoint,
	// the index's update, old segments' unlinks are not the disk's commit
	// latency).
	syncAt   time.Time
	syncTook time.Duration

	// mu guards the index: groups, segments and the current segment.
	// Only the writer of a batch (one at a time, submit) and Open change it.
	mu     sync.RWMutex
	groups map[uint64]*group
	segs   map[uint64]*segment
	cur    *segment

	// qmu guards the batch being gathered.
	qmu     sync.Mutex
	pending *batch
	// spare is the buffer of the last batch written, kept for the next
	// batch: grown afresh from nil, each batch cost several allocations
	// and copies of everything gathered (8 % of a range leader's
	// allocated bytes under inserts).
	spare   []byte
	err     error // sticky: ErrClosed, ErrFailed or the write/sync failure
	closing bool
	// flushing: a batch is being written, by the submitter that found
	// none in progress or by a waiter the last writer handed the next
	// batch to (submit). idle is signalled when it ends (Close waits).
	flushing bool
	idle     *sync.Cond

	syncs   atomic.Uint64
	records atomic.Uint64

	// sealSeq is the number of the last group commit sealed (record.go's
	// seals): set by replay, then by each commit's writer (one at a time).
	sealSeq uint64
}

// loc is where one entry's bytes are: segment, offset, length. seg 0 marks
// a hole (only while replaying).
type loc struct {
	seg uint64
	off int64
	n   uint32
}

type group struct {
	first uint64
	locs  []loc // locs[i] holds entry first+i
	kv    map[string][]byte
}

func (g *group) last() uint64 {
	if len(g.locs) == 0 {
		return 0
	}
	return g.first + uint64(len(g.locs)) - 1
}

type segment struct {
	id    uint64
	f     *os.File
	size  int64 // end of the records
	alloc int64 // end of the zeros written ahead of the records
	live  int   // entries of any group the index points into this segment
}

// preallocChunk is how far ahead of the records a segment is zero-filled.
// Overwriting blocks that are already written keeps the file size, so
// fdatasync flushes only data; appending past the end would change the
// size and make every sync a journal commit, which on a shared file system
// waits for everyone else's metadata too.
const preallocChunk = 1 << 20

var zeros = make([]byte, preallocChunk)

// writeRecords writes buf at the segment's end, zero-filling ahead first
// when the records would pass the preallocated part. The caller syncs.
func (seg *segment) writeRecords(buf []byte) error {
	end := seg.size + int64(len(buf))
	if end > seg.alloc {
		to := (end/preallocChunk + 1) * preallocChunk
		for off := max(seg.alloc, end); off < to; {
			n := min(int64(len(zeros)), to-off)
			if _, err := seg.f.WriteAt(zeros[:n], off); err != nil {
				return err
			}
			off += n
		}
		seg.alloc = to
	}
	_, err := seg.f.WriteAt(buf, seg.size)
	return err
}

// batch is the records gathered while the previous write was syncing; one
// write and one fdatasync make them all durable.
type batch struct {
	buf  []byte
	ops  []pendingOp
	done chan struct{}
	// turn hands the batch, taken from pending, to one of its waiters to
	// write (capacity one: exactly one waiter gets it).
	turn chan struct{}
	err  error
}

type pendingOp struct {
	ev         event
	payloadOff int // offset of the record's payload in buf
}

// record is one encoded frame and its decoded form for the index.
type record struct {
	frame []byte
	ev    event
}

func segName(id uint64) string { return fmt.Sprintf("%016x.log", id) }

// Open opens (or creates) the shared log in dir, replays it and cuts a torn
// tail.
func Open(dir string, opts Options) (*Store, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = defaultSegmentSize
	}
	if err := durable.MkdirAll(dir); err != nil {
		return nil, err
	}
	s := &Store{
		dir: dir, segSize: opts.SegmentSize, observeSync: opts.ObserveSync,
		groups: map[uint64]*group{}, segs: map[uint64]*segment{},
	}
	s.idle = sync.NewCond(&s.qmu)
	ok := false
	defer func() {
		if !ok {
			for _, seg := range s.segs {
				seg.f.Close()
			}
		}
	}()
	ids, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if err := s.replay(id, i == len(ids)-1); err != nil {
			return nil, err
		}
	}
	for id, g := range s.groups {
		for i, l := range g.locs {
			if l.seg == 0 {
				return nil, fmt.Errorf("%w: group %d entry %d missing", ErrCorrupt, id, g.first+uint64(i))
			}
		}
	}
	// Appends go to a fresh segment that starts with a checkpoint, so every
	// segment but a fully replayed one does.
	var next uint64 = 1
	if len(ids) > 0 {
		next = ids[len(ids)-1] + 1
	}
	seg, err := s.newSegment(next, nil)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.segs[seg.id] = seg
	s.cur = seg
	dead := s.collectGarbage()
	s.mu.Unlock()
	removeSegments(dead)
	ok = true
	return s, nil
}

func listSegments(dir string) ([]uint64, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, de := range des {
		name, found := strings.CutSuffix(de.Name(), ".log")
		if !found || de.IsDir() {
			continue
		}
		id, err := strconv.ParseUint(name, 16, 64)
		if err != nil || id == 0 {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// replay applies one segment's records to the index. In the newest segment
// a torn or corrupt frame ends the log and is cut off; elsewhere it is
// corruption.
func (s *Store) replay(id uint64, newest bool) error {
	path := filepath.Join(s.dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	seg := &segment{id: id, f: f}
	s.segs[id] = seg
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	off := 0
	for off < len(data) {
		kind, payload, n, err := nextFrame(data[off:])
		if err != nil && allZero(data[off:]) {
			break // preallocated space
		}
		if err != nil {
			if !newest {
				return fmt.Errorf("%w: %s at offset %d", ErrCorrupt, path, off)
			}
			if next := s.sealSeq + 2; sealAt(data[off+1:], next) {
				return fmt.Errorf("%w: %s at offset %d, in commit %d, which commit %d sealed after it proves was synced (a torn write would have been the last commit)",
					ErrCorrupt, path, off, s.sealSeq+1, next)
			}
			if err := f.Truncate(int64(off)); err != nil {
				return fmt.Errorf("raftlog: cutting torn tail of %s: %w", path, err)
			}
			if err := f.Sync(); err != nil {
				return err
			}
			data = data[:off]
			break
		}
		ev, err := decodeRecord(kind, payload)
		if err != nil {
			return fmt.Errorf("%s at offset %d: %w", path, off, err)
		}
		s.apply(&ev, id, int64(off+frameHeader+1))
		off += n
	}
	seg.size = int64(off)
	seg.alloc = int64(len(data))
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// newSegment creates segment id holding a checkpoint of the index followed
// by data, and makes it durable.
func (s *Store) newSegment(id uint64, data []byte) (*segment, error) {
	path := filepath.Join(s.dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	buf := s.appendCheckpoint(nil)
	s.mu.RUnlock()
	buf = append(buf, data...)
	seg := &segment{id: id, f: f}
	if err = seg.writeRecords(buf); err == nil {
		err = s.timedSync(f)
	}
	if err == nil {
		err = durable.SyncDir(s.dir)
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	s.syncs.Add(1)
	seg.size = int64(len(buf))
	return seg, nil
}

// appendCheckpoint encodes every group's bounds and stable keys. Callers
// hold mu.
func (s *Store) appendCheckpoint(buf []byte) []byte {
	buf, start := beginFrame(buf, recCheckpoint)
	ids := make([]uint64, 0, len(s.groups))
	for id := range s.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	buf = binary.AppendUvarint(buf, uint64(len(ids)))
	for _, id := range ids {
		g := s.groups[id]
		buf = binary.AppendUvarint(buf, id)
		buf = binary.AppendUvarint(buf, g.first)
		buf = binary.AppendUvarint(buf, uint64(len(g.locs)))
		keys := make([]string, 0, len(g.kv))
		for k := range g.kv {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		buf = binary.AppendUvarint(buf, uint64(len(keys)))
		for _, k := range keys {
			buf = appendBytes(buf, []byte(k))
			buf = appendBytes(buf, g.kv[k])
		}
	}
	return endFrame(buf, start)
}

func appendBytes(buf, b []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(b)))
	return append(buf, b...)
}

// submit queues records for the next group commit and waits until they are
// durable and indexed.
//
// There is no flusher goroutine: a submitter that finds no batch being
// written writes its own at once, and one that finds one queues its
// records for the next batch and waits; when a write ends, its writer
// hands the batch gathered meanwhile to one of that batch's waiters,
// which writes it and returns. Each group commit thus wakes only its own
// waiters (one of them to write), where a flusher goroutine cost two
// more switches per commit (its wake-up, then the writer's), and a lone
// append on an idle log none.
func (s *Store) submit(recs ...record) error {
	s.qmu.Lock()
	if s.err != nil {
		err := s.err
		s.qmu.Unlock()
		return err
	}
	b := s.pending
	if b == nil {
		b = &batch{buf: s.spare, done: make(chan struct{}), turn: make(chan struct{}, 1)}
		s.spare = nil
		s.pending = b
	}
	for _, r := range recs {
		b.ops = append(b.ops, pendingOp{ev: r.ev, payloadOff: len(b.buf) + frameHeader + 1})
		b.buf = append(b.buf, r.frame...)
	}
	if !s.flushing {
		s.flushing = true
		s.pending = nil
		s.qmu.Unlock()
		s.write(b)
		return b.err
	}
	s.qmu.Unlock()
	select {
	case <-b.done:
	case <-b.turn:
		s.write(b)
	}
	return b.err
}

// write writes a batch taken from pending (the caller holds the flushing
// role), releases its waiters, and hands the role on: to a waiter of the
// batch gathered meanwhile, or back.
func (s *Store) write(b *batch) {
	s.qmu.Lock()
	err := s.err
	s.qmu.Unlock()
	if err != nil {
		// Closed, failed or broken after the batch was taken: nothing of
		// it is written.
		b.err = err
	} else {
		start := time.Now()
		b.err = s.flush(b)
		syncSeconds.Observe(time.Since(start).Seconds())
	}
	syncAt, syncTook := s.syncAt, s.syncTook
	s.qmu.Lock()
	if b.err != nil && s.err == nil {
		s.err = b.err
	}
	// Waiters read only b.err: the written bytes can hold the next
	// batch (unless a rare huge one would pin its memory).
	if cap(b.buf) <= maxSpareBuf {
		s.spare = b.buf[:0]
	}
	next := s.pending
	s.pending = nil
	if next == nil {
		s.flushing = false
		s.idle.Broadcast()
	}
	s.qmu.Unlock()
	close(b.done)
	if next != nil {
		next.turn <- struct{}{}
	}
	// After the waiters are released: observeSync takes a lock, off
	// the writes' critical path.
	if s.observeSync != nil && b.err == nil {
		s.observeSync(syncAt, syncTook)
	}
}

// maxSpareBuf bounds the batch buffer a Store keeps between batches.
const maxSpareBuf = 1 << 20

// flush writes a batch with one write and one fdatasync (starting a new
// segment first when the current one is full), then applies it to the
// index and deletes segments nothing needs any more.
func (s *Store) flush(b *batch) error {
	b.buf = appendSeal(b.buf, s.sealSeq+1)
	cur := s.cur
	var base int64
	if cur.size > 0 && cur.size+int64(len(b.buf)) > s.segSize {
		seg, err := s.newSegment(cur.id+1, b.buf)
		if err != nil {
			return fmt.Errorf("raftlog: new segment: %w", err)
		}
		base = seg.size - int64(len(b.buf))
		s.mu.Lock()
		s.segs[seg.id] = seg
		s.cur = seg
		s.mu.Unlock()
	} else {
		base = cur.size
		if err := cur.writeRecords(b.buf); err != nil {
			return fmt.Errorf("raftlog: write: %w", err)
		}
		if err := s.timedSync(cur.f); err != nil {
			return fmt.Errorf("raftlog: sync: %w", err)
		}
		s.syncs.Add(1)
		s.mu.Lock()
		cur.size += int64(len(b.buf))
		s.mu.Unlock()
	}
	s.sealSeq++
	s.records.Add(uint64(len(b.ops)))
	recordsTotal.Add(float64(len(b.ops)))
	bytesTotal.Add(float64(len(b.buf)))
	s.mu.Lock()
	for i := range b.ops {
		s.apply(&b.ops[i].ev, s.cur.id, base+int64(b.ops[i].payloadOff))
	}
	dead := s.collectGarbage()
	s.mu.Unlock()
	removeSegments(dead)
	return nil
}

// collectGarbage unlinks from the index every segment but the current one
// that holds no live entry; their records' state is in the checkpoint at
// the start of a later segment. Callers hold mu and then remove the files.
func (s *Store) collectGarbage() []*segment {
	var dead []*segment
	for id, seg := range s.segs {
		if seg.live == 0 && seg != s.cur {
			dead = append(dead, seg)
			delete(s.segs, id)
		}
	}
	return dead
}

func removeSegments(dead []*segment) {
	for _, seg := range dead {
		seg.f.Close()
		os.Remove(seg.f.Name())
	}
}

// apply changes the index as record ev (found at payload offset base of
// segment seg) says. Callers hold mu.
func (s *Store) apply(ev *event, seg uint64, base int64) {
	switch ev.kind {
	case recEntries:
		g := s.group(ev.group)
		for _, e := range ev.entries {
			s.put(g, e.index, loc{seg: seg, off: base + int64(e.off), n: uint32(e.n)})
		}
	case recDelete:
		if ev.group == sealGroup {
			s.sealSeq = max(s.sealSeq, ev.min)
			return
		}
		if g, ok := s.groups[ev.group]; ok {
			s.deleteRange(g, ev.min, ev.max)
		}
	case recSet:
		g := s.group(ev.group)
		g.kv[string(ev.key)] = cloneOrNil(ev.val)
	case recDrop:
		if g, ok := s.groups[ev.group]; ok {
			s.deleteRange(g, 0, ^uint64(0))
			delete(s.groups, ev.group)
		}
	case recCheckpoint:
		keep := make(map[uint64]bool, len(ev.groups))
		for _, gs := range ev.groups {
			keep[gs.id] = true
			g := s.group(gs.id)
			g.kv = gs.kv
			s.bound(g, gs.first, gs.count)
		}
		for id, g := range s.groups {
			if !keep[id] {
				s.deleteRange(g, 0, ^uint64(0))
				delete(s.groups, id)
			}
		}
	}
}

func (s *Store) group(id uint64) *group {
	g, ok := s.groups[id]
	if !ok {
		g = &group{kv: map[string][]byte{}}
		s.groups[id] = g
	}
	return g
}

func (s *Store) release(l loc) {
	if l.seg != 0 {
		if seg, ok := s.segs[l.seg]; ok {
			seg.live--
		}
	}
}

func (s *Store) releaseAll(ls []loc) {
	for _, l := range ls {
		s.release(l)
	}
}

// put indexes entry idx of g at l.
func (s *Store) put(g *group, idx uint64, l loc) {
	if seg, ok := s.segs[l.seg]; ok {
		seg.live++
	}
	switch {
	case len(g.locs) == 0 || idx < g.first:
		// Views never write below the first entry; a fresh start is
		// the only sensible reading.
		s.releaseAll(g.locs)
		g.first = idx
		g.locs = append(g.locs[:0], l)
	case idx-g.first < uint64(len(g.locs)):
		i := idx - g.first
		s.release(g.locs[i])
		g.locs[i] = l
	default:
		for uint64(len(g.locs)) < idx-g.first {
			g.locs = append(g.locs, loc{})
		}
		g.locs = append(g.locs, l)
	}
}

// deleteRange drops entries min..max (inclusive) of g.
func (s *Store) deleteRange(g *group, lo, hi uint64) {
	if len(g.locs) == 0 || hi < g.first || lo > g.last() {
		return
	}
	lo = max(lo, g.first)
	hi = min(hi, g.last())
	i, j := lo-g.first, hi-g.first+1
	s.releaseAll(g.locs[i:j])
	switch {
	case i == 0 && j == uint64(len(g.locs)):
		g.locs = nil
		g.first = 0
	case i == 0:
		g.locs = slices.Clone(g.locs[j:])
		g.first = hi + 1
	case j == uint64(len(g.locs)):
		g.locs = g.locs[:i]
	default:
		clear(g.locs[i:j])
	}
}

// bound makes g hold exactly indexes first..first+count-1, as a checkpoint
// says; entries it has no record of yet become holes that later records of
// the replay delete.
func (s *Store) bound(g *group, first, count uint64) {
	if count == 0 {
		s.releaseAll(g.locs)
		g.locs, g.first = nil, 0
		return
	}
	last := first + count - 1
	if len(g.locs) == 0 {
		g.first = first
		g.locs = make([]loc, count)
		return
	}
	if g.first < first {
		s.deleteRange(g, g.first, first-1)
	}
	if len(g.locs) > 0 && g.last() > last {
		s.deleteRange(g, last+1, g.last())
	}
	if len(g.locs) == 0 {
		g.first = first
		g.locs = make([]loc, count)
		return
	}
	if g.first > first {
		g.locs = append(make([]loc, g.first-first), g.locs...)
		g.first = first
	}
	for g.last() < last {
		g.locs = append(g.locs, loc{})
	}
}

// Close fails the writes still queued (their callers get ErrClosed; a
// batch being written completes) and closes the files.
func (s *Store) Close() error {
	s.qmu.Lock()
	if s.closing {
		s.qmu.Unlock()
		return nil
	}
	s.closing = true
	if s.err == nil {
		s.err = ErrClosed
	}
	b := s.pending
	s.pending = nil
	if b != nil {
		// Not yet taken by a writer: it is failed here, and a writer
		// finding nothing pending gives the role back.
		b.err = s.err
		close(b.done)
	}
	for s.flushing {
		s.idle.Wait()
	}
	s.qmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for _, seg := range s.segs {
		if cerr := seg.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// ErrFailed is returned for writes after Fail.
var ErrFailed = errors.New("raftlog: failed")

// Fail makes every write not yet on its way to disk fail, as if the
// process had died at this instant (fault injection): what was
// acknowledged before is durable, nothing later lands. Close still
// releases the files.
func (s *Store) Fail() {
	s.qmu.Lock()
	if s.err == nil {
		s.err = ErrFailed
	}
	b := s.pending
	s.pending = nil
	s.qmu.Unlock()
	if b != nil {
		b.err = ErrFailed
		close(b.done)
	}
}

// Stats are counters of the store's work.
type Stats struct {
	Syncs    uint64 // fdatasync calls (group commits)
	Records  uint64 // records written
	Segments int    // segment files
	Groups   int    // groups with any state
}

// Stats reports the store's counters.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Stats{Syncs: s.syncs.Load(), Records: s.records.Load(), Segments: len(s.segs), Groups: len(s.groups)}
}

// Groups lists the groups with any log entry or stable key.
func (s *Store) Groups() []uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make([]uint64, 0, len(s.groups))
	for id := range s.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Drop deletes a group's log and stable keys (its range left this server).
// Dropping a group without state writes nothing. The group's writers must
// have stopped.
func (s *Store) Drop(id uint64) error {
	s.mu.RLock()
	_, ok := s.groups[id]
	s.mu.RUnlock()
	if !ok {
		return nil
	}
	return s.submit(encodeDrop(id))
}

func encodeDrop(id uint64) record {
	buf, start := beginFrame(nil, recDrop)
	buf = binary.AppendUvarint(buf, id)
	return record{frame: endFrame(buf, start), ev: event{kind: recDrop, group: id}}
}

// timedSync is fdatasync, its end and duration kept for observeSync.
// Called by the writer of a batch only.
func (s *Store) timedSync(f *os.File) error {
	start := time.Now()
	err := fdatasync(f)
	s.syncAt = time.Now()
	s.syncTook = s.syncAt.Sub(start)
	return err
}

func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
