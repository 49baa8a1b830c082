package fsm

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"

	"tablestore/internal/edm"
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
			var before, after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.ResetTimer()
			for range b.N {
				entry()
				if err := s.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
			b.ReportMetric(float64(cpu)/1e3/float64(b.N*16), "cpu-us/write")
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
			var before, after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.ResetTimer()
			for i := range b.N {
				entry()
				if (i+1)*16%every == 0 {
					if err := s.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
			b.ReportMetric(float64(cpu)/1e3/float64(b.N*16), "cpu-us/write")
		})
	}
}

// BenchmarkApplyEntry is every replica's apply of one entry of 16 coalesced
// inserts over 1,024 PartitionKeys (decode, lookups, stamping, puts), the
// group commit kept outside the timer: what the apply path itself costs
// and allocates per entry.
func BenchmarkApplyEntry(b *testing.B) {
	s, r := openTestRange(b, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
	ent := benchEntity(b)
	var idx, n uint64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		writes := make([]*pb.WriteCommand, 16)
		for i := range writes {
			n++
			id := make([]byte, 16)
			binary.BigEndian.PutUint64(id, n)
			writes[i] = &pb.WriteCommand{ProposedUnixNano: int64(n) * 1000, RequestId: id,
				Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: fmt.Sprintf("pk%04d", n*7919%1024),
					RowKey: fmt.Sprintf("%016x", n), Entity: ent}}}
		}
		data, _ := EncodeWriteBatch(writes)
		idx++
		logs := []*raft.Log{{Index: idx, Type: raft.LogCommand, Data: data}}
		if idx%32 == 0 {
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if res := r.ApplyBatch(logs)[0].(*Result); res.Err != nil || res.Batch[15].Err != nil {
			b.Fatal(res.Err)
		}
	}
}
