package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/hashicorp/raft"
)

// Errors of the log.
var (
	// ErrCorrupt is a record that fails its checksum or does not decode
	// where no torn write can explain it.
	ErrCorrupt = errors.New("raftlog: corrupt record")
	// ErrTooLarge is an entry too large for one record.
	ErrTooLarge = errors.New("raftlog: entry too large")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("raftlog: closed")
	// ErrKeyNotFound is a stable key never set. raft compares the message
	// ("not found"), as it does for raft-boltdb.
	ErrKeyNotFound = errors.New("not found")
)

// Record kinds.
const (
	recEntries    byte = 1 // group, count, entries (each length-prefixed)
	recDelete     byte = 2 // group, min, max
	recSet        byte = 3 // group, key, value
	recDrop       byte = 4 // group
	recCheckpoint byte = 5 // every group's bounds and stable keys
)

// Seals. Every group commit ends with a seal: a delete record of
// sealGroup, a group id no range has, whose min is the commit's sequence
// number (one more than the last's; max 0). Commits are written one after
// another, each only once the one before is synced, so a valid seal of a
// later commit than the one holding a bad frame proves that frame was
// synced: acknowledged data gone bad, not a torn write (replay refuses to
// open, where it would otherwise cut everything after the frame, votes
// included). A binary from before seals replays one as a delete of a group
// it does not have, a no-op, so it can still open a log this one wrote.
const sealGroup = ^uint64(0)

// appendSeal appends commit seq's seal frame to buf.
func appendSeal(buf []byte, seq uint64) []byte {
	buf, start := beginFrame(buf, recDelete)
	buf = binary.AppendUvarint(buf, sealGroup)
	buf = binary.AppendUvarint(buf, seq)
	buf = binary.AppendUvarint(buf, 0)
	return endFrame(buf, start)
}

// sealAt reports whether b holds, at any offset, the valid seal frame of
// commit seq. It tries every offset (after a bad frame the next frame's
// start is unknown), but looks at a checksum only where the length, kind
// and group are a seal's, so a scan of a multi-MiB torn commit stays
// linear. Only the exact number counts: the commit right after the one
// holding the bad frame proves that one was synced (any later commit
// implies it), and an entity's bytes that happen to, or are made to, look
// like a seal would also have to carry the number the log is at.
func sealAt(b []byte, seq uint64) bool {
	want := appendSeal(nil, seq)
	for i := 0; i+len(want) <= len(b); i++ {
		if b[i] == want[0] && b[i+frameHeader] == recDelete && bytes.Equal(b[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// Frame: length of kind+payload (4 bytes LE), CRC-32C of kind+payload
// (4 bytes LE), kind, payload.
const frameHeader = 8

// maxRecord bounds a record's length so a corrupt length cannot make the
// decoder allocate or skip gigabytes.
const maxRecord = 256 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// beginFrame appends a frame header placeholder and the kind; endFrame fills
// the header once the payload is appended.
func beginFrame(buf []byte, kind byte) ([]byte, int) {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0, 0, 0, 0, 0, kind)
	return buf, start
}

func endFrame(buf []byte, start int) []byte {
	body := buf[start+frameHeader:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(body, crcTable))
	return buf
}

// errTorn is a frame cut short or failing its checksum: at the tail of the
// newest segment it is a torn write, anywhere else corruption.
var errTorn = errors.New("raftlog: torn or corrupt frame")

// nextFrame decodes the frame at the start of b and returns its kind, its
// payload and its total length. A zero length (preallocated or zero-filled
// space) ends the log like a torn frame.
func nextFrame(b []byte) (kind byte, payload []byte, n int, err error) {
	if len(b) < frameHeader+1 {
		return 0, nil, 0, errTorn
	}
	l := binary.LittleEndian.Uint32(b)
	if l == 0 || l > maxRecord || uint64(len(b)-frameHeader) < uint64(l) {
		return 0, nil, 0, errTorn
	}
	body := b[frameHeader : frameHeader+int(l)]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return 0, nil, 0, errTorn
	}
	return body[0], body[1:], frameHeader + int(l), nil
}

// reader decodes a payload; the first error sticks.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad varint at %d", ErrCorrupt, r.off)
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad varint at %d", ErrCorrupt, r.off)
		return 0
	}
	r.off += n
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = fmt.Errorf("%w: length %d past end", ErrCorrupt, n)
		return nil
	}
	v := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return v
}

func (r *reader) byte1() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.err = fmt.Errorf("%w: short payload", ErrCorrupt)
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) done() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.b)-r.off)
	}
	return r.err
}

