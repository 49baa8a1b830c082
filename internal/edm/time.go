package edm

import (
	"fmt"
	"strings"
	"time"
)

// Tick is the resolution of every time Azure stores (a .NET DateTime tick).
// Timestamps and DateTime values finer than this would produce ETags and
// comparisons that no Azure client could reproduce.
const Tick = 100 * time.Nanosecond

// The range of Edm.DateTime Azure accepts: it stores Windows FILETIMEs, so
// nothing before 1601; .NET DateTime ends in 9999. Values outside are
// rejected with OutOfRangeInput.
var (
	MinDateTime = time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxDateTime = time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC)
)

// TruncateTick converts t to UTC at 100 ns resolution (dropping any
// monotonic reading), the only form in which the server may hand out a
// Timestamp: the ETag is derived from it and must survive a round trip.
func TruncateTick(t time.Time) time.Time { return t.UTC().Truncate(Tick) }

// FormatTimestamp formats t the way Azure writes the Timestamp property and
// Edm.DateTime values: RFC 3339 in UTC with up to 7 fraction digits and the
// trailing zeros dropped (no fraction at all for whole seconds). The service
// answers e.g. "2020-08-25T16:35:09.461291Z" and "2020-01-01T01:02:00Z"
// (.NET round-trip format "yyyy-MM-ddTHH:mm:ss.FFFFFFFZ"), never zero padded.
func FormatTimestamp(t time.Time) string {
	var buf [32]byte
	return string(AppendTimestamp(buf[:0], t))
}

// AppendTimestamp is FormatTimestamp without the allocation, for the
// response encoder.
func AppendTimestamp(dst []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	hour, min, sec := t.Clock()
	if year >= 0 && year <= 9999 {
		dst = append(dst, byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10))
	} else {
		dst = fmt.Appendf(dst, "%04d", year)
	}
	dst = append(dst, '-', byte('0'+int(month)/10), byte('0'+int(month)%10),
		'-', byte('0'+day/10), byte('0'+day%10),
		'T', byte('0'+hour/10), byte('0'+hour%10),
		':', byte('0'+min/10), byte('0'+min%10),
		':', byte('0'+sec/10), byte('0'+sec%10))
	if ticks := t.Nanosecond() / 100; ticks != 0 {
		var frac [7]byte
		for i := 6; i >= 0; i-- {
			frac[i] = byte('0' + ticks%10)
			ticks /= 10
		}
		n := 7
		for frac[n-1] == '0' {
			n--
		}
		dst = append(dst, '.')
		dst = append(dst, frac[:n]...)
	}
	return append(dst, 'Z')
}

// FormatETag returns the ETag Azure derives from an entity's Timestamp:
// W/"datetime'2021-08-31T15%3A42%3A05.8382263Z'" — the Timestamp text with
// its colons percent-encoded, so that clients can parse the ETag back into a
// time (some SDKs do).
func FormatETag(t time.Time) string {
	var buf [64]byte
	return string(AppendETag(buf[:0], t))
}

// AppendETag is FormatETag without the allocation.
func AppendETag(dst []byte, t time.Time) []byte {
	dst = append(dst, `W/"datetime'`...)
	var buf [32]byte
	for _, c := range AppendTimestamp(buf[:0], t) {
		if c == ':' {
			dst = append(dst, "%3A"...)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, `'"`...)
}

// ParseETag recovers the Timestamp from an If-Match value. It is lenient in
// what it accepts (with or without W/ and the quotes, %3A or ':', any number
// of fraction digits) because SDKs rebuild ETags by hand; the result is
// tick-truncated UTC, comparable with Entity.Timestamp. A value that is not
// a datetime ETag is InvalidInput, as in the service.
func ParseETag(s string) (time.Time, error) {
	orig := s
	s = strings.TrimSpace(s)
	if len(s) >= 2 && (s[0] == 'W' || s[0] == 'w') && s[1] == '/' {
		s = s[2:]
	}
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	const prefix = "datetime'"
	if len(s) < len(prefix)+1 || !strings.EqualFold(s[:len(prefix)], prefix) || s[len(s)-1] != '\'' {
		return time.Time{}, fmt.Errorf("%w: ETag %q is not a datetime ETag", ErrInvalidInput, orig)
	}
	s = s[len(prefix) : len(s)-1]
	if strings.IndexByte(s, '%') >= 0 {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if s[i] == '%' && i+2 < len(s) && s[i+1] == '3' && (s[i+2] == 'A' || s[i+2] == 'a') {
				b.WriteByte(':')
				i += 2
				continue
			}
			b.WriteByte(s[i])
		}
		s = b.String()
	}
	t, err := ParseDateTime(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: ETag %q has a bad datetime", ErrInvalidInput, orig)
	}
	return t, nil
}

