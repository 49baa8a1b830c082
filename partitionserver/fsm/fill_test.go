package fsm

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"tablestore/internal/edm"
	pb "tablestore/proto/tablestorepb"
)

func TestFillPercentFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string // "pk/rk"
		want float64
	}{
		{"nothing written", nil, bolt.DefaultFillPercent},
		{"one write", []string{"a/1"}, bolt.DefaultFillPercent},
		{"a group transaction", []string{"a/1", "a/2", "a/3", "a/4"}, runFillPercent},
		{"a log-like PartitionKey", []string{"h/01", "h/02", "h/03", "h/04", "h/05", "h/06"}, runFillPercent},
		{"a hot PartitionKey, random RowKeys", []string{"h/5", "h/2", "h/9", "h/1", "h/7", "h/3", "h/8", "h/4"}, bolt.DefaultFillPercent},
		{"descending RowKeys", []string{"a/4", "a/3", "a/2", "a/1"}, bolt.DefaultFillPercent},
		{"spread", []string{"a/1", "b/1", "c/1", "d/1", "e/1", "f/1"}, bolt.DefaultFillPercent},
		{"three in four in order", []string{"a/1", "a/2", "a/3", "a/4", "a/5", "a/6", "a/7", "b/1"}, runFillPercent},
		{"fewer than three in four", []string{"a/1", "a/2", "a/3", "a/4", "a/5", "a/6", "b/1", "c/1"}, bolt.DefaultFillPercent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f tableFill
			for _, k := range tc.keys {
				pk, rk, _ := strings.Cut(k, "/")
				f.note(pk, rk)
			}
			if got := fillPercentFor(f.run, f.writes); got != tc.want {
				t.Fatalf("fillPercentFor(%d, %d) = %v, want %v", f.run, f.writes, got, tc.want)
			}
		})
	}
}

// TestRunsFillPages writes the same entities as group transactions and as
// scattered single inserts, and checks how full the table's leaf pages
// end: the runs' pages near runFillPercent, the scattered ones at bbolt's
// default split.
func TestRunsFillPages(t *testing.T) {
	ent := edm.MarshalBinary(&edm.Entity{Properties: []edm.Property{
		{Name: "Pad", Value: edm.Value{Type: edm.TypeString, Str: strings.Repeat("x", 200)}},
	}})
	for _, tc := range []struct {
		name     string
		pattern  string
		min, max float64
	}{
		{"group transactions", "batch", 0.8, 1},
		{"scattered inserts", "spread", 0, 0.8},
		{"one PartitionKey, random RowKeys", "random", 0.55, 0.8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Generation: 1})
			rng := rand.New(rand.NewPCG(5, 6))
			var idx, n uint64
			apply := func(cmds []*pb.WriteCommand) {
				data, err := EncodeWriteBatch(cmds)
				if err != nil {
					t.Fatal(err)
				}
				idx++
				for _, res := range r.ApplyBatch([]*raft.Log{{Index: idx, Type: raft.LogCommand, Data: data}}) {
					if rr := res.(*Result); rr.Err != nil || rr.Batch[0].Err != nil {
						t.Fatal(rr.Err, rr.Batch[0].Err)
					}
				}
			}
			cmd := func(ops []*pb.EntityOp) *pb.WriteCommand {
				n++
				id := binary.BigEndian.AppendUint64(nil, n)
				return &pb.WriteCommand{ProposedUnixNano: int64(n) * 1000, RequestId: id, Ops: ops}
			}
			op := func(pk, rk string) *pb.EntityOp {
				return &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: pk, RowKey: rk, Entity: ent}
			}
			for round := range 20 {
				var cmds []*pb.WriteCommand
				for p := range 16 {
					pk := fmt.Sprintf("pk%02d", p)
					switch tc.pattern {
					case "random":
						for range 100 {
							cmds = append(cmds, cmd([]*pb.EntityOp{op("hot", fmt.Sprintf("%016x", rng.Uint64()))}))
						}
						continue
					case "batch":
						ops := make([]*pb.EntityOp, 100)
						for j := range ops {
							ops[j] = op(pk, fmt.Sprintf("r%03d-%03d", round, j))
						}
						cmds = append(cmds, cmd(ops))
						continue
					}
					for j := range 100 {
						// Every write on another PartitionKey than the one before.
						cmds = append(cmds, cmd([]*pb.EntityOp{op(fmt.Sprintf("pk%02d", (p+j)%16), fmt.Sprintf("r%03d-%02d-%03d", round, p, j))}))
					}
				}
				apply(cmds)
				if err := s.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			var st bolt.BucketStats
			if err := s.db.View(func(tx *bolt.Tx) error {
				b, err := tableBucket(tx, 7, false)
				if err == nil {
					st = b.Stats()
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			fill := float64(st.LeafInuse) / float64(st.LeafAlloc)
			t.Logf("%d leaf pages, %.2f full", st.LeafPageN, fill)
			if fill < tc.min || fill > tc.max {
				t.Fatalf("leaf pages %.2f full, want %.2f – %.2f", fill, tc.min, tc.max)
			}
		})
	}
}