// appendEntry encodes one raft log entry.
func appendEntry(buf []byte, l *raft.Log) []byte {
	buf = binary.AppendUvarint(buf, l.Index)
	buf = binary.AppendUvarint(buf, l.Term)
	buf = append(buf, byte(l.Type))
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	buf = append(buf, l.Extensions...)
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	return binary.AppendVarint(buf, at)
}

// entrySize is the length appendEntry gives l.
func entrySize(l *raft.Log) int {
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	return uvarintLen(l.Index) + uvarintLen(l.Term) + 1 +
		uvarintLen(uint64(len(l.Data))) + len(l.Data) +
		uvarintLen(uint64(len(l.Extensions))) + len(l.Extensions) +
		varintLen(at)
}

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}

func varintLen(v int64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutVarint(b[:], v)
}

// entryFields parses an entry encoded by appendEntry; data and ext alias b.
func entryFields(b []byte) (index, term uint64, typ raft.LogType, data, ext []byte, at int64, err error) {
	r := reader{b: b}
	index = r.uvarint()
	term = r.uvarint()
	typ = raft.LogType(r.byte1())
	data = r.bytes()
	ext = r.bytes()
	at = r.varint()
	return index, term, typ, data, ext, at, r.done()
}

// decodeEntry decodes one entry encoded by appendEntry into l; l's byte
// slices alias b, so b must not be reused.
func decodeEntry(b []byte, l *raft.Log) error {
	index, term, typ, data, ext, at, err := entryFields(b)
	if err != nil {
		return err
	}
	l.Index, l.Term, l.Type = index, term, typ
	l.Data = nilIfEmpty(data)
	l.Extensions = nilIfEmpty(ext)
	l.AppendedAt = time.Time{}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	return nil
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func cloneOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// groupState is one group's bounds and stable keys in a checkpoint.
type groupState struct {
	id    uint64
	first uint64
	count uint64
	kv    map[string][]byte
}

// event is a decoded record, as replay applies it.
type event struct {
	kind     byte
	group    uint64
	min, max uint64 // recDelete
	key, val []byte // recSet
	// recEntries: each entry's index and its offset and length in the
	// payload.
	entries []entryRef
	groups  []groupState // recCheckpoint
}

type entryRef struct {
	index uint64
	off   int
	n     int
}

// decodeRecord decodes a record's payload. Entry offsets are relative to
// the start of payload.
func decodeRecord(kind byte, payload []byte) (event, error) {
	r := reader{b: payload}
	ev := event{kind: kind}
	switch kind {
	case recEntries:
		ev.group = r.uvarint()
		n := r.uvarint()
		if r.err == nil && n > uint64(len(payload)) {
			return ev, fmt.Errorf("%w: %d entries in %d bytes", ErrCorrupt, n, len(payload))
		}
		ev.entries = make([]entryRef, 0, n)
		for i := uint64(0); i < n && r.err == nil; i++ {
			e := r.bytes()
			if r.err != nil {
				break
			}
			idx, _, _, _, _, _, err := entryFields(e)
			if err != nil {
				return ev, err
			}
			ev.entries = append(ev.entries, entryRef{index: idx, off: r.off - len(e), n: len(e)})
		}
	case recDelete:
		ev.group = r.uvarint()
		ev.min = r.uvarint()
		ev.max = r.uvarint()
	case recSet:
		ev.group = r.uvarint()
		ev.key = r.bytes()
		ev.val = r.bytes()
	case recDrop:
		ev.group = r.uvarint()
	case recCheckpoint:
		n := r.uvarint()
		if r.err == nil && n > uint64(len(payload)) {
			return ev, fmt.Errorf("%w: %d groups in %d bytes", ErrCorrupt, n, len(payload))
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			g := groupState{id: r.uvarint(), first: r.uvarint(), count: r.uvarint(), kv: map[string][]byte{}}
			nkv := r.uvarint()
			if r.err == nil && nkv > uint64(len(payload)) {
				return ev, fmt.Errorf("%w: %d keys in %d bytes", ErrCorrupt, nkv, len(payload))
			}
			for j := uint64(0); j < nkv && r.err == nil; j++ {
				k := r.bytes()
				v := r.bytes()
				g.kv[string(k)] = cloneOrNil(v)
			}
			ev.groups = append(ev.groups, g)
		}
	default:
		return ev, fmt.Errorf("%w: unknown record kind %d", ErrCorrupt, kind)
	}
	return ev, r.done()
}
