package fsm

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// A log entry is a pb.Command{kind, payload} whose payload is the encoded
// command message. Encoding and decoding the envelope by hand keeps the
// payload, which holds the entities, from being copied: the generated
// code would marshal the message into one buffer and copy it into the
// envelope's, and on apply copy it out again.

// Encode returns the log entry of a command, built in one buffer.
func Encode(kind pb.CommandKind, m proto.Message) ([]byte, error) {
	size := proto.Size(m)
	buf := make([]byte, 0, 2+protowire.SizeVarint(uint64(kind))+protowire.SizeBytes(size))
	buf = protowire.AppendTag(buf, 1, protowire.VarintType)
	buf = protowire.AppendVarint(buf, uint64(kind))
	buf = protowire.AppendTag(buf, 2, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(size))
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf, m)
}

// EncodeWrite returns the log entry for a write command.
func EncodeWrite(w *pb.WriteCommand) ([]byte, error) {
	return Encode(pb.CommandKind_COMMAND_KIND_WRITE, w)
}

// EncodeWriteBatch returns the log entry of writes coalesced into one
// entry (see pb.WriteBatchCommand).
func EncodeWriteBatch(writes []*pb.WriteCommand) ([]byte, error) {
	return Encode(pb.CommandKind_COMMAND_KIND_WRITE_BATCH, &pb.WriteBatchCommand{Writes: writes})
}

// decodeCommand splits a log entry into its kind and payload; the payload
// aliases data. It accepts what proto.Marshal of a pb.Command produces,
// fields in any order, unknown fields skipped.
func decodeCommand(data []byte) (pb.CommandKind, []byte, error) {
	var kind pb.CommandKind
	var payload []byte
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0, nil, fmt.Errorf("%w: %v", ErrBadCommand, protowire.ParseError(n))
		}
		if !num.IsValid() {
			return 0, nil, fmt.Errorf("%w: field number %d", ErrBadCommand, num)
		}
		data = data[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return 0, nil, fmt.Errorf("%w: %v", ErrBadCommand, protowire.ParseError(n))
			}
			kind, data = pb.CommandKind(v), data[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return 0, nil, fmt.Errorf("%w: %v", ErrBadCommand, protowire.ParseError(n))
			}
			payload, data = v, data[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return 0, nil, fmt.Errorf("%w: %v", ErrBadCommand, protowire.ParseError(n))
			}
			data = data[n:]
		}
	}
	return kind, payload, nil
}
