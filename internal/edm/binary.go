package edm

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"
)

// binaryVersion is the first byte of every encoded entity. Entities live in
// Raft logs and on disk for as long as the cluster does, so a future layout
// must be able to tell old bytes from new ones.
const binaryVersion = 1

const flagTimestamp = 1 << 0

// Layout (version 1), all integers varints unless noted:
//
//	version byte | flags byte (bit 0: Timestamp present)
//	PartitionKey: len, bytes | RowKey: len, bytes
//	[Timestamp: zigzag Unix seconds, nanoseconds]
//	property count, then per property: name len, name bytes, type byte, payload
//
//	String, Guid, Binary: len, bytes     Int32, Int64: zigzag
//	Boolean: 1 byte (0 or 1)              Double: 8 bytes, little-endian IEEE 754
//	DateTime: zigzag Unix seconds, nanoseconds
//
// Times keep full nanoseconds so that any time.Time round-trips exactly;
// the 100 ns tick is enforced where times enter the system, not here.

// AppendBinary appends the compact binary form of e, used in Raft commands
// and as the stored value. It does not validate e.
func AppendBinary(dst []byte, e *Entity) []byte {
	var flags byte
	if !e.Timestamp.IsZero() {
		flags |= flagTimestamp
	}
	dst = append(dst, binaryVersion, flags)
	dst = appendBytes(dst, e.PartitionKey)
	dst = appendBytes(dst, e.RowKey)
	if flags&flagTimestamp != 0 {
		dst = appendTime(dst, e.Timestamp)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Properties)))
	for i := range e.Properties {
		p := &e.Properties[i]
		dst = appendBytes(dst, p.Name)
		dst = append(dst, byte(p.Value.Type))
		switch v := &p.Value; v.Type {
		case TypeString, TypeGuid:
			dst = appendBytes(dst, v.Str)
		case TypeBinary:
			dst = binary.AppendUvarint(dst, uint64(len(v.Bin)))
			dst = append(dst, v.Bin...)
		case TypeBoolean:
			if v.Bool {
				dst = append(dst, 1)
			} else {
				dst = append(dst, 0)
			}
		case TypeDateTime:
			dst = appendTime(dst, v.Time)
		case TypeDouble:
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.Float))
		case TypeInt32, TypeInt64:
			dst = binary.AppendVarint(dst, v.Int)
		}
	}
	return dst
}

// MarshalBinary returns the binary form of e in a buffer sized in advance,
// so encoding costs exactly one allocation.
func MarshalBinary(e *Entity) []byte {
	n := 2 + 2*binary.MaxVarintLen64 + len(e.PartitionKey) + len(e.RowKey) + 2*binary.MaxVarintLen64 + binary.MaxVarintLen64
	for i := range e.Properties {
		p := &e.Properties[i]
		n += binary.MaxVarintLen64 + len(p.Name) + 1 + 2*binary.MaxVarintLen64 + len(p.Value.Str) + len(p.Value.Bin)
	}
	return AppendBinary(make([]byte, 0, n), e)
}

