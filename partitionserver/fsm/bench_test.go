package fsm

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"tablestore/internal/edm"
	"tablestore/internal/logging"
	pb "tablestore/proto/tablestorepb"
)

func benchEntity(b *testing.B) []byte {
	e := &edm.Entity{Properties: []edm.Property{
		{Name: "Name", Value: edm.Value{Type: edm.TypeString, Str: "some name"}},
		{Name: "Age", Value: edm.Value{Type: edm.TypeInt32, Int: 42}},
		{Name: "Pad", Value: edm.Value{Type: edm.TypeString, Str: strings.Repeat("x", 900)}},
	}}
	return edm.MarshalBinary(e)
}

// BenchmarkEncodeWrite is the leader's cost of turning a write into a log
// entry.
func BenchmarkEncodeWrite(b *testing.B) {
	ent := benchEntity(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: 1, RequestId: []byte("0123456789abcdef0123456789abcdef"),
			Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: "r", Entity: ent}}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyInsert is every replica's cost of applying one insert
// (without the group commit's fsync).
func BenchmarkApplyInsert(b *testing.B) {
	s, r := openTestRange(b, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	defer s.Close()
	ent := benchEntity(b)
	var idx uint64
	b.ReportAllocs()
	for b.Loop() {
		idx++
		data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: int64(idx) * 1000, RequestId: fmt.Appendf(nil, "req-%d", idx),
			Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: fmt.Sprintf("r%09d", idx), Entity: ent}}})
		res := r.ApplyBatch([]*raft.Log{{Index: idx, Type: raft.LogCommand, Data: data}})
		if res[0].(*Result).Err != nil {
			b.Fatal(res[0].(*Result).Err)
		}
		if idx%256 == 0 {
			s.Flush()
		}
	}
}

