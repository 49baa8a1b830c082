package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

func TestCommandEnvelope(t *testing.T) {
	w := &pb.WriteCommand{ProposedUnixNano: 7, RequestId: []byte("id"),
		Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: "r", Entity: []byte{1, 2, 3}}}}
	payload, _ := proto.Marshal(w)
	generated, _ := proto.Marshal(&pb.Command{Kind: pb.CommandKind_COMMAND_KIND_WRITE, Payload: payload})
	mine, err := EncodeWrite(w)
	if err != nil || !bytes.Equal(mine, generated) {
		t.Fatalf("EncodeWrite = %x, %v; generated code gives %x", mine, err, generated)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"ours", mine},
		{"reversed fields, unknown field", append(append(append([]byte{0x12, byte(len(payload))}, payload...), 0x20, 0x05), 0x08, 0x01)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, got, err := decodeCommand(tc.data)
			if err != nil || kind != pb.CommandKind_COMMAND_KIND_WRITE || !bytes.Equal(got, payload) {
				t.Fatalf("decodeCommand = %v, %x, %v", kind, got, err)
			}
		})
	}
	if _, _, err := decodeCommand([]byte{0x12, 0x40, 1}); err == nil {
		t.Fatal("truncated payload accepted")
	}
	// A command addressed to one span of a group: the generated code's
	// bytes, and the span decoded.
	spanned, err := EncodeFor(9, pb.CommandKind_COMMAND_KIND_WRITE, w)
	generated, _ = proto.Marshal(&pb.Command{Kind: pb.CommandKind_COMMAND_KIND_WRITE, Payload: payload, RangeId: 9})
	if err != nil || !bytes.Equal(spanned, generated) {
		t.Fatalf("EncodeFor = %x, %v; generated code gives %x", spanned, err, generated)
	}
	if e, err := decodeEnvelope(spanned); err != nil || e.rangeID != 9 || e.kind != pb.CommandKind_COMMAND_KIND_WRITE || !bytes.Equal(e.payload, payload) {
		t.Fatalf("decodeEnvelope = %+v, %v", e, err)
	}
}

// FuzzDecodeCommand: the hand-written envelope decoder agrees with the
// generated one and never panics.
func FuzzDecodeCommand(f *testing.F) {
	data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: 1, Ops: []*pb.EntityOp{{PartitionKey: "p"}}})
	f.Add(data)
	f.Add([]byte{0x08, 0x06})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEnvelope(b)
		var c pb.Command
		gerr := proto.Unmarshal(b, &c)
		if (err == nil) != (gerr == nil) {
			t.Fatalf("decodeEnvelope err %v, generated err %v", err, gerr)
		}
		if err == nil && (e.kind != c.GetKind() || !bytes.Equal(e.payload, c.GetPayload()) || e.rangeID != c.GetRangeId()) {
			t.Fatalf("decodeEnvelope = %+v, generated %v", e, &c)
		}
	})
}

// sameWrites reports whether two decodings of writes are equal, treating
// nil and empty byte slices alike (proto3 bytes have no presence).
func sameWrites(a, b []*pb.WriteCommand) bool {
	return proto.Equal(&pb.WriteBatchCommand{Writes: a}, &pb.WriteBatchCommand{Writes: b})
}

// checkBatchDecoders: the hand decoder of a WriteBatchCommand payload (and
// of a WriteCommand one) accepts exactly what the generated one accepts and
// gives the same writes: replicas running either must apply an entry alike.
func checkBatchDecoders(t *testing.T, b []byte) {
	t.Helper()
	got, err := unmarshalWriteBatch(b)
	var want pb.WriteBatchCommand
	werr := proto.Unmarshal(b, &want)
	if (err == nil) != (werr == nil) {
		t.Fatalf("batch %x: hand decoder err %v, generated err %v", b, err, werr)
	}
	if err == nil && !sameWrites(got, want.GetWrites()) {
		t.Fatalf("batch %x: hand decoder %v, generated %v", b, got, want.GetWrites())
	}
	w, err := unmarshalWrite(b)
	var ww pb.WriteCommand
	werr = proto.Unmarshal(b, &ww)
	if (err == nil) != (werr == nil) {
		t.Fatalf("write %x: hand decoder err %v, generated err %v", b, err, werr)
	}
	if err == nil && !proto.Equal(w, &ww) {
		t.Fatalf("write %x: hand decoder %v, generated %v", b, w, &ww)
	}
}

