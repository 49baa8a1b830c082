package fsm

import (
	"fmt"
	"strings"
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
