package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/failpoint"
	"tablestore/internal/keys"
	pb "tablestore/proto/tablestorepb"
)

// Errors of the state machine. Operation errors are wrapped in *OpError.
var (
	ErrEntityExists     = errors.New("fsm: entity already exists")
	ErrEntityNotFound   = errors.New("fsm: entity not found")
	ErrConditionFailed  = errors.New("fsm: update condition not satisfied")
	ErrKeyOutOfRange    = errors.New("fsm: key outside the range")
	ErrRangeNotFound    = errors.New("fsm: range not hosted here")
	ErrBadCommand       = errors.New("fsm: malformed command")
	ErrUnknownCommand   = errors.New("fsm: unknown command kind")
	ErrCorruptSnapshot  = errors.New("fsm: corrupt snapshot")
	ErrInvalidEntity    = errors.New("fsm: invalid entity")
	ErrStaleGeneration  = errors.New("fsm: stale range generation")
	ErrRangeExists      = errors.New("fsm: range already exists")
	ErrRangeFrozen      = errors.New("fsm: range is frozen for a merge")
	ErrBadSplitKey      = errors.New("fsm: split key not inside the range")
	ErrNotAdjacent      = errors.New("fsm: ranges are not adjacent")
	ErrMergePending     = errors.New("fsm: range is frozen and its left neighbour here has not merged it yet")
	ErrSpanStays        = errors.New("fsm: the span cannot leave its group")
	errRangeStateAbsent = errors.New("fsm: range state absent")
)

// OpError is the failure of one operation of a write; Index is its position
// in the command (Azure reports it in batch errors).
type OpError struct {
	Index int
	Err   error
}

func (e *OpError) Error() string { return fmt.Sprintf("operation %d: %v", e.Index, e.Err) }
func (e *OpError) Unwrap() error { return e.Err }

var (
	bucketRanges = []byte("ranges")
	bucketData   = []byte("data")
	// bucketMeta holds facts about this file, not replicated state (never
	// in a snapshot). A bucket of its own, not a key in ranges: older
	// binaries decode every value of ranges as a RangeState, and ignore a
	// bucket they do not know.
	bucketMeta = []byte("meta")
)

// keyLastCommit (in bucketMeta) is the bbolt id of the last transaction
// this code committed: every write transaction of the package stamps its
// own id before it commits (stampCommit), one small put per commit,
// whatever it writes. Derived data kept beside the records (the time index
// of request records, dedup.go) is correct only if every commit since it
// was built maintained it; a binary that predates it (an older release
// opened on this file, a downgrade) commits without touching it or this
// key, and bbolt's ids grow by one per commit, so at Open a stamp other
// than the last committed id, or none beside an existing index, tells that
// some commit may have left the index wrong (foreignCommits).
var keyLastCommit = []byte("last-commit")

// stampCommit records tx's id in tx as the last commit of this code. Every
// write transaction of the package calls it just before committing: one it
// missed would make the next Open rebuild the index for nothing.
func stampCommit(tx *bolt.Tx) error {
	return tx.Bucket(bucketMeta).Put(keyLastCommit, u64(uint64(tx.ID())))
}

// foreignCommits reports, in Open's write transaction, whether a commit
// since this code's last one (or ever, without a stamp) was made by other
// code. A write transaction's id is the last committed one plus one.
func foreignCommits(tx *bolt.Tx) bool {
	var v []byte
	if b := tx.Bucket(bucketMeta); b != nil {
		v = b.Get(keyLastCommit)
	}
	return len(v) != 8 || binary.BigEndian.Uint64(v) != uint64(tx.ID()-1)
}