// ParseDateTime parses the ISO 8601 forms clients send for Edm.DateTime
// (and that OData datetime'...' literals use): yyyy-mm-ddThh:mm[:ss[.f...]]
// followed by Z, an offset ±hh:mm, or nothing (taken as UTC, as the service
// does). The result is UTC truncated to the 100 ns tick; digits beyond the
// seventh are dropped rather than rejected. Only times .NET cannot hold
// (outside years 1..9999 once converted to UTC) are refused here; Azure's
// narrower 1601..9999 range is Validate's job, because the service answers
// it with OutOfRangeInput, not InvalidInput.
func ParseDateTime(s string) (time.Time, error) {
	t, ok := parseDateTime(s)
	if !ok {
		return time.Time{}, fmt.Errorf("%w: invalid DateTime %q", ErrInvalidInput, s)
	}
	return t, nil
}

func parseDateTime[S ~string | ~[]byte](s S) (time.Time, bool) {
	p := 0
	num := func(n int) (int, bool) {
		if p+n > len(s) {
			return 0, false
		}
		v := 0
		for i := 0; i < n; i++ {
			c := s[p+i]
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		p += n
		return v, true
	}
	lit := func(c byte) bool {
		if p < len(s) && s[p] == c {
			p++
			return true
		}
		return false
	}
	year, ok := num(4)
	if !ok || !lit('-') {
		return time.Time{}, false
	}
	month, ok := num(2)
	if !ok || !lit('-') {
		return time.Time{}, false
	}
	day, ok := num(2)
	if !ok || !(lit('T') || lit('t')) {
		return time.Time{}, false
	}
	hour, ok := num(2)
	if !ok || !lit(':') {
		return time.Time{}, false
	}
	minute, ok := num(2)
	if !ok {
		return time.Time{}, false
	}
	sec, nsec := 0, 0
	if lit(':') {
		if sec, ok = num(2); !ok {
			return time.Time{}, false
		}
		if lit('.') {
			start := p
			scale := 100000000
			for p < len(s) && s[p] >= '0' && s[p] <= '9' {
				nsec += int(s[p]-'0') * scale
				scale /= 10
				p++
			}
			if p == start {
				return time.Time{}, false
			}
		}
	}
	offset := 0
	switch {
	case p == len(s):
	case s[p] == 'Z' || s[p] == 'z':
		p++
	case s[p] == '+' || s[p] == '-':
		sign := 1
		if s[p] == '-' {
			sign = -1
		}
		p++
		oh, ok := num(2)
		if !ok || !lit(':') {
			return time.Time{}, false
		}
		om, ok := num(2)
		if !ok || oh > 23 || om > 59 {
			return time.Time{}, false
		}
		offset = sign * (oh*3600 + om*60)
	default:
		return time.Time{}, false
	}
	if p != len(s) || year < 1 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if t.Day() != day { // 31 April and friends normalise into the next month
		return time.Time{}, false
	}
	t = t.Add(-time.Duration(offset) * time.Second).Truncate(Tick)
	if y := t.Year(); y < 1 || y > 9999 { // .NET's DateTime cannot hold it either
		return time.Time{}, false
	}
	return t, true
}