func appendBytes(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendTime(dst []byte, t time.Time) []byte {
	dst = binary.AppendVarint(dst, t.Unix())
	return binary.AppendUvarint(dst, uint64(t.Nanosecond()))
}

// UnmarshalBinary decodes an entity written by AppendBinary. It runs for
// every entity a scan touches, so all strings of the entity share one
// allocation (a copy of b: the caller's buffer, e.g. a bbolt page, is not
// retained). Any malformed input, truncated or not, is ErrCorrupt; it
// never panics.
func UnmarshalBinary(b []byte) (*Entity, error) {
	return unmarshalBinary(b, string(b))
}

// UnmarshalBinaryOwned is UnmarshalBinary for a buffer the caller hands
// over: the entity's strings point into b instead of a copy of it, saving
// an allocation and a copy of the whole entity (a front-end's point read
// decodes every entity it answers). b must never change afterwards: pass
// only a buffer nothing else holds, such as a field of a freshly decoded
// protobuf message, never a bbolt page or a pooled buffer.
func UnmarshalBinaryOwned(b []byte) (*Entity, error) {
	return unmarshalBinary(b, unsafe.String(unsafe.SliceData(b), len(b)))
}

// pointInto points e's strings at their copies in b, which is
// AppendBinary's encoding of e: afterwards e holds nothing of the memory
// its strings were in before. b must never change.
func pointInto(e *Entity, b []byte) {
	r := binReader{b: b, s: unsafe.String(unsafe.SliceData(b), len(b)), pos: 2}
	e.PartitionKey, _ = r.str()
	e.RowKey, _ = r.str()
	if !e.Timestamp.IsZero() {
		r.time()
	}
	r.uvarint() // the property count
	for i := range e.Properties {
		p := &e.Properties[i]
		p.Name, _ = r.str()
		r.pos++ // the type byte
		switch p.Value.Type {
		case TypeString, TypeGuid:
			p.Value.Str, _ = r.str()
		case TypeBinary:
			if n, ok := r.uvarint(); ok {
				r.pos += int(n)
			}
		case TypeBoolean:
			r.pos++
		case TypeDateTime:
			r.time()
		case TypeDouble:
			r.pos += 8
		case TypeInt32, TypeInt64:
			r.varint()
		}
	}
}

// unmarshalBinary decodes b, slicing every string field of s, which holds
// the same bytes.
func unmarshalBinary(b []byte, s string) (*Entity, error) {
	if len(b) < 2 {
		return nil, corrupt("too short")
	}
	if b[0] != binaryVersion {
		return nil, corrupt("unknown format version %d", b[0])
	}
	flags := b[1]
	if flags&^flagTimestamp != 0 {
		return nil, corrupt("unknown flags %#x", flags)
	}
	r := binReader{b: b, s: s, pos: 2}
	e := &Entity{}
	var ok bool
	if e.PartitionKey, ok = r.str(); !ok {
		return nil, corrupt("bad PartitionKey")
	}
	if e.RowKey, ok = r.str(); !ok {
		return nil, corrupt("bad RowKey")
	}
	if flags&flagTimestamp != 0 {
		if e.Timestamp, ok = r.time(); !ok {
			return nil, corrupt("bad Timestamp")
		}
	}
	count, ok := r.uvarint()
	// every property takes at least 3 bytes, so a larger count is a lie
	// that must not turn into a huge allocation
	if !ok || count > uint64(len(b)-r.pos)/3 {
		return nil, corrupt("bad property count")
	}
	if count > 0 {
		e.Properties = make([]Property, count)
	}
	for i := range e.Properties {
		p := &e.Properties[i]
		if p.Name, ok = r.str(); !ok {
			return nil, corrupt("property %d: bad name", i)
		}
		if r.pos >= len(b) {
			return nil, corrupt("property %q: missing type", p.Name)
		}
		t := Type(b[r.pos])
		r.pos++
		v := &p.Value
		v.Type = t
		switch t {
		case TypeString, TypeGuid:
			v.Str, ok = r.str()
		case TypeBinary:
			var n uint64
			if n, ok = r.uvarint(); ok && n <= uint64(len(b)-r.pos) {
				v.Bin = make([]byte, n)
				copy(v.Bin, b[r.pos:])
				r.pos += int(n)
			} else {
				ok = false
			}
		case TypeBoolean:
			if ok = r.pos < len(b) && b[r.pos] <= 1; ok {
				v.Bool = b[r.pos] == 1
				r.pos++
			}
		case TypeDateTime:
			v.Time, ok = r.time()
		case TypeDouble:
			if ok = len(b)-r.pos >= 8; ok {
				v.Float = math.Float64frombits(binary.LittleEndian.Uint64(b[r.pos:]))
				r.pos += 8
			}
		case TypeInt32:
			v.Int, ok = r.varint()
			ok = ok && v.Int >= math.MinInt32 && v.Int <= math.MaxInt32
		case TypeInt64:
			v.Int, ok = r.varint()
		default:
			ok = false
		}
		if !ok {
			return nil, corrupt("property %q: bad %s value", p.Name, t)
		}
	}
	if r.pos != len(b) {
		return nil, corrupt("%d trailing bytes", len(b)-r.pos)
	}
	return e, nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// binReader reads b; s is the same bytes as a string, sliced for every
// string field so that they all share its single allocation.
type binReader struct {
	b   []byte
	s   string
	pos int
}

func (r *binReader) uvarint() (uint64, bool) {
	v, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		return 0, false
	}
	r.pos += n
	return v, true
}

func (r *binReader) varint() (int64, bool) {
	v, n := binary.Varint(r.b[r.pos:])
	if n <= 0 {
		return 0, false
	}
	r.pos += n
	return v, true
}

func (r *binReader) str() (string, bool) {
	n, ok := r.uvarint()
	if !ok || n > uint64(len(r.b)-r.pos) {
		return "", false
	}
	s := r.s[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return s, true
}

func (r *binReader) time() (time.Time, bool) {
	sec, ok := r.varint()
	if !ok {
		return time.Time{}, false
	}
	nsec, ok := r.uvarint()
	if !ok || nsec >= 1e9 {
		return time.Time{}, false
	}
	return time.Unix(sec, int64(nsec)).UTC(), true
}

// Restamp appends to dst the binary entity b with its keys and Timestamp
// replaced, copying its properties as they are: a state machine stamping a
// validated entity need not decode it. Only the header is checked.
func Restamp(dst, b []byte, pk, rk string, ts time.Time) ([]byte, error) {
	if len(b) < 2 || b[0] != binaryVersion || b[1]&^flagTimestamp != 0 {
		return dst, corrupt("bad header")
	}
	r := binReader{b: b, pos: 2}
	skip := func() bool {
		n, ok := r.uvarint()
		if !ok || n > uint64(len(b)-r.pos) {
			return false
		}
		r.pos += int(n)
		return true
	}
	if !skip() || !skip() {
		return dst, corrupt("bad keys")
	}
	if b[1]&flagTimestamp != 0 {
		if _, ok := r.time(); !ok {
			return dst, corrupt("bad Timestamp")
		}
	}
	// One allocation: every replica stamps every write it applies, and
	// growing a nil dst piece by piece cost four or five.
	dst = slices.Grow(dst, 2+4*binary.MaxVarintLen64+len(pk)+len(rk)+len(b)-r.pos)
	dst = append(dst, binaryVersion, flagTimestamp)
	dst = appendBytes(dst, pk)
	dst = appendBytes(dst, rk)
	dst = appendTime(dst, ts)
	return append(dst, b[r.pos:]...), nil
}