// Store is a partition server's bbolt file.
//
// Commands of every range on the server are applied into one shared write
// transaction that a committer commits (with fsync) every commit interval,
// or at once when a reader needs it: group commit, as etcd's backend does.
// Applying does not wait for the fsync: the Raft log, where every applied
// entry already is durable on a majority, is the source of truth, and a
// restart replays what the file missed. A range's applied index (what
// readers wait for) advances only when its changes are committed.
type Store struct {
	db *bolt.DB

	wmu    sync.Mutex
	tx     *bolt.Tx
	afters []func()

	// observe, when set, is told how long each commit took (the
	// server's slow-disk report, partitionserver/disklatency).
	observe atomic.Pointer[func(at time.Time, d time.Duration)]
	// delay is added to every commit (SetCommitDelay).
	delay atomic.Int64
	// observeWait, when set, is told how long each apply waited for the
	// write lock (ObserveApplyWaits).
	observeWait atomic.Pointer[func(d time.Duration)]

	// prunes is the request-prune state of each table (dedup.go),
	// guarded by wmu: only applies and updates touch it.
	prunes map[uint64]*tablePrune
	// fills counts each table's writes in the pending transaction, for
	// the split threshold of its pages (fill.go); guarded by wmu, cleared
	// with the transaction.
	fills map[uint64]*tableFill
	// prunePrior, when set, replaces the prune (tests: the full scan of
	// before the time index, their oracle).
	prunePrior func(tx *bolt.Tx, st *pb.RangeState) error
	// indexRebuilt: Open rebuilt the time index (IndexRebuilt).
	indexRebuilt bool
	// records is raised, inside the transaction, by every change to the
	// ranges bucket other than a group writing back its own spans' states
	// (a record deleted, taken, created or restored). A group re-reads
	// which of its spans' records still name it only when this moved since
	// its last check (Group.ApplyBatch): reading every span's record on
	// every batch cost ~0.5 µs a span, most of a one-write entry of a
	// group of many spans.
	records atomic.Uint64

	interval  time.Duration
	kick      chan struct{}
	urgent    chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// DefaultCommitInterval is how long applied commands wait for their group
// commit when no reader is waiting for them. Each commit costs ~1 ms of CPU
// whatever it holds (two fdatasyncs, the meta page, the freelist) besides its
// dirty pages: at 25 ms that fixed part was about a quarter of a follower's CPU per
// insert under load (BenchmarkCommitEvery; docs/performance.md, "Insert CPU,
// session 6"). Readers urge the commit, so only follower reads and restart
// replay see the longer interval.
const DefaultCommitInterval = 100 * time.Millisecond

// Open opens (creating if needed) the state file at path with the default
// commit interval.
func Open(path string) (*Store, error) { return OpenWithInterval(path, DefaultCommitInterval) }

// OpenWithInterval opens the state file with a given group-commit interval.
func OpenWithInterval(path string, interval time.Duration) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: 5 * time.Second,
		// Snapshots hold read transactions for long; a large initial mmap
		// keeps writers from waiting on them to remap.
		InitialMmapSize: 1 << 30,
		FreelistType:    bolt.FreelistMapType,
		NoFreelistSync:  true,
	})
	if err != nil {
		return nil, fmt.Errorf("fsm: open %s: %w", path, err)
	}
	rebuilt := false
	err = db.Update(func(tx *bolt.Tx) error {
		unindexed := tx.Bucket(bucketRequestsByTime) == nil
		if !unindexed && foreignCommits(tx) {
			// A binary that does not keep the time index committed
			// since this code last did: the index may miss its records
			// and hold entries of records it deleted. Build it anew.
			if err := tx.DeleteBucket(bucketRequestsByTime); err != nil {
				return err
			}
			unindexed, rebuilt = true, true
		}
		for _, b := range [][]byte{bucketRanges, bucketData, bucketRequests, bucketRequestsByTime, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if unindexed {
			// Written before the time index: build it, once.
			if err := indexRequests(tx); err != nil {
				return err
			}
		}
		if err := migrateRequests(tx); err != nil {
			return err
		}
		return stampCommit(tx)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("fsm: init %s: %w", path, err)
	}
	if interval <= 0 {
		interval = DefaultCommitInterval
	}
	s := &Store{db: db, prunes: map[uint64]*tablePrune{}, fills: map[uint64]*tableFill{}, indexRebuilt: rebuilt, interval: interval, kick: make(chan struct{}, 1), urgent: make(chan struct{}, 1), done: make(chan struct{})}
	s.wg.Add(1)
	go s.committer()
	return s, nil
}

// Close commits what is pending and closes the file.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	s.wg.Wait()
	if err := s.Flush(); err != nil {
		s.db.Close()
		return err
	}
	return s.db.Close()
}

// apply runs fn in the shared write transaction; after runs once the
// transaction is committed.
func (s *Store) apply(fn func(tx *bolt.Tx) error, after func()) error {
	if !s.wmu.TryLock() {
		start := time.Now()
		s.wmu.Lock()
		if fn := s.observeWait.Load(); fn != nil {
			(*fn)(time.Since(start))
		}
	}
	defer s.wmu.Unlock()
	if s.tx == nil {
		tx, err := s.db.Begin(true)
		if err != nil {
			return err
		}
		s.tx = tx
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	if err := fn(s.tx); err != nil {
		return err
	}
	if after != nil {
		s.afters = append(s.afters, after)
	}
	return nil
}

// Flush commits the pending transaction now.
func (s *Store) Flush() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.commitLocked()
}

