package frontend

import (
	"encoding/base64"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Continuation tokens have Azure's shape, "1!<n>!<base64 of the key>" with
// the base64 padding '=' written as '-' (e.g. "1!8!U21pdGg-" for "Smith"),
// so clients that inspect or log them see what they know. They are opaque
// to clients, which only echo them; an empty key is "1!0!".

// appendToken appends the continuation token for key.
func appendToken(b []byte, key string) []byte {
	n := base64.StdEncoding.EncodedLen(len(key))
	b = append(b, "1!"...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, '!')
	start := len(b)
	b = base64.StdEncoding.AppendEncode(b, []byte(key))
	for i := start; i < len(b); i++ {
		if b[i] == '=' {
			b[i] = '-'
		}
	}
	return b
}

func encodeToken(key string) string {
	var buf [128]byte
	return string(appendToken(buf[:0], key))
}

// decodeToken recovers the key from a continuation token. It is lenient:
// the padding may be '-' or '=' or missing, the URL-safe alphabet is
// accepted, a '+' that a query string turned into a space is restored, and
// a value that is not in the token shape at all is taken as the key itself
// (tokens minted by other emulators, or written by hand). ok is false for
// a malformed token: one in the token shape ("1!<digits>!…") whose key is
// not base64, or a key that is not UTF-8 text (every key is; a token of
// anything else names no position, and the partition servers' gRPC cannot
// carry it). Such a token was taken as the key itself, and the query went
// on from wherever its bytes happened to sort.
func decodeToken(tok string) (key string, ok bool) {
	rest, shaped := strings.CutPrefix(tok, "1!")
	if !shaped {
		return tok, utf8.ValidString(tok)
	}
	i := strings.IndexByte(rest, '!')
	if i < 0 {
		return tok, utf8.ValidString(tok)
	}
	if _, err := strconv.Atoi(rest[:i]); err != nil {
		return tok, utf8.ValidString(tok)
	}
	b64 := rest[i+1:]
	if b64 == "" {
		return "", true
	}
	// Trailing '-' are padding; any other '-' or '_' is the URL-safe alphabet.
	end := len(b64)
	for end > 0 && (b64[end-1] == '-' || b64[end-1] == '=') {
		end--
	}
	var sb strings.Builder
	sb.Grow(end + 3)
	for j := 0; j < end; j++ {
		switch c := b64[j]; c {
		case '-':
			sb.WriteByte('+')
		case '_':
			sb.WriteByte('/')
		case ' ':
			sb.WriteByte('+')
		default:
			sb.WriteByte(c)
		}
	}
	raw, err := base64.RawStdEncoding.DecodeString(sb.String())
	if err != nil || !utf8.Valid(raw) {
		return "", false
	}
	return string(raw), true
}
