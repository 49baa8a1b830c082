package edm

import "fmt"

// ParseGuid validates a GUID in any of the forms .NET's Guid parser accepts
// for table entities (32 digits, 8-4-4-4-12, and the latter in braces or
// parentheses, any case) and returns the lowercase 8-4-4-4-12 form the
// service returns. Normalising once on the way in lets equality, filters
// and responses work on plain strings.
func ParseGuid(s string) (string, error) {
	g, ok := parseGuid(s)
	if !ok {
		return "", fmt.Errorf("%w: invalid Guid %q", ErrInvalidInput, s)
	}
	var buf [36]byte
	return string(appendGuid(buf[:0], g)), nil
}

func parseGuid[S ~string | ~[]byte](s S) (g [16]byte, ok bool) {
	switch len(s) {
	case 38:
		if !(s[0] == '{' && s[37] == '}' || s[0] == '(' && s[37] == ')') {
			return g, false
		}
		s = s[1:37]
		fallthrough
	case 36:
		if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
			return g, false
		}
		j := 0
		for i := 0; i < 36; {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				i++
				continue
			}
			hi, ok1 := unhex(s[i])
			lo, ok2 := unhex(s[i+1])
			if !ok1 || !ok2 {
				return g, false
			}
			g[j] = hi<<4 | lo
			j++
			i += 2
		}
		return g, true
	case 32:
		for j := 0; j < 16; j++ {
			hi, ok1 := unhex(s[2*j])
			lo, ok2 := unhex(s[2*j+1])
			if !ok1 || !ok2 {
				return g, false
			}
			g[j] = hi<<4 | lo
		}
		return g, true
	}
	return g, false
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

const hexDigits = "0123456789abcdef"

func appendGuid(dst []byte, g [16]byte) []byte {
	for i, b := range g {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[b>>4], hexDigits[b&15])
	}
	return dst
}

// GuidBytes parses a Guid in its 8-4-4-4-12 form into its 16 bytes, in
// text order (the order Azure compares Guids in).
func GuidBytes(s string) ([16]byte, bool) { return parseGuid(s) }