// BenchmarkCommitRequestIDs is the state file's group commit of entries of
// 16 inserts each (one commit per entry, as a busy follower does) over a
// table that already holds 100,000 request records: random request ids (as
// the front-end sends today) against time-ordered ones, which land on the
// request bucket's last page instead of 16 random ones.
func BenchmarkCommitRequestIDs(b *testing.B) {
	for _, ordered := range []bool{false, true} {
		b.Run(fmt.Sprintf("ordered=%v", ordered), func(b *testing.B) {
			s, r := openTestRange(b, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
			ent := benchEntity(b)
			rng := rand.New(rand.NewPCG(1, 2))
			var idx, n uint64
			id := func() []byte {
				n++
				out := make([]byte, 16)
				if ordered {
					binary.BigEndian.PutUint64(out, n)
				} else {
					binary.BigEndian.PutUint64(out, rng.Uint64())
				}
				binary.BigEndian.PutUint64(out[8:], rng.Uint64())
				return out
			}
			entry := func() {
				writes := make([]*pb.WriteCommand, 16)
				for i := range writes {
					writes[i] = &pb.WriteCommand{ProposedUnixNano: int64(n+1) * 1000, RequestId: id(),
						Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: fmt.Sprintf("r%012d", n), Entity: ent}}}
				}
				data, _ := EncodeWriteBatch(writes)
				idx++
				r.ApplyBatch([]*raft.Log{{Index: idx, Type: raft.LogCommand, Data: data}})
			}
			for range 100_000 / 16 {
				entry()
			}
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
			timeCPUPerWrite(b, 16, func() {
				for range b.N {
					entry()
					if err := s.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkCommitEvery is a replica's CPU per insert (apply and the state
// file's group commit, fsyncs included) with a commit every n writes, as the
// commit interval sets it: at ~3,000 inserts/s, 25 ms is ~75 writes per
// commit and 100 ms ~300. Inserts spread over 1,024 PartitionKeys of a table
// that already holds 50,000 entities, in entries of 16 writes (the leader's
// write batching), as insert-many-partitions does.
func BenchmarkCommitEvery(b *testing.B) {
	for _, every := range []int{80, 160, 320} {
		b.Run(fmt.Sprintf("writes=%d", every), func(b *testing.B) {
			s, r := openTestRange(b, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
			ent := benchEntity(b)
			rng := rand.New(rand.NewPCG(3, 4))
			var idx, n uint64
			entry := func() {
				writes := make([]*pb.WriteCommand, 16)
				for i := range writes {
					n++
					id := make([]byte, 16)
					binary.BigEndian.PutUint64(id, n)
					binary.BigEndian.PutUint64(id[8:], rng.Uint64())
					writes[i] = &pb.WriteCommand{ProposedUnixNano: int64(n) * 1000, RequestId: id,
						Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: fmt.Sprintf("pk%04d", rng.IntN(1024)),
							RowKey: fmt.Sprintf("%016x", rng.Uint64()), Entity: ent}}}
				}
				data, _ := EncodeWriteBatch(writes)
				idx++
				r.ApplyBatch([]*raft.Log{{Index: idx, Type: raft.LogCommand, Data: data}})
			}
			for i := range 50_000 / 16 {
				entry()
				if i%20 == 0 {
					s.Flush()
				}
			}
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
			timeCPUPerWrite(b, 16, func() {
				for i := range b.N {
					entry()
					if (i+1)*16%every == 0 {
						if err := s.Flush(); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		})
	}
}

// BenchmarkApplyEntry is every replica's apply of one entry of 16 coalesced
// inserts over 1,024 PartitionKeys (decode, lookups, stamping, puts), the
// group commit kept outside the timer: what the apply path itself costs
// and allocates per entry.
func BenchmarkApplyEntry(b *testing.B) {
	s, r := openTestRange(b, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	benchApplyEntries(b, s, r, 0, "pk", 16)
}

// benchApplyEntries times f's apply of entries of perEntry inserts
// (benchInserts) to span, one entry per batch, committing the store every
// 32 entries outside the timer.
func benchApplyEntries(b *testing.B, s *Store, f interface {
	ApplyBatch([]*raft.Log) []interface{}
}, span uint64, prefix string, perEntry int) {
	ent := benchEntity(b)
	var idx, n uint64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		writes := benchInserts(&n, span, prefix, ent, perEntry)
		data, _ := EncodeWriteBatch(writes)
		idx++
		logs := []*raft.Log{{Index: idx, Type: raft.LogCommand, Data: data}}
		if idx%32 == 0 {
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if res := f.ApplyBatch(logs)[0].(*Result); res.Err != nil || res.Batch[perEntry-1].Err != nil {
			b.Fatal(res.Err, res.Batch[perEntry-1].Err)
		}
	}
}

// BenchmarkPruneRequests is one prune of a range whose table holds 200,000
// (or 1,000,000) live request records (over 1,024 PartitionKeys, ids as
// the front-end makes them, time first, or random ones) and 1,000 expired
// ones (12,500: ~2.5 s of writes at 5,000/s, a prune's share at that rate)
// proposed in the second before the horizon, committed before the prune
// as they are in a server:
// the full scan of the table the prune did before the time index (that
// code, records only), and the index from the table's oldest record (a
// cold cursor) or from the previous prune's horizon (warm), alone or
// beside a lagging neighbour range with 20,000 expired records of its own
// (which the range's prune must leave). Only the prune is timed; its
// transaction is committed outside the timer.
func BenchmarkPruneRequests(b *testing.B) {
	const (
		theirs  = 20_000
		horizon = int64(1_700_000_000_000_000_000)
	)
	for _, bc := range []struct {
		name      string
		live      int
		expired   int
		randomIDs bool
		scan      bool
		neighbour bool
		warm      bool
	}{
		{name: "live=200k/by=scan", live: 200_000, scan: true},
		{name: "live=200k/by=index/cursor=cold", live: 200_000},
		{name: "live=200k/by=scan/neighbour", live: 200_000, scan: true, neighbour: true},
		{name: "live=200k/by=index/neighbour/cursor=cold", live: 200_000, neighbour: true},
		{name: "live=200k/by=index/neighbour/cursor=warm", live: 200_000, neighbour: true, warm: true},
		{name: "live=200k/ids=random/by=scan", live: 200_000, randomIDs: true, scan: true},
		{name: "live=200k/ids=random/by=index/cursor=cold", live: 200_000, randomIDs: true},
		{name: "live=1M/by=scan", live: 1_000_000, scan: true},
		{name: "live=1M/by=index/cursor=cold", live: 1_000_000},
		{name: "live=1M/expired=12.5k/by=scan", live: 1_000_000, expired: 12_500, scan: true},
		{name: "live=1M/expired=12.5k/by=index/cursor=cold", live: 1_000_000, expired: 12_500},
	} {
		expired := cmp.Or(bc.expired, 1_000)
		live := bc.live
		b.Run(bc.name, func(b *testing.B) {
			d := &pb.RangeDescriptor{RangeId: 1, TableId: 7, End: "pk1000", Generation: 1}
			s, _ := openTestRange(b, d)
			s.db.NoSync = true
			rng := rand.New(rand.NewPCG(1, 2))
			record := func(tx *bolt.Tx, proposed int64, pk string) error {
				// The front-end's ids: 8 bytes of time (about the
				// proposal's), 8 random; or random throughout.
				id := make([]byte, 16)
				binary.BigEndian.PutUint64(id, uint64(proposed-rng.Int64N(int64(time.Millisecond))))
				if bc.randomIDs {
					binary.BigEndian.PutUint64(id, rng.Uint64())
				}
				binary.BigEndian.PutUint64(id[8:], rng.Uint64())
				k, v := requestKey(7, id), appendRequestRecord(nil, proposed, proposed, pk)
				if bc.scan {
					return tx.Bucket(bucketRequests).Put(k, v) // no index before it
				}
				return storeRequest(tx, k, v)
			}
			// Puts in chunks: bbolt splits nodes only at the commit.
			puts := func(n int, rec func(tx *bolt.Tx, i int) error) {
				for i := 0; i < n; {
					err := s.db.Update(func(tx *bolt.Tx) error {
						for end := min(n, i+2000); i < end; i++ {
							if err := rec(tx, i); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			puts(live, func(tx *bolt.Tx, i int) error {
				return record(tx, horizon+rng.Int64N(int64(requestTTL)), fmt.Sprintf("pk%04d", i%1024))
			})
			if bc.neighbour {
				// The neighbour [pk1000, ..) lags: its records are
				// expired by this range's clock, not by its own yet.
				puts(theirs, func(tx *bolt.Tx, i int) error {
					return record(tx, horizon-2*int64(time.Second)-rng.Int64N(int64(time.Minute)), fmt.Sprintf("pk1%03d", i%24))
				})
			}
			st := &pb.RangeState{Range: d, LastTimestampUnixNano: horizon + int64(requestTTL)}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				puts(expired, func(tx *bolt.Tx, i int) error {
					return record(tx, horizon-1-rng.Int64N(int64(time.Second)), fmt.Sprintf("pk%04d", i%1000))
				})
				cur := pruneCursor{}
				if bc.warm {
					cur = pruneCursor{ok: true, epoch: s.prunes[7].epoch, below: horizon - int64(time.Second) - 1}
				}
				tx, err := s.db.Begin(true)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if bc.scan {
					err = pruneBeforeIndex(tx, st)
				} else {
					s.wmu.Lock()
					var pruned int
					pruned, _, err = pruneRequests(tx, st, s.tablePrune(7), &cur)
					s.wmu.Unlock()
					if pruned != expired {
						b.Fatalf("pruned %d, want %d", pruned, expired)
					}
				}
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// pruneBeforeIndex is the prune as it was before the time index (commit
// 4171142, deleteRequests over forEachRequest): every record of the table
// read, the range's expired ones deleted.
func pruneBeforeIndex(tx *bolt.Tx, st *pb.RangeState) error {
	horizon := st.GetLastTimestampUnixNano() - int64(requestTTL)
	var ks [][]byte
	err := forEachRequest(tx, st.GetRange(), func(k, v []byte) error {
		if int64(binary.BigEndian.Uint64(v[8:16])) < horizon {
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

// timeCPUPerWrite times loop (the benchmark's b.N operations of
// writesPerOp writes each) and reports the process's CPU per write,
// fsyncs and their waits for writeback included.
func timeCPUPerWrite(b *testing.B, writesPerOp int, loop func()) {
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	loop()
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
	b.ReportMetric(float64(cpu)/1e3/float64(b.N*writesPerOp), "cpu-us/write")
}

// BenchmarkCommitPattern is a replica's CPU and state-file pages per write
// (apply and group commit every 320 writes, fsyncs included) for the
// key patterns into a table of 50,000 entities: single inserts spread over
// 1,024 PartitionKeys, single inserts on one PartitionKey (32 writers, each
// ascending, as the bench writes them; one writer ascending, a log; random
// RowKeys), and entity group transactions of 100 inserts (a writer's
// RowKeys ascending within a PartitionKey, as the bench's batch scenario
// writes them). It is what the split threshold of the entity buckets'
// pages (fillPercentFor) is chosen by.
func BenchmarkCommitPattern(b *testing.B) {
	type pattern struct {
		name string
		// writes is how many an entry holds.
		writes int
		// entry returns the commands of one log entry.
		entry func(rng *rand.Rand, n *uint64) []*pb.WriteCommand
	}
	single := func(pk, rk string, n *uint64, rng *rand.Rand, ent []byte) *pb.WriteCommand {
		*n++
		id := make([]byte, 16)
		binary.BigEndian.PutUint64(id, *n)
		binary.BigEndian.PutUint64(id[8:], rng.Uint64())
		return &pb.WriteCommand{ProposedUnixNano: int64(*n) * 1000, RequestId: id,
			Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: pk, RowKey: rk, Entity: ent}}}
	}
	ent := benchEntity(b)
	seq := make([]int, 32)
	patterns := []pattern{
		{"spread", 16, func(rng *rand.Rand, n *uint64) []*pb.WriteCommand {
			w := make([]*pb.WriteCommand, 16)
			for i := range w {
				w[i] = single(fmt.Sprintf("pk%04d", rng.IntN(1024)), fmt.Sprintf("%016x", rng.Uint64()), n, rng, ent)
			}
			return w
		}},
		{"one-pk", 16, func(rng *rand.Rand, n *uint64) []*pb.WriteCommand {
			w := make([]*pb.WriteCommand, 16)
			for i := range w {
				k := rng.IntN(len(seq))
				seq[k]++
				w[i] = single("hot", fmt.Sprintf("w%02d-%09d", k, seq[k]), n, rng, ent)
			}
			return w
		}},
		{"one-pk-log", 16, func(rng *rand.Rand, n *uint64) []*pb.WriteCommand {
			w := make([]*pb.WriteCommand, 16)
			for i := range w {
				seq[0]++
				w[i] = single("log", fmt.Sprintf("%012d", seq[0]), n, rng, ent)
			}
			return w
		}},
		{"one-pk-random", 16, func(rng *rand.Rand, n *uint64) []*pb.WriteCommand {
			w := make([]*pb.WriteCommand, 16)
			for i := range w {
				w[i] = single("hot", fmt.Sprintf("%016x", rng.Uint64()), n, rng, ent)
			}
			return w
		}},
		{"batch", 100, func(rng *rand.Rand, n *uint64) []*pb.WriteCommand {
			k := rng.IntN(len(seq))
			seq[k]++
			pk := fmt.Sprintf("b%04d", (k*7919+seq[k])%1024)
			cmd := single(pk, "", n, rng, ent)
			cmd.Ops = make([]*pb.EntityOp, 100)
			for j := range cmd.Ops {
				cmd.Ops[j] = &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: pk,
					RowKey: fmt.Sprintf("w%02d-%09d-%03d", k, seq[k], j), Entity: ent}
			}
			return []*pb.WriteCommand{cmd}
		}},
	}
	for _, p := range patterns {
		b.Run(p.name, func(b *testing.B) {
			clear(seq)
			s, r := openTestRange(b, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
			rng := rand.New(rand.NewPCG(3, 4))
			var idx, n uint64
			writes := 0
			entry := func(gen func(*rand.Rand, *uint64) []*pb.WriteCommand) int {
				cmds := gen(rng, &n)
				data, _ := EncodeWriteBatch(cmds)
				idx++
				for _, res := range r.ApplyBatch([]*raft.Log{{Index: idx, Type: raft.LogCommand, Data: data}}) {
					if rr := res.(*Result); rr.Err != nil || (len(rr.Batch) > 0 && rr.Batch[0].Err != nil) {
						b.Fatal(rr.Err, rr.Batch)
					}
				}
				c := 0
				for _, cmd := range cmds {
					c += len(cmd.Ops)
				}
				return c
			}
			// 50,000 entities first, spread (the table the bench's
			// scenarios write into is a shared one), committed.
			for i := 0; i < 50_000/16; i++ {
				entry(patterns[0].entry)
				if i%20 == 0 {
					s.Flush()
				}
			}
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
			pages := func() int64 { st := s.db.Stats(); return st.TxStats.GetPageCount() }
			before := pages()
			perOp := p.writes
			timeCPUPerWrite(b, perOp, func() {
				for range b.N {
					writes += entry(p.entry)
					if writes >= 320 {
						writes = 0
						if err := s.Flush(); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
			b.ReportMetric(float64(pages()-before)/float64(b.N*perOp), "pages/write")
		})
	}
}

// BenchmarkGroupEntrySpans is an entry of 16 inserts (BenchmarkApplyEntry's)
// or of one insert (what a table sharing its group with many others writes
// when each is written now and then) in a group of 1, 8 or 64 spans of one
// table, every write to the first span: what the spans a batch does not
// write cost it, which decides how many spans a group may hold
// (docs/range-groups.md, stage 7's plan, step 1: a batch writes only the
// spans it changed and the one carrying the group's applied index).
func BenchmarkGroupEntrySpans(b *testing.B) {
	for _, c := range []struct{ spans, writes int }{{1, 16}, {8, 16}, {64, 16}, {1, 1}, {8, 1}, {64, 1}, {256, 1}, {1024, 1}} {
		n := c.spans
		b.Run(fmt.Sprintf("writes=%d/spans=%d", c.writes, n), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "state.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for k := range n {
				d := &pb.RangeDescriptor{RangeId: uint64(100 + k), GroupId: 100, TableId: 7, Generation: 1,
					Start: fmt.Sprintf("s%04d", k), End: fmt.Sprintf("s%04d", k+1)}
				if k == 0 {
					d.Start = ""
				}
				if k == n-1 {
					d.End = ""
				}
				if err := s.CreateRange(d, true); err != nil {
					b.Fatal(err)
				}
			}
			g, err := s.OpenGroup(100, logging.Discard())
			if err != nil {
				b.Fatal(err)
			}
			benchApplyEntries(b, s, g, 100, "a", c.writes)
		})
	}
}

// benchInserts is an entry's count inserts of ent, each with its own request
// id, at PartitionKeys prefix0000 - prefix1023, addressed to span (0: the
// group's namesake); *seq counts the writes made so far.
func benchInserts(seq *uint64, span uint64, prefix string, ent []byte, count int) []*pb.WriteCommand {
	writes := make([]*pb.WriteCommand, count)
	for i := range writes {
		*seq++
		n := *seq
		id := make([]byte, 16)
		binary.BigEndian.PutUint64(id, n)
		writes[i] = &pb.WriteCommand{RangeId: span, ProposedUnixNano: int64(n) * 1000, RequestId: id,
			Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: fmt.Sprintf("%s%04d", prefix, n*7919%1024),
				RowKey: fmt.Sprintf("%016x", n), Entity: ent}}}
	}
	return writes
}
