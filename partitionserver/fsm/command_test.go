package fsm

import (
	"bytes"
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
		{"reversed fields, unknown field", append(append(append([]byte{0x12, byte(len(payload))}, payload...), 0x18, 0x05), 0x08, 0x01)},
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
}

// FuzzDecodeCommand: the hand-written envelope decoder agrees with the
// generated one and never panics.
func FuzzDecodeCommand(f *testing.F) {
	data, _ := EncodeWrite(&pb.WriteCommand{ProposedUnixNano: 1, Ops: []*pb.EntityOp{{PartitionKey: "p"}}})
	f.Add(data)
	f.Add([]byte{0x08, 0x06})
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, payload, err := decodeCommand(b)
		var c pb.Command
		gerr := proto.Unmarshal(b, &c)
		if (err == nil) != (gerr == nil) {
			t.Fatalf("decodeCommand err %v, generated err %v", err, gerr)
		}
		if err == nil && (kind != c.GetKind() || !bytes.Equal(payload, c.GetPayload())) {
			t.Fatalf("decodeCommand = %v %x, generated %v %x", kind, payload, c.GetKind(), c.GetPayload())
		}
	})
}