// ObserveCommits has fn told the end and duration of every commit of
// applied entries from now on (nil: no more).
func (s *Store) ObserveCommits(fn func(at time.Time, d time.Duration)) {
	if fn == nil {
		s.observe.Store(nil)
		return
	}
	s.observe.Store(&fn)
}

// SetCommitDelay makes every commit take d longer, as on a slow disk, until
// set to 0 (fault injection: the failpoint partitionserver/fsm/commit does
// the same for every store of the process, this for one).
func (s *Store) SetCommitDelay(d time.Duration) { s.delay.Store(int64(d)) }

// ObserveApplyWaits has fn told, from now on, how long each apply that
// found the write lock held waited for it (nil: no more). A commit holds
// the lock from its first page write to its last fdatasync, and every apply
// of the server, the leaders' included, waits behind it (docs/performance.md,
// session 16); the wait also counts applies behind other applies.
func (s *Store) ObserveApplyWaits(fn func(d time.Duration)) {
	if fn == nil {
		s.observeWait.Store(nil)
		return
	}
	s.observeWait.Store(&fn)
}

// Urge asks the committer to commit without waiting for the interval: a
// reader waits for an applied index.
func (s *Store) Urge() {
	select {
	case s.urgent <- struct{}{}:
	default:
	}
}

func (s *Store) commitLocked() error {
	if s.tx == nil {
		return nil
	}
	start := time.Now()
	// The failpoint's delay counts: it stands for a slow disk.
	if d := s.delay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	err := failpoint.Inject("partitionserver/fsm/commit")
	if err == nil {
		err = stampCommit(s.tx)
	}
	if err == nil {
		err = s.tx.Commit()
	} else {
		s.tx.Rollback()
	}
	s.tx = nil
	clear(s.fills)
	if fn := s.observe.Load(); fn != nil && err == nil {
		now := time.Now()
		(*fn)(now, now.Sub(start))
	}
	afters := s.afters
	s.afters = nil
	if err != nil {
		// The pending transaction held applied log entries that raft
		// will not hand over again, while the ranges' in-memory state
		// has moved past them: going on would leave a hole in the file
		// under a later applied index. Stop; a restart replays them from
		// the log (whoever called: the committer, a snapshot, a range
		// creation).
		panic(fmt.Sprintf("fsm: commit of applied entries failed: %v", err))
	}
	for _, f := range afters {
		f()
	}
	return nil
}

func (s *Store) committer() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		urgent := false
		select {
		case <-s.done:
			return
		case <-s.kick:
		case <-s.urgent:
			// Do not wait out the interval: the urge may have been
			// taken here, before its transaction's kick.
			urgent = true
		}
		if !urgent {
			timer.Reset(s.interval)
			select {
			case <-s.done:
				timer.Stop()
				return
			case <-timer.C:
			case <-s.urgent:
				timer.Stop()
			}
		}
		if err := s.Flush(); err != nil {
			// The file can no longer follow the log.
			panic(fmt.Sprintf("fsm: group commit failed: %v", err))
		}
	}
}

// update commits what is pending, then runs fn in its own transaction
// (range creation and deletion, snapshot restore).
func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.commitLocked(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		s.records.Add(1)
		if err := fn(tx); err != nil {
			return err
		}
		return stampCommit(tx)
	})
}

// IndexRebuilt reports whether Open rebuilt the request records' time index
// because the file had commits this code did not make (foreignCommits): a
// start slower by one pass over the records, worth a line in the log.
func (s *Store) IndexRebuilt() bool { return s.indexRebuilt }

// tablePrune returns the request-prune state of a table; wmu is held.
// Entries are never deleted: a recreated entry would restart its epoch at
// 0, and a range still holding a cursor of epoch 0 for the table would
// take it as valid (a prune starting past records it must delete).
func (s *Store) tablePrune(tableID uint64) *tablePrune {
	t := s.prunes[tableID]
	if t == nil {
		t = &tablePrune{maxBelow: math.MinInt64}
		s.prunes[tableID] = t
	}
	return t
}

// prune forgets the range's expired request records (pruneRequests); wmu
// is held.
func (s *Store) prune(tx *bolt.Tx, st *pb.RangeState, cur *pruneCursor) error {
	if s.prunePrior != nil {
		return s.prunePrior(tx, st)
	}
	_, _, err := pruneRequests(tx, st, s.tablePrune(st.GetRange().GetTableId()), cur)
	return err
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// RangeStates lists the ranges stored in the file.
func (s *Store) RangeStates() ([]*pb.RangeState, error) {
	var out []*pb.RangeState
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRanges).ForEach(func(k, v []byte) error {
			st := &pb.RangeState{}
			if err := proto.Unmarshal(v, st); err != nil {
				return fmt.Errorf("fsm: range state %x: %w", k, err)
			}
			out = append(out, st)
			return nil
		})
	})
	return out, err
}

