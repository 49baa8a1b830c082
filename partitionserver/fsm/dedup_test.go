package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"tablestore/internal/edm"
	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

// dumpBucket renders a bucket's keys and values in order (committed state).
func dumpBucket(t testing.TB, s *Store, name []byte) string {
	t.Helper()
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(name).ForEach(func(k, v []byte) error {
			fmt.Fprintf(&sb, "%x=%x\n", k, v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// checkRequestIndex fails unless the time index holds exactly one entry per
// well-formed request record, with the record's PartitionKey.
func checkRequestIndex(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		byTime := tx.Bucket(bucketRequestsByTime)
		want := 0
		err := tx.Bucket(bucketRequests).ForEach(func(k, v []byte) error {
			tk, ok := appendRequestTimeKey(nil, k, v)
			if !ok {
				return nil
			}
			want++
			if got := byTime.Get(tk); got == nil || !bytes.Equal(got, v[16:]) {
				return fmt.Errorf("record %x=%x: index entry %x = %q", k, v, tk, got)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if n := byTime.Stats().KeyN; n != want {
			return fmt.Errorf("index holds %d entries for %d records", n, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// world drives the ranges of one state file through their logs, the way
// raft hands entries to a replica.
type world struct {
	t    testing.TB
	path string
	s    *Store
	scan bool
	// restarts: the file is closed and opened again now and then (its
	// prune cursors lost).
	restarts bool
	ranges   map[uint64]*Range
	index    map[uint64]uint64
	results  []string
}

func newWorld(t testing.TB, scan bool, descs ...*pb.RangeDescriptor) *world {
	t.Helper()
	w := &world{t: t, path: filepath.Join(t.TempDir(), "state.db"), scan: scan,
		ranges: map[uint64]*Range{}, index: map[uint64]uint64{}}
	w.open()
	t.Cleanup(func() { w.s.Close() })
	for _, d := range descs {
		if err := w.s.CreateRange(d, true); err != nil {
			t.Fatal(err)
		}
		w.openRange(d.GetRangeId())
	}
	return w
}

func (w *world) open() {
	s, err := Open(w.path)
	if err != nil {
		w.t.Fatal(err)
	}
	if w.scan {
		s.prunePrior = pruneRequestsByScan
	}
	w.s = s
}

func (w *world) openRange(id uint64) {
	r, err := w.s.OpenRange(id, logging.Discard())
	if err != nil {
		w.t.Fatal(err)
	}
	w.ranges[id] = r
	w.index[id] = r.AppliedIndex()
}

// reopen restarts the file: every cursor is lost.
func (w *world) reopen() {
	if err := w.s.Close(); err != nil {
		w.t.Fatal(err)
	}
	w.open()
	for id := range w.ranges {
		w.openRange(id)
	}
}

// entry applies one entry at the range's next index (at index at, if
// later) and records its outcome.
func (w *world) entry(id uint64, at uint64, typ raft.LogType, data []byte) *Result {
	w.t.Helper()
	idx := max(w.index[id]+1, at)
	w.index[id] = idx
	out := w.ranges[id].ApplyBatch([]*raft.Log{{Index: idx, Term: 1, Type: typ, Data: data}})[0]
	res, _ := out.(*Result)
	if res != nil {
		w.results = append(w.results, fmt.Sprintf("%d@%d: ts %d err %v", id, idx, res.TimestampUnixNano, res.Err))
	}
	return res
}

func (w *world) flush() {
	if err := w.s.Flush(); err != nil {
		w.t.Fatal(err)
	}
}

// encoded is an encoded command; the commands built here always encode.
func encoded(data []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return data
}

// history is a random sequence of what the ranges of a table go through:
// writes with request ids (retries and ids reused across ranges
// included, and proposals older than the TTL), prunes, splits, merges,
// the old Absorb, snapshot installs, ranges removed, restarts.
type history struct {
	rng    *rand.Rand
	now    int64
	skew   map[uint64]int64
	nextID uint64
	ids    [][]byte
	snaps  map[uint64]savedSnap
}

// savedSnap is a snapshot of a range in each world, at a generation.
type savedSnap struct {
	gen  uint64
	data [][]byte
}

func newHistory(seed uint64) *history {
	return &history{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: 1_700_000_000_000_000_000,
		skew: map[uint64]int64{}, nextID: 100, snaps: map[uint64]savedSnap{}}
}

// pkIn picks a PartitionKey the range serves.
func (h *history) pkIn(d *pb.RangeDescriptor) string {
	var cands []string
	for c := 'a'; c <= 'z'; c++ {
		for _, pk := range []string{string(c), string(c) + "q"} {
			if InRange(d, pk) {
				cands = append(cands, pk)
			}
		}
	}
	if len(cands) == 0 {
		return d.GetStart()
	}
	return cands[h.rng.IntN(len(cands))]
}

func sortedIDs(w *world) []uint64 {
	var ids []uint64
	for id := range w.ranges {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// step runs one random step on every world alike (the first decides what
// is possible; the others must be in the same state).
func (h *history) step(t testing.TB, ws ...*world) {
	t.Helper()
	ref := ws[0]
	ids := sortedIDs(ref)
	pick := ids[h.rng.IntN(len(ids))]
	d := ref.ranges[pick].Descriptor()
	switch p := h.rng.IntN(100); {
	case p < 72: // a write
		if _, ok := h.skew[pick]; !ok {
			h.skew[pick] = (h.rng.Int64N(240) - 120) * int64(time.Second)
		}
		h.now += h.rng.Int64N(40) * int64(time.Second)
		proposed := h.now + h.skew[pick]
		if h.rng.IntN(40) == 0 {
			proposed -= (11 + h.rng.Int64N(10)) * int64(time.Minute) // a stale proposer
		}
		// A fresh id, or a recent one: a retry, or a reuse of another
		// range's id (its record is replaced).
		id := fmt.Appendf(nil, "id-%d", len(h.ids))
		if len(h.ids) > 0 && h.rng.IntN(3) == 0 {
			id = h.ids[max(0, len(h.ids)-1-h.rng.IntN(200))]
		} else {
			h.ids = append(h.ids, id)
		}
		pk := h.pkIn(d)
		data := encoded(EncodeWrite(&pb.WriteCommand{ProposedUnixNano: proposed, RequestId: id,
			Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, pk, fmt.Sprint(h.rng.IntN(5)), edm.MarshalBinary(&edm.Entity{}))}}))
		for _, w := range ws {
			w.entry(pick, 0, raft.LogCommand, data)
		}
	case p < 84: // up to the range's next prune
		at := (ref.index[pick]/pruneEvery + 1) * pruneEvery
		for _, w := range ws {
			w.entry(pick, at, raft.LogNoop, nil)
		}
	case p < 88: // a split
		if d.GetTableId() != 7 {
			return
		}
		key := string(rune('b' + h.rng.IntN(24)))
		if key <= d.GetStart() || !InRange(d, key) {
			return
		}
		h.nextID++
		data := encoded(Encode(pb.CommandKind_COMMAND_KIND_SPLIT, &pb.SplitCommand{SplitKey: key, NewRangeId: h.nextID}))
		for _, w := range ws {
			if res := w.entry(pick, 0, raft.LogCommand, data); res.Err != nil {
				t.Fatalf("split: %v", res.Err)
			}
			w.flush()
			w.openRange(h.nextID)
		}
	case p < 92: // a merge of the range and its right neighbour, or the old Absorb
		var right uint64
		for _, id := range ids {
			if od := ref.ranges[id].Descriptor(); od.GetTableId() == d.GetTableId() && d.GetEnd() != "" && od.GetStart() == d.GetEnd() {
				right = id
			}
		}
		if right == 0 {
			return
		}
		if h.rng.IntN(3) == 0 {
			h.absorb(t, pick, right, ws)
			return
		}
		freeze := encoded(Encode(pb.CommandKind_COMMAND_KIND_FREEZE, &pb.FreezeCommand{}))
		for _, w := range ws {
			fr := w.entry(right, 0, raft.LogCommand, freeze)
			w.flush()
			merge := encoded(Encode(pb.CommandKind_COMMAND_KIND_MERGE, &pb.MergeCommand{Right: w.ranges[right].Descriptor(), RightFreezeIndex: fr.Index}))
			if res := w.entry(pick, 0, raft.LogCommand, merge); res.Err != nil {
				t.Fatalf("merge: %v", res.Err)
			}
			w.flush()
			delete(w.ranges, right)
			delete(w.index, right)
		}
	case p < 95: // a snapshot installed over the range
		// The range's own, or one it took earlier over the same span:
		// that brings back records pruned since, below its cursor.
		old, ok := h.snaps[pick]
		if !ok || old.gen != d.GetGeneration() || h.rng.IntN(2) == 0 {
			old = savedSnap{gen: d.GetGeneration()}
			for _, w := range ws {
				snap, err := w.ranges[pick].Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				var out sink
				if err := snap.Persist(&out); err != nil {
					t.Fatal(err)
				}
				snap.Release()
				old.data = append(old.data, out.Bytes())
			}
			h.snaps[pick] = old
		}
		for i, w := range ws {
			if err := w.ranges[pick].Restore(io.NopCloser(bytes.NewReader(old.data[i]))); err != nil {
				t.Fatal(err)
			}
			w.index[pick] = w.ranges[pick].AppliedIndex()
		}
	case p < 96: // a range moves away from these servers
		if d.GetTableId() != 7 || len(ids) <= 2 {
			return
		}
		for _, w := range ws {
			if err := w.s.DeleteRange(pick, 0); err != nil {
				t.Fatal(err)
			}
			delete(w.ranges, pick)
			delete(w.index, pick)
		}
	case p < 98:
		for _, w := range ws {
			if w.restarts {
				w.reopen()
			}
		}
	}
}

// absorb merges right into left with the Absorb command (the rows and
// records carried in the entry, as logs written before in-place merges
// do), after the right range's replica left this file.
func (h *history) absorb(t testing.TB, left, right uint64, ws []*world) {
	t.Helper()
	ref := ws[0]
	rd := ref.ranges[right].Descriptor()
	st := ref.ranges[right].State()
	cmd := &pb.AbsorbCommand{Right: rd, RightLastTimestampUnixNano: st.GetLastTimestampUnixNano()}
	ref.flush()
	err := ref.s.db.View(func(tx *bolt.Tx) error {
		if b, _ := tableBucket(tx, rd.GetTableId(), false); b != nil {
			err := walkSpan(b, rd, func(k, v []byte) error {
				cmd.Rows = append(cmd.Rows, &pb.KV{Key: slices.Clone(k), Value: slices.Clone(v)})
				return nil
			})
			if err != nil {
				return err
			}
		}
		return forEachRequest(tx, rd, func(k, v []byte) error {
			cmd.Requests = append(cmd.Requests, &pb.KV{Key: slices.Clone(k[8:]), Value: slices.Clone(v)})
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	data := encoded(Encode(pb.CommandKind_COMMAND_KIND_ABSORB, cmd))
	for _, w := range ws {
		if err := w.s.DeleteRange(right, 0); err != nil {
			t.Fatal(err)
		}
		delete(w.ranges, right)
		delete(w.index, right)
		if res := w.entry(left, 0, raft.LogCommand, data); res.Err != nil {
			t.Fatalf("absorb: %v", res.Err)
		}
	}
}

// tableRanges is the starting layout: table 7 in three ranges here and
// table 8 (whose records sit after table 7's in both buckets) in one.
func tableRanges() []*pb.RangeDescriptor {
	return []*pb.RangeDescriptor{
		{RangeId: 1, TableId: 7, End: "h", Generation: 1},
		{RangeId: 2, TableId: 7, Start: "h", End: "p", Generation: 1},
		{RangeId: 3, TableId: 7, Start: "p", Generation: 1},
		{RangeId: 4, TableId: 8, Generation: 1},
	}
}

// TestPruneMatchesFullScan: on random histories, a file whose prunes read
// the time index ends every step with the same request records as one
// whose prunes read every record of the table (the implementation before
// the index), answers every entry alike, and keeps its index exact.
func TestPruneMatchesFullScan(t *testing.T) {
	for _, tc := range []struct {
		seed    uint64
		steps   int
		restart bool
	}{
		{seed: 1, steps: 3000},
		{seed: 2, steps: 3000},
		{seed: 3, steps: 3000, restart: true},
		{seed: 4, steps: 3000, restart: true},
	} {
		t.Run(fmt.Sprintf("seed=%d restart=%v", tc.seed, tc.restart), func(t *testing.T) {
			byIndex := newWorld(t, false, tableRanges()...)
			byScan := newWorld(t, true, tableRanges()...)
			byIndex.restarts = tc.restart
			h := newHistory(tc.seed)
			for i := range tc.steps {
				h.step(t, byIndex, byScan)
				if i%50 != 49 && i != tc.steps-1 {
					continue
				}
				gotRecs, wantRecs := dumpBucket(t, byIndex.s, bucketRequests), dumpBucket(t, byScan.s, bucketRequests)
				if gotRecs != wantRecs {
					t.Fatalf("step %d: request records differ: %s", i, firstDiff(gotRecs, wantRecs))
				}
				checkRequestIndex(t, byIndex.s)
				checkRequestIndex(t, byScan.s)
			}
			if !slices.Equal(byIndex.results, byScan.results) {
				t.Fatal("the two files answered entries differently")
			}
			if dumpBucket(t, byIndex.s, bucketRequestsByTime) != dumpBucket(t, byScan.s, bucketRequestsByTime) {
				t.Fatal("the time indexes differ")
			}
			// The history must have exercised the prune: with a clock
			// running ~20 s a write, most records expired.
			n := strings.Count(dumpBucket(t, byIndex.s, bucketRequests), "\n")
			if n == 0 || n > len(h.ids)/4 {
				t.Fatalf("%d records left of %d ids written, want some, fewer than a quarter", n, len(h.ids))
			}
		})
	}
}

// recordSpec is a request record put straight into a file.
type recordSpec struct {
	table    uint64
	id       string
	proposed int64
	pk       string
}

func putRecords(t testing.TB, s *Store, recs []recordSpec) {
	t.Helper()
	err := s.update(func(tx *bolt.Tx) error {
		for _, r := range recs {
			if err := storeRequest(tx, requestKey(r.table, []byte(r.id)), appendRequestRecord(nil, r.proposed+1, r.proposed, r.pk)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// requestIDs lists the stored records as table/id.
func requestIDs(t testing.TB, s *Store) []string {
	t.Helper()
	var ids []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRequests).ForEach(func(k, _ []byte) error {
			ids = append(ids, fmt.Sprintf("%d/%s", binary.BigEndian.Uint64(k), k[8:]))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestPruneRequests: a prune deletes exactly the range's records proposed
// before its horizon, reads only records below it, and a second prune at
// the same horizon reads none of the other ranges' records again.
func TestPruneRequests(t *testing.T) {
	const h = int64(1_000) * int64(time.Hour) // the horizon
	left := &pb.RangeDescriptor{RangeId: 1, TableId: 7, End: "m", Generation: 1}
	right := &pb.RangeDescriptor{RangeId: 2, TableId: 7, Start: "m", Generation: 1}
	for _, tc := range []struct {
		name          string
		d             *pb.RangeDescriptor
		recs          []recordSpec
		want          []string // what remains
		pruned, skips int
	}{
		{
			name: "the range's expired records go",
			d:    left,
			recs: []recordSpec{{7, "a1", h - 5, "a"}, {7, "a2", h - 1, "l"}, {7, "live", h, "b"}, {7, "later", h + 9, "c"}},
			want: []string{"7/later", "7/live"}, pruned: 2,
		},
		{
			name: "other ranges and tables are left alone",
			d:    left,
			recs: []recordSpec{{7, "mine", h - 5, "a"}, {7, "theirs", h - 5, "m"}, {6, "t6", h - 5, "a"}, {8, "t8", h - 5, "a"}},
			want: []string{"6/t6", "7/theirs", "8/t8"}, pruned: 1, skips: 1,
		},
		{
			name: "a range with no end",
			d:    right,
			recs: []recordSpec{{7, "mine", h - 5, "z"}, {7, "theirs", h - 5, "a"}, {7, "live", h + 1, "zz"}},
			want: []string{"7/live", "7/theirs"}, pruned: 1, skips: 1,
		},
		{
			name: "times before 1970 sort first",
			d:    left,
			recs: []recordSpec{{7, "neg", -5, "a"}, {7, "zero", 0, "b"}, {7, "live", h, "c"}},
			want: []string{"7/live"}, pruned: 2,
		},
		{
			name: "nothing expired",
			d:    left,
			recs: []recordSpec{{7, "live", h, "a"}, {7, "theirs", h + 1, "x"}},
			want: []string{"7/live", "7/theirs"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openTestRange(t, left)
			if err := s.CreateRange(right, true); err != nil {
				t.Fatal(err)
			}
			putRecords(t, s, tc.recs)
			// A malformed record (no proposal time) is never touched.
			err := s.update(func(tx *bolt.Tx) error {
				return storeRequest(tx, requestKey(7, []byte("short")), []byte("x"))
			})
			if err != nil {
				t.Fatal(err)
			}
			tc.want = append(tc.want, "7/short")
			slices.Sort(tc.want)
			st := &pb.RangeState{Range: tc.d, LastTimestampUnixNano: h + int64(requestTTL)}
			var cur pruneCursor
			prune := func() (int, int) {
				var pruned, skips int
				err := s.update(func(tx *bolt.Tx) error {
					var err error
					pruned, skips, err = pruneRequests(tx, st, s.tablePrune(7), &cur)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return pruned, skips
			}
			if pruned, skips := prune(); pruned != tc.pruned || skips != tc.skips {
				t.Errorf("pruned %d, skipped %d; want %d, %d", pruned, skips, tc.pruned, tc.skips)
			}
			if got := requestIDs(t, s); !slices.Equal(got, tc.want) {
				t.Errorf("records left %v, want %v", got, tc.want)
			}
			checkRequestIndex(t, s)
			if pruned, skips := prune(); pruned != 0 || skips != 0 {
				t.Errorf("second prune at the same horizon: pruned %d, skipped %d; want none read", pruned, skips)
			}
			// A record added below the cursor (a stale proposer) makes
			// the next prune start from the table's oldest record again.
			s.wmu.Lock()
			s.tablePrune(7).added(h - 10)
			s.wmu.Unlock()
			putRecords(t, s, []recordSpec{{7, "stale", h - 10, tc.d.GetStart()}})
			if pruned, skips := prune(); pruned != 1 || skips != tc.skips {
				t.Errorf("prune after a record below the cursor: pruned %d, skipped %d; want 1, %d", pruned, skips, tc.skips)
			}
			if got := requestIDs(t, s); !slices.Equal(got, tc.want) {
				t.Errorf("records left %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRequestIndexBuiltForOldFiles: a file written before the time index
// (records keyed by table, or still by range) gets it when opened, and its
// records are pruned and answer retries as before.
func TestRequestIndexBuiltForOldFiles(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rangeKeys bool // the layout before records were keyed by table
	}{
		{name: "records keyed by table"},
		{name: "records keyed by range", rangeKeys: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			s, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CreateRange(&pb.RangeDescriptor{RangeId: 5, TableId: 9, Generation: 1}, true); err != nil {
				t.Fatal(err)
			}
			r, _ := s.OpenRange(5, logging.Discard())
			clock := int64(1_000_000_000)
			var firsts []int64
			write := func(index uint64, id string) *Result {
				data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: clock, RequestId: []byte(id),
					Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, "p"+id, "r", entityBytes(t, nil))}})
				return r.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}})[0].(*Result)
			}
			for i := range 10 {
				clock += int64(time.Minute)
				firsts = append(firsts, write(uint64(i+1), fmt.Sprint("id", i)).TimestampUnixNano)
			}
			// Rewrite the file as the code before the index left it.
			err = s.update(func(tx *bolt.Tx) error {
				if err := tx.DeleteBucket(bucketRequestsByTime); err != nil {
					return err
				}
				if !tc.rangeKeys {
					return nil
				}
				old, err := tx.CreateBucket(bucketRangeRequests)
				if err != nil {
					return err
				}
				recs := tx.Bucket(bucketRequests)
				var ks [][]byte
				err = recs.ForEach(func(k, v []byte) error {
					ks = append(ks, slices.Clone(k))
					return old.Put(append(u64(5), k[8:]...), slices.Clone(v))
				})
				for _, k := range ks {
					if err := recs.Delete(k); err != nil {
						return err
					}
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			s, err = Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			checkRequestIndex(t, s)
			if n := strings.Count(dumpBucket(t, s, bucketRequestsByTime), "\n"); n != 10 {
				t.Fatalf("index of %d entries, want 10", n)
			}
			r, _ = s.OpenRange(5, logging.Discard())
			// A retry of the last write answers its first result.
			if got := write(11, "id9"); got.Err != nil || got.TimestampUnixNano != firsts[9] {
				t.Fatalf("retry after the index was built = %+v, want %d", got, firsts[9])
			}
			// Five minutes after the last, at the next prune, the first
			// four are forgotten (proposed more than 10 minutes before
			// the clock; the fifth exactly 10 minutes before it).
			clock += 5 * int64(time.Minute)
			write(pruneEvery, "now")
			s.Flush()
			var left []string
			for _, id := range requestIDs(t, s) {
				left = append(left, strings.TrimPrefix(id, "9/"))
			}
			if want := []string{"id4", "id5", "id6", "id7", "id8", "id9", "now"}; !slices.Equal(left, want) {
				t.Fatalf("records after the prune %v, want %v", left, want)
			}
			checkRequestIndex(t, s)
		})
	}
}

// firstDiff describes where two dumps part.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: %q, want %q (%d lines, want %d)", i, g[i], w[i], len(g), len(w))
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(g), len(w))
}

// TestPruneDeterministic: replicas forget the same records at the same
// entries whatever their cursors: a file restarted now and then (cursors
// lost) ends byte-identical to one that never was, in both buckets; and a
// replica whose file holds none of the table's other ranges keeps the same
// records of the range as one whose file holds a busy neighbour with stale
// proposals (records its prunes skip, and that invalidate its cursors).
func TestPruneDeterministic(t *testing.T) {
	for _, seed := range []uint64{11, 12, 13} {
		t.Run(fmt.Sprintf("restarts seed=%d", seed), func(t *testing.T) {
			steady := newWorld(t, false, tableRanges()...)
			restarted := newWorld(t, false, tableRanges()...)
			restarted.restarts = true
			h := newHistory(seed)
			for range 3000 {
				h.step(t, steady, restarted)
			}
			if !slices.Equal(steady.results, restarted.results) {
				t.Fatal("the two files answered entries differently")
			}
			for _, b := range [][]byte{bucketRequests, bucketRequestsByTime} {
				if got, want := dumpBucket(t, restarted.s, b), dumpBucket(t, steady.s, b); got != want {
					t.Fatalf("%s differs: %s", b, firstDiff(got, want))
				}
			}
			checkRequestIndex(t, steady.s)
		})
		t.Run(fmt.Sprintf("neighbour seed=%d", seed), func(t *testing.T) {
			left := &pb.RangeDescriptor{RangeId: 1, TableId: 7, End: "m", Generation: 1}
			right := &pb.RangeDescriptor{RangeId: 2, TableId: 7, Start: "m", Generation: 1}
			alone := newWorld(t, false, left)
			shared := newWorld(t, false, left, right)
			rng := rand.New(rand.NewPCG(seed, 1))
			now := int64(1_700_000_000_000_000_000)
			ent := entityBytesOf(nil)
			write := func(ws []*world, id uint64, pk string, proposed int64) {
				rid := fmt.Appendf(nil, "id-%d", rng.IntN(2000))
				data := encoded(EncodeWrite(&pb.WriteCommand{ProposedUnixNano: proposed, RequestId: rid,
					Ops: []*pb.EntityOp{op(pb.OpKind_OP_KIND_INSERT_OR_REPLACE, pk, "r", ent)}}))
				for _, w := range ws {
					w.entry(id, 0, raft.LogCommand, data)
				}
			}
			both := []*world{alone, shared}
			for range 6000 {
				now += rng.Int64N(20) * int64(time.Second)
				switch p := rng.IntN(100); {
				case p < 40:
					write(both, 1, string(rune('a'+rng.IntN(12))), now)
				case p < 80: // the neighbour, only in one file; its clock lags
					proposed := now - 3*int64(time.Minute)
					if rng.IntN(20) == 0 {
						proposed -= 20 * int64(time.Minute)
					}
					write([]*world{shared}, 2, string(rune('m'+rng.IntN(12))), proposed)
				case p < 90:
					at := (alone.index[1]/pruneEvery + 1) * pruneEvery
					for _, w := range both {
						w.entry(1, at, raft.LogNoop, nil)
					}
				default:
					shared.entry(2, (shared.index[2]/pruneEvery+1)*pruneEvery, raft.LogNoop, nil)
				}
			}
			var got, want []string
			for _, r := range shared.results {
				if strings.HasPrefix(r, "1@") {
					got = append(got, r)
				}
			}
			want = alone.results
			if !slices.Equal(got, want) {
				t.Fatal("the range answered its entries differently beside its neighbour")
			}
			// spanOf is the part of a bucket of the range's span; the
			// PartitionKey is at pkAt in the values.
			spanOf := func(w *world, b []byte, pkAt int) string {
				var out []string
				for _, line := range strings.Split(dumpBucket(t, w.s, b), "\n") {
					if k, v, ok := strings.Cut(line, "="); ok {
						pk, err := hex.DecodeString(v)
						if err != nil || len(pk) < pkAt {
							t.Fatalf("%s: %q", b, line)
						}
						if InRange(left, string(pk[pkAt:])) {
							out = append(out, k+"="+v)
						}
					}
				}
				return strings.Join(out, "\n")
			}
			for b, pkAt := range map[string]int{string(bucketRequests): 16, string(bucketRequestsByTime): 0} {
				if got, want := spanOf(shared, []byte(b), pkAt), spanOf(alone, []byte(b), pkAt); got != want || got == "" {
					t.Fatalf("%s of the range differ (or are empty): %s", b, firstDiff(got, want))
				}
			}
			checkRequestIndex(t, shared.s)
		})
	}
}

func entityBytesOf(props map[string]edm.Value) []byte {
	e := &edm.Entity{}
	for n, v := range props {
		e.Properties = append(e.Properties, edm.Property{Name: n, Value: v})
	}
	return edm.MarshalBinary(e)
}

// TestPruneCursorsOfTwoRanges: the table's highest cursor, not the last
// one set, decides whether a record added below a cursor invalidates them.
// The left range prunes up to base+20m, then the right range up to base+5m;
// a stale left write proposed at base+10m lies below the left cursor, so
// the left range's next prune must start over and forget it.
func TestPruneCursorsOfTwoRanges(t *testing.T) {
	const base = int64(1_000) * int64(time.Hour)
	m := int64(time.Minute)
	left := &pb.RangeDescriptor{RangeId: 1, TableId: 7, End: "m", Generation: 1}
	right := &pb.RangeDescriptor{RangeId: 2, TableId: 7, Start: "m", Generation: 1}
	s, _ := openTestRange(t, left)
	if err := s.CreateRange(right, true); err != nil {
		t.Fatal(err)
	}
	var lcur, rcur pruneCursor
	prune := func(d *pb.RangeDescriptor, cur *pruneCursor, last int64) {
		t.Helper()
		st := &pb.RangeState{Range: d, LastTimestampUnixNano: last}
		err := s.update(func(tx *bolt.Tx) error {
			_, _, err := pruneRequests(tx, st, s.tablePrune(7), cur)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	add := func(id string, p int64, pk string) {
		t.Helper()
		s.wmu.Lock()
		s.tablePrune(7).added(p)
		s.wmu.Unlock()
		putRecords(t, s, []recordSpec{{7, id, p, pk}})
	}
	add("r1", base+15*m, "x")
	add("l1", base+30*m, "a")
	prune(left, &lcur, base+30*m)  // cursor base+20m
	prune(right, &rcur, base+15*m) // cursor base+5m
	add("stale", base+10*m, "b")   // below the left cursor
	add("l2", base+40*m, "c")
	prune(left, &lcur, base+40*m) // horizon base+30m
	want := []string{"7/l1", "7/l2", "7/r1"}
	if got := requestIDs(t, s); !slices.Equal(got, want) {
		t.Fatalf("records left %v, want %v (the stale record expired)", got, want)
	}
	checkRequestIndex(t, s)
}

// pruneRequestsByScan is the prune before the time index: every record of
// the table read, the range's expired ones deleted. Tests compare the two.
func pruneRequestsByScan(tx *bolt.Tx, st *pb.RangeState) error {
	horizon := st.GetLastTimestampUnixNano() - int64(requestTTL)
	return deleteRequests(tx, st.GetRange(), func(v []byte) bool {
		return int64(binary.BigEndian.Uint64(v[8:16])) < horizon
	})
}