func TestWriteDecoderMatchesGenerated(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	randOp := func() *pb.EntityOp {
		return &pb.EntityOp{Kind: pb.OpKind(rng.IntN(8) - 1), PartitionKey: fmt.Sprintf("pk%d", rng.IntN(100)),
			RowKey: strings.Repeat("r", rng.IntN(4)), Entity: randBytes(rng.IntN(40)),
			IfMatchAny: rng.IntN(2) == 0, IfMatchUnixNano: rng.Int64() - rng.Int64()}
	}
	for i := range 2000 {
		var writes []*pb.WriteCommand
		for range rng.IntN(4) {
			w := &pb.WriteCommand{ProposedUnixNano: rng.Int64() - rng.Int64(), RequestId: randBytes(rng.IntN(20)),
				RangeId: uint64(rng.IntN(3)) * rng.Uint64()}
			for range rng.IntN(3) {
				w.Ops = append(w.Ops, randOp())
			}
			writes = append(writes, w)
		}
		b, err := proto.Marshal(&pb.WriteBatchCommand{Writes: writes})
		if err != nil {
			t.Fatal(err)
		}
		checkBatchDecoders(t, b)
		if len(writes) > 0 {
			one, _ := proto.Marshal(writes[0])
			checkBatchDecoders(t, one)
		}
		// Damaged: a byte changed, cut short, an unknown field, invalid
		// UTF-8 in a key.
		if len(b) > 0 {
			d := bytes.Clone(b)
			d[rng.IntN(len(d))] = byte(rng.IntN(256))
			checkBatchDecoders(t, d)
			checkBatchDecoders(t, b[:rng.IntN(len(b))])
		}
		checkBatchDecoders(t, append(bytes.Clone(b), 0x38, byte(i%128)))
	}
	// A write naming its span stays on the hand decoder's path.
	spanned, _ := proto.Marshal(&pb.WriteCommand{RangeId: 7, RequestId: []byte("id")})
	if w, ok := decodeWriteCommand(spanned); !ok || w.GetRangeId() != 7 {
		t.Fatalf("range_id not decoded by hand: %v %v", w, ok)
	}
	bad, _ := proto.Marshal(&pb.WriteBatchCommand{Writes: []*pb.WriteCommand{{Ops: []*pb.EntityOp{{PartitionKey: "p\xff"}}}}})
	if _, err := unmarshalWriteBatch(bad); err == nil {
		t.Fatal("invalid UTF-8 in a PartitionKey accepted")
	}
	checkBatchDecoders(t, bad)
}

// TestWriteDecoderAliasesEntities: the entities and request ids of a
// decoded batch are the entry's bytes, not copies.
func TestWriteDecoderAliasesEntities(t *testing.T) {
	b, _ := proto.Marshal(&pb.WriteBatchCommand{Writes: []*pb.WriteCommand{{RequestId: []byte("id"),
		Ops: []*pb.EntityOp{{PartitionKey: "p", Entity: []byte("entity")}}}}})
	ws, err := unmarshalWriteBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	ent := ws[0].GetOps()[0].GetEntity()
	if i := bytes.Index(b, []byte("entity")); i < 0 || &b[i] != &ent[0] {
		t.Fatal("entity copied")
	}
}

// FuzzWriteDecoder: the hand decoders agree with the generated ones and
// never panic.
func FuzzWriteDecoder(f *testing.F) {
	b, _ := proto.Marshal(&pb.WriteBatchCommand{Writes: []*pb.WriteCommand{{ProposedUnixNano: -5, RequestId: []byte("id"),
		Ops: []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_MERGE, PartitionKey: "p", RowKey: "r", Entity: []byte{1}, IfMatchAny: true, IfMatchUnixNano: 9}}}}})
	f.Add(b)
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) { checkBatchDecoders(t, b) })
}