// RangeState is the range's stored state, nil when the file holds none.
func (s *Store) RangeState(rangeID uint64) (*pb.RangeState, error) {
	var st *pb.RangeState
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRanges).Get(u64(rangeID))
		if v == nil {
			return nil
		}
		st = &pb.RangeState{}
		if err := proto.Unmarshal(v, st); err != nil {
			return fmt.Errorf("fsm: range state %d: %w", rangeID, err)
		}
		return nil
	})
	return st, err
}

// HasRange reports whether the file holds the range's state.
func (s *Store) HasRange(rangeID uint64) (bool, error) {
	var has bool
	err := s.db.View(func(tx *bolt.Tx) error {
		has = tx.Bucket(bucketRanges).Get(u64(rangeID)) != nil
		return nil
	})
	return has, err
}

// CreateRange records a new range replica with applied index 0; bootstrap
// marks a member of the group's initial configuration. It fails with
// ErrRangeExists if the range is already stored.
func (s *Store) CreateRange(desc *pb.RangeDescriptor, bootstrap bool) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRanges)
		if b.Get(u64(desc.GetRangeId())) != nil {
			return ErrRangeExists
		}
		st := &pb.RangeState{Range: desc, Bootstrap: bootstrap}
		s.tablePrune(desc.GetTableId()).invalidate()
		if _, err := tx.Bucket(bucketData).CreateBucketIfNotExists(u64(desc.GetTableId())); err != nil {
			return err
		}
		return putState(tx, st)
	})
}

// DeleteRange removes a range's state and its entities. A frozen range
// whose left neighbour here has not applied the merge yet is kept
// (ErrMergePending): its keys are about to become the neighbour's, unless
// its freeze is at or below abortedThrough (the master recorded that
// freeze's merge as aborted: no merge will take it over; 0 when unknown).
func (s *Store) DeleteRange(rangeID, abortedThrough uint64) error {
	return s.update(func(tx *bolt.Tx) error {
		st, err := getState(tx, rangeID)
		if errors.Is(err, errRangeStateAbsent) {
			return nil
		}
		if err != nil {
			return err
		}
		if mergePending(tx, st, abortedThrough) {
			return ErrMergePending
		}
		s.tablePrune(st.GetRange().GetTableId()).invalidate()
		if err := clearSpan(tx, st.GetRange()); err != nil {
			return err
		}
		if err := tx.Bucket(bucketRanges).Delete(u64(rangeID)); err != nil {
			return err
		}
		// Drop the table bucket when no other range of the table remains here.
		tableID := st.GetRange().GetTableId()
		others := false
		_ = tx.Bucket(bucketRanges).ForEach(func(k, v []byte) error {
			o := &pb.RangeState{}
			if proto.Unmarshal(v, o) == nil && o.GetRange().GetTableId() == tableID {
				others = true
			}
			return nil
		})
		if !others {
			if err := tx.Bucket(bucketData).DeleteBucket(u64(tableID)); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
				return err
			}
		}
		return nil
	})
}

// CheckDelete reports ErrMergePending when DeleteRange would keep the range.
func (s *Store) CheckDelete(rangeID, abortedThrough uint64) error {
	return s.db.View(func(tx *bolt.Tx) error {
		st, err := getState(tx, rangeID)
		if err != nil || !mergePending(tx, st, abortedThrough) {
			return nil
		}
		return ErrMergePending
	})
}

// mergePending: st is frozen and a range stored here still ends where it
// starts, so the merge into that neighbour may yet apply here. Frozen is
// not proof of a merge to come: since the merge abort, a replica that
// applied a freeze and was then removed from its range before the
// unfreeze stays frozen for good. The master's decisions settle it: a
// freeze at or below abortedThrough was aborted, and no Merge naming it
// is ever proposed (master/mergedecision.go), so such a replica is not
// pending.
func mergePending(tx *bolt.Tx, st *pb.RangeState, abortedThrough uint64) bool {
	if !st.GetFrozen() || st.GetRange().GetStart() == "" {
		return false
	}
	if f := st.GetFrozenIndex(); f != 0 && f <= abortedThrough {
		return false
	}
	d := st.GetRange()
	pending := false
	_ = tx.Bucket(bucketRanges).ForEach(func(k, v []byte) error {
		o := &pb.RangeState{}
		if proto.Unmarshal(v, o) == nil && o.GetRange().GetTableId() == d.GetTableId() && o.GetRange().GetEnd() == d.GetStart() {
			pending = true
		}
		return nil
	})
	return pending
}

