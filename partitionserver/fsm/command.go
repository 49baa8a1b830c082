package fsm

import (
	"fmt"
	"unicode/utf8"

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

// envelope is a decoded log entry: its kind, its payload (aliasing the
// entry) and the span it addresses (0: the group's only span).
type envelope struct {
	kind    pb.CommandKind
	payload []byte
	rangeID uint64
}

// decodeCommand splits a log entry into its kind and payload; the payload
// aliases data. It accepts what proto.Marshal of a pb.Command produces,
// fields in any order, unknown fields skipped.
func decodeCommand(data []byte) (pb.CommandKind, []byte, error) {
	e, err := decodeEnvelope(data)
	return e.kind, e.payload, err
}

// decodeEnvelope decodes a log entry's envelope, the span it names
// included.
func decodeEnvelope(data []byte) (envelope, error) {
	var e envelope
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return envelope{}, fmt.Errorf("%w: %v", ErrBadCommand, protowire.ParseError(n))
		}
		if !num.IsValid() {
			return envelope{}, fmt.Errorf("%w: field number %d", ErrBadCommand, num)
		}
		data = data[n:]
		switch {
		case (num == 1 || num == 3) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return envelope{}, fmt.Errorf("%w: %v", ErrBadCommand, protowire.ParseError(n))
			}
			if num == 1 {
				e.kind = pb.CommandKind(v)
			} else {
				e.rangeID = v
			}
			data = data[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return envelope{}, fmt.Errorf("%w: %v", ErrBadCommand, protowire.ParseError(n))
			}
			e.payload, data = v, data[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return envelope{}, fmt.Errorf("%w: %v", ErrBadCommand, protowire.ParseError(n))
			}
			data = data[n:]
		}
	}
	return e, nil
}

// EncodeFor returns the log entry of a command addressed to one span of a
// group (Encode addresses the group's only span).
func EncodeFor(rangeID uint64, kind pb.CommandKind, m proto.Message) ([]byte, error) {
	b, err := Encode(kind, m)
	if err != nil || rangeID == 0 {
		return b, err
	}
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	return protowire.AppendVarint(b, rangeID), nil
}

// Client writes are decoded by hand as well: the generated unmarshaller
// copies every entity and request id out of the entry and allocates each
// message through reflection, on every replica for every write. The hand
// decoder lets the entities and request ids alias the entry (apply only
// reads them: the stored value is a fresh Restamp and the request record a
// fresh key) and accepts only what it decodes exactly as the generated code
// would; anything else (an unknown field, another wire type, invalid UTF-8,
// a malformed varint) goes to proto.Unmarshal, so every replica reaches the
// same result, errors included, whichever decoder it runs.

// unmarshalWriteBatch decodes a WriteBatchCommand payload.
func unmarshalWriteBatch(b []byte) ([]*pb.WriteCommand, error) {
	if ws, ok := decodeWriteBatch(b); ok {
		return ws, nil
	}
	var batch pb.WriteBatchCommand
	if err := proto.Unmarshal(b, &batch); err != nil {
		return nil, err
	}
	return batch.GetWrites(), nil
}

// unmarshalWrite decodes a WriteCommand payload.
func unmarshalWrite(b []byte) (*pb.WriteCommand, error) {
	if w, ok := decodeWriteCommand(b); ok {
		return w, nil
	}
	var w pb.WriteCommand
	if err := proto.Unmarshal(b, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// fastField consumes the tag and value of one field of wire type varint or
// bytes: ok false on anything else or a malformed field.
func fastField(b []byte) (num protowire.Number, typ protowire.Type, v uint64, val []byte, n int, ok bool) {
	num, typ, n = protowire.ConsumeTag(b)
	if n < 0 || !num.IsValid() {
		return 0, 0, 0, nil, 0, false
	}
	switch typ {
	case protowire.VarintType:
		x, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return 0, 0, 0, nil, 0, false
		}
		return num, typ, x, nil, n + m, true
	case protowire.BytesType:
		x, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return 0, 0, 0, nil, 0, false
		}
		return num, typ, 0, x, n + m, true
	}
	return 0, 0, 0, nil, 0, false
}

func decodeWriteBatch(b []byte) ([]*pb.WriteCommand, bool) {
	// Count the writes first: one slice, no growth.
	count := 0
	for rest := b; len(rest) > 0; {
		num, typ, _, _, n, ok := fastField(rest)
		if !ok || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		count++
		rest = rest[n:]
	}
	ws := make([]*pb.WriteCommand, 0, count)
	for len(b) > 0 {
		_, _, _, val, n, _ := fastField(b)
		w, ok := decodeWriteCommand(val)
		if !ok {
			return nil, false
		}
		ws = append(ws, w)
		b = b[n:]
	}
	return ws, true
}

func decodeWriteCommand(b []byte) (*pb.WriteCommand, bool) {
	w := &pb.WriteCommand{}
	for len(b) > 0 {
		num, typ, v, val, n, ok := fastField(b)
		if !ok {
			return nil, false
		}
		switch {
		case num == 1 && typ == protowire.VarintType:
			w.ProposedUnixNano = int64(v)
		case num == 2 && typ == protowire.BytesType:
			op, ok := decodeEntityOp(val)
			if !ok {
				return nil, false
			}
			w.Ops = append(w.Ops, op)
		case num == 3 && typ == protowire.BytesType:
			w.RequestId = val
		case num == 4 && typ == protowire.VarintType:
			w.RangeId = v
		default:
			return nil, false
		}
		b = b[n:]
	}
	return w, true
}

func decodeEntityOp(b []byte) (*pb.EntityOp, bool) {
	op := &pb.EntityOp{}
	for len(b) > 0 {
		num, typ, v, val, n, ok := fastField(b)
		if !ok {
			return nil, false
		}
		switch {
		case num == 1 && typ == protowire.VarintType:
			op.Kind = pb.OpKind(int32(v))
		case (num == 2 || num == 3) && typ == protowire.BytesType:
			if !utf8.Valid(val) {
				return nil, false
			}
			if num == 2 {
				op.PartitionKey = string(val)
			} else {
				op.RowKey = string(val)
			}
		case num == 4 && typ == protowire.BytesType:
			op.Entity = val
		case num == 5 && typ == protowire.VarintType:
			op.IfMatchAny = protowire.DecodeBool(v)
		case num == 6 && typ == protowire.VarintType:
			op.IfMatchUnixNano = int64(v)
		default:
			return nil, false
		}
		b = b[n:]
	}
	return op, true
}
