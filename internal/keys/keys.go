package keys

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrCorrupt reports an encoded key that cannot be decoded.
var ErrCorrupt = errors.New("keys: corrupt encoded key")

// Each string is written with 0x00 escaped as 0x00 0xFF and terminated by
// 0x00 0x01. The terminator sorts below every escaped byte, so a string sorts
// before all its extensions, and concatenating two encodings orders pairs
// lexicographically by their first element and then by their second.
const (
	escape     = 0x00
	escapedNul = 0xFF
	terminator = 0x01
	// pkEnd replaces the terminator to form a key just above every key
	// of a PartitionKey.
	pkEnd = 0x02
)

// AppendString appends the encoding of s to dst.
func AppendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == escape {
			dst = append(dst, escape, escapedNul)
			continue
		}
		dst = append(dst, c)
	}
	return append(dst, escape, terminator)
}

// Encode returns the bbolt key of the entity (pk, rk).
func Encode(pk, rk string) []byte {
	b := make([]byte, 0, len(pk)+len(rk)+4)
	b = AppendString(b, pk)
	return AppendString(b, rk)
}

// PartitionStart returns the smallest key of any entity with PartitionKey pk.
func PartitionStart(pk string) []byte {
	return AppendString(make([]byte, 0, len(pk)+2), pk)
}

// PartitionEnd returns a key above every entity with PartitionKey pk and below
// every entity with a greater PartitionKey.
func PartitionEnd(pk string) []byte {
	b := PartitionStart(pk)
	b[len(b)-1] = pkEnd
	return b
}

// RowEnd returns a key above the entity (pk, rk) and every entity of pk
// with a smaller RowKey, and below every other entity of pk.
func RowEnd(pk, rk string) []byte {
	b := Encode(pk, rk)
	b[len(b)-1] = pkEnd
	return b
}

// Decode splits an encoded key into its PartitionKey and RowKey.
func Decode(b []byte) (pk, rk string, err error) {
	pk, n, err := decodeString(b)
	if err != nil {
		return "", "", err
	}
	rk, m, err := decodeString(b[n:])
	if err != nil {
		return "", "", err
	}
	if n+m != len(b) {
		return "", "", fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(b)-n-m)
	}
	return pk, rk, nil
}

// DecodePartitionKey returns the PartitionKey of an encoded entity key.
func DecodePartitionKey(b []byte) (string, error) {
	pk, _, err := decodeString(b)
	return pk, err
}

func decodeString(b []byte) (string, int, error) {
	i := bytes.IndexByte(b, escape)
	if i < 0 {
		return "", 0, fmt.Errorf("%w: missing terminator", ErrCorrupt)
	}
	if i+1 < len(b) && b[i+1] == terminator {
		return string(b[:i]), i + 2, nil
	}
	var out []byte
	for j := 0; j < len(b); j++ {
		c := b[j]
		if c != escape {
			out = append(out, c)
			continue
		}
		if j+1 >= len(b) {
			return "", 0, fmt.Errorf("%w: truncated escape", ErrCorrupt)
		}
		switch b[j+1] {
		case terminator:
			return string(out), j + 2, nil
		case escapedNul:
			out = append(out, escape)
			j++
		default:
			return "", 0, fmt.Errorf("%w: bad escape 0x%02x", ErrCorrupt, b[j+1])
		}
	}
	return "", 0, fmt.Errorf("%w: missing terminator", ErrCorrupt)
}
