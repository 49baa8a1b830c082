package edm

// The request bodies and answers of inserts are mostly long runs of
// ASCII text inside JSON strings (the bench tool's entity is a 924-byte
// string). Both the decoder and the encoder stop only at a quote, a
// backslash, a control character or a non-ASCII byte, so they step over
// such runs eight bytes at a time.

const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// plainEnd returns the index of the first byte of s at or after i that is
// not plain JSON string content: '"', '\\', a control character (< 0x20)
// or a byte >= 0x80. It returns len(s) when there is none.
func plainEnd[T string | []byte](s T, i int) int {
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		// Each term is non-zero exactly when some byte qualifies (the
		// classic "has zero byte" and "has byte less than n" tests; their
		// bit positions may be off after the first hit, so the word is
		// rescanned bytewise below).
		q := x ^ ('"' * swarOnes)
		b := x ^ ('\\' * swarOnes)
		special := (x-0x20*swarOnes)&^x | (q-swarOnes)&^q | (b-swarOnes)&^b | x
		if special&swarHigh != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return i
		}
	}
	return i
}