func getState(tx *bolt.Tx, rangeID uint64) (*pb.RangeState, error) {
	v := tx.Bucket(bucketRanges).Get(u64(rangeID))
	if v == nil {
		return nil, errRangeStateAbsent
	}
	st := &pb.RangeState{}
	if err := proto.Unmarshal(v, st); err != nil {
		return nil, fmt.Errorf("fsm: range state %d: %w", rangeID, err)
	}
	return st, nil
}

func putState(tx *bolt.Tx, st *pb.RangeState) error {
	b, err := proto.Marshal(st)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketRanges).Put(u64(st.GetRange().GetRangeId()), b)
}

// span returns the bbolt key bounds [lo, hi) of a descriptor; hi nil means
// unbounded.
func span(d *pb.RangeDescriptor) (lo, hi []byte) {
	if d.GetStart() != "" {
		lo = keys.PartitionStart(d.GetStart())
	}
	if d.GetEnd() != "" {
		hi = keys.PartitionStart(d.GetEnd())
	}
	return lo, hi
}

// errStopWalk ends a walkSpan early without an error.
var errStopWalk = errors.New("fsm: stop walk")

// walkSpan calls fn for every entity key and value of the descriptor's span
// in b, in key order, until fn returns an error (errStopWalk: stop quietly).
// fn must not modify b.
func walkSpan(b *bolt.Bucket, d *pb.RangeDescriptor, fn func(k, v []byte) error) error {
	lo, hi := span(d)
	c := b.Cursor()
	var k, v []byte
	if lo == nil {
		k, v = c.First()
	} else {
		k, v = c.Seek(lo)
	}
	for ; k != nil && (hi == nil || bytes.Compare(k, hi) < 0); k, v = c.Next() {
		if err := fn(k, v); err != nil {
			if errors.Is(err, errStopWalk) {
				return nil
			}
			return err
		}
	}
	return nil
}

// InRange reports whether PartitionKey pk belongs to the descriptor.
func InRange(d *pb.RangeDescriptor, pk string) bool {
	return pk >= d.GetStart() && (d.GetEnd() == "" || pk < d.GetEnd())
}

func tableBucket(tx *bolt.Tx, tableID uint64, create bool) (*bolt.Bucket, error) {
	data := tx.Bucket(bucketData)
	if b := data.Bucket(u64(tableID)); b != nil {
		return b, nil
	}
	if !create {
		return nil, nil
	}
	return data.CreateBucket(u64(tableID))
}

// ownedElsewhere reports whether a PartitionKey of d's table belongs to
// another range of the table stored in the same file.
func ownedElsewhere(tx *bolt.Tx, d *pb.RangeDescriptor) (func(pk string) bool, error) {
	var others []*pb.RangeDescriptor
	err := tx.Bucket(bucketRanges).ForEach(func(k, v []byte) error {
		o := &pb.RangeState{}
		if err := proto.Unmarshal(v, o); err != nil {
			return err
		}
		od := o.GetRange()
		if od.GetTableId() == d.GetTableId() && od.GetRangeId() != d.GetRangeId() {
			others = append(others, od)
		}
		return nil
	})
	return func(pk string) bool {
		for _, od := range others {
			if InRange(od, pk) {
				return true
			}
		}
		return false
	}, err
}

// deleteSpan deletes the entities of a descriptor's span, except those of
// PartitionKeys owned selects (nil: none).
func deleteSpan(tx *bolt.Tx, d *pb.RangeDescriptor, owned func(pk string) bool) error {
	keep := func(k []byte) bool {
		if owned == nil {
			return false
		}
		pk, err := keys.DecodePartitionKey(k)
		return err == nil && owned(pk)
	}
	b, err := tableBucket(tx, d.GetTableId(), false)
	if err != nil || b == nil {
		return err
	}
	lo, hi := span(d)
	c := b.Cursor()
	var k []byte
	if lo == nil {
		k, _ = c.First()
	} else {
		k, _ = c.Seek(lo)
	}
	for k != nil && (hi == nil || string(k) < string(hi)) {
		if keep(k) {
			k, _ = c.Next()
			continue
		}
		cur := append([]byte(nil), k...)
		if err := c.Delete(); err != nil {
			return err
		}
		// Delete moves the cursor unpredictably; seek past the deleted key.
		k, _ = c.Seek(cur)
	}
	return nil
}
