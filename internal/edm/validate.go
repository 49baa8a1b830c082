package edm

import (
	"fmt"
	"math"
	"unicode"
	"unicode/utf8"
)

// Azure's limits. Lengths are in UTF-16 code units because the service is
// .NET and counts string length that way ("1K characters", "32K
// characters"); a character outside the BMP therefore counts twice.
const (
	MaxKeyLength          = 1024      // PartitionKey, RowKey (KeyValueTooLarge beyond)
	MaxProperties         = 252       // user properties; the 3 system ones make 255
	MaxPropertyNameLength = 255       // PropertyNameTooLong beyond
	MaxStringLength       = 32 * 1024 // Edm.String, i.e. 64 KiB as UTF-16
	MaxBinaryLength       = 64 * 1024 // Edm.Binary, bytes
	MaxEntitySize         = 1 << 20   // by Size(), EntityTooLarge beyond
)

// len16 counts UTF-16 code units without decoding: every byte that starts a
// UTF-8 sequence is one unit, and a 4-byte sequence (outside the BMP) is a
// surrogate pair, one more. Limits are checked on every write, so this runs
// over every string value.
func len16(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c&0xC0 != 0x80 {
			n++
			if c >= 0xF0 {
				n++
			}
		}
	}
	return n
}

// ValidateKey checks a PartitionKey or RowKey value against the service's
// rules: at most 1024 UTF-16 units (KeyValueTooLarge), and none of / \ # ?
// or the control characters U+0000–U+001F and U+007F–U+009F (InvalidInput,
// which is what the service answers for e.g. a '/' in a RowKey). The empty
// string is a valid key.
func ValidateKey(s string) error {
	if len(s) > MaxKeyLength && len16(s) > MaxKeyLength {
		return fmt.Errorf("%w: key is %d UTF-16 units, the limit is %d", ErrKeyValueTooLarge, len16(s), MaxKeyLength)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 || c == 0x7F || c == '/' || c == '\\' || c == '#' || c == '?':
		case c == 0xC2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] < 0xA0: // U+0080–U+009F
		default:
			continue
		}
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Errorf("%w: key contains the disallowed character %U", ErrInvalidInput, r)
	}
	return nil
}

// ValidatePropertyName applies the service's rule for property names, which
// is C#'s identifier grammar: a letter (Lu, Ll, Lt, Lm, Lo, Nl) or '_',
// followed by letters, Mn, Mc, Nd, Pc or Cf characters, at most 255 UTF-16
// units. The service matches UTF-16 text, where a character outside the BMP
// is a pair of surrogates that no category above admits, so such characters
// are rejected here too.
func ValidatePropertyName(name string) error {
	if len(name) > MaxPropertyNameLength && len16(name) > MaxPropertyNameLength {
		return fmt.Errorf("%w: property name is %d UTF-16 units, the limit is %d", ErrPropertyNameTooLong, len16(name), MaxPropertyNameLength)
	}
	if name == "" {
		return fmt.Errorf("%w: empty property name", ErrPropertyNameInvalid)
	}
	for i, r := range name {
		if r < utf8.RuneSelf {
			c := byte(r)
			if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
				continue
			}
		} else if r != utf8.RuneError && r < 0x10000 && (isIdentStart(r) || i > 0 && isIdentPart(r)) {
			continue
		}
		return fmt.Errorf("%w: property name %q is not an identifier", ErrPropertyNameInvalid, name)
	}
	return nil
}

func isIdentStart(r rune) bool {
	return unicode.In(r, unicode.Lu, unicode.Ll, unicode.Lt, unicode.Lm, unicode.Lo, unicode.Nl)
}

func isIdentPart(r rune) bool {
	return isIdentStart(r) || unicode.In(r, unicode.Mn, unicode.Mc, unicode.Nd, unicode.Pc, unicode.Cf)
}

// isSystemName reports the names the service owns. A user property may not
// use them; DecodeJSON never produces one, so this only catches entities
// built in code.
func isSystemName(name string) bool {
	return name == "PartitionKey" || name == "RowKey" || name == "Timestamp"
}

// Size returns the entity's size by the formula Azure publishes for its
// 1 MiB limit: 4 + 2·len(PartitionKey) + 2·len(RowKey) + Σ (8 + 2·len(name)
// + value size), lengths in UTF-16 units, where the value size is 8 for
// DateTime, Double and Int64, 4 for Int32, 1 for Boolean, 16 for Guid,
// 2·len+4 for String and len+4 for Binary (the published formula counts the
// 4-byte length prefix for binary arrays as it does for strings).
func (e *Entity) Size() int {
	n := 4 + 2*len16(e.PartitionKey) + 2*len16(e.RowKey)
	for i := range e.Properties {
		p := &e.Properties[i]
		n += 8 + 2*len16(p.Name) + valueSize(&p.Value)
	}
	return n
}

func valueSize(v *Value) int {
	switch v.Type {
	case TypeString:
		return 2*len16(v.Str) + 4
	case TypeBinary:
		return len(v.Bin) + 4
	case TypeBoolean:
		return 1
	case TypeDateTime, TypeDouble, TypeInt64:
		return 8
	case TypeGuid:
		return 16
	case TypeInt32:
		return 4
	}
	return 0
}

// Validate checks everything Azure checks before storing an entity, in an
// order that reports the most specific problem first: keys, property count,
// then each property's name and value, then the total size. The caller must
// still check that the request carried the keys at all (see DecodeJSONKeys):
// an empty key is valid here.
func (e *Entity) Validate() error {
	if err := ValidateKey(e.PartitionKey); err != nil {
		return fmt.Errorf("PartitionKey: %w", err)
	}
	if err := ValidateKey(e.RowKey); err != nil {
		return fmt.Errorf("RowKey: %w", err)
	}
	if len(e.Properties) > MaxProperties {
		return fmt.Errorf("%w: %d user properties, the limit is %d", ErrTooManyProperties, len(e.Properties), MaxProperties)
	}
	sorted := true
	for i := range e.Properties {
		p := &e.Properties[i]
		if err := ValidatePropertyName(p.Name); err != nil {
			return err
		}
		if isSystemName(p.Name) {
			return fmt.Errorf("%w: %q is a system property", ErrPropertyNameInvalid, p.Name)
		}
		if i > 0 {
			prev := e.Properties[i-1].Name
			switch {
			case prev == p.Name:
				return fmt.Errorf("%w: duplicate property %q", ErrInvalidInput, p.Name)
			case prev > p.Name:
				sorted = false
			}
		}
		if err := validateValue(p.Name, &p.Value); err != nil {
			return err
		}
	}
	if !sorted { // at most 252 names, so the quadratic check is cheap
		for i := range e.Properties {
			for j := i + 1; j < len(e.Properties); j++ {
				if e.Properties[i].Name == e.Properties[j].Name {
					return fmt.Errorf("%w: duplicate property %q", ErrInvalidInput, e.Properties[i].Name)
				}
			}
		}
	}
	// The exact size needs every string's UTF-16 length (a pass over all
	// its bytes); nearly every entity is far below the limit by a bound
	// that needs only the byte lengths, so the exact count runs only near it.
	if e.sizeBound() <= MaxEntitySize {
		return nil
	}
	if n := e.Size(); n > MaxEntitySize {
		return fmt.Errorf("%w: entity is %d bytes by Azure's formula, the limit is %d", ErrEntityTooLarge, n, MaxEntitySize)
	}
	return nil
}

// sizeBound is an upper bound of Size from byte lengths alone: no byte adds
// more than two UTF-16 units in len16 (a 4-byte sequence's leading byte adds
// two, its other bytes none; a stray leading byte of invalid UTF-8 also two),
// so a string of n bytes is at most 2n units, 4n bytes by Azure's formula.
func (e *Entity) sizeBound() int {
	n := 4 + 4*len(e.PartitionKey) + 4*len(e.RowKey)
	for i := range e.Properties {
		p := &e.Properties[i]
		n += 8 + 4*len(p.Name)
		if p.Value.Type == TypeString {
			n += 4*len(p.Value.Str) + 4
		} else {
			n += valueSize(&p.Value)
		}
	}
	return n
}

func validateValue(name string, v *Value) error {
	switch v.Type {
	case TypeString:
		if len(v.Str) > MaxStringLength && len16(v.Str) > MaxStringLength {
			return fmt.Errorf("%w: property %q is %d UTF-16 units, the limit is %d", ErrPropertyValueTooLarge, name, len16(v.Str), MaxStringLength)
		}
	case TypeBinary:
		if len(v.Bin) > MaxBinaryLength {
			return fmt.Errorf("%w: property %q is %d bytes, the limit is %d", ErrPropertyValueTooLarge, name, len(v.Bin), MaxBinaryLength)
		}
	case TypeDateTime:
		if v.Time.Before(MinDateTime) || v.Time.After(MaxDateTime) {
			return fmt.Errorf("%w: property %q: DateTime %s is outside 1601-01-01..9999-12-31", ErrOutOfRangeInput, name, v.Time.UTC().Format("2006-01-02T15:04:05Z"))
		}
	case TypeGuid:
		if _, ok := parseGuid(v.Str); !ok {
			return fmt.Errorf("%w: property %q: invalid Guid %q", ErrInvalidInput, name, v.Str)
		}
	case TypeInt32:
		if v.Int < math.MinInt32 || v.Int > math.MaxInt32 {
			return fmt.Errorf("%w: property %q: %d does not fit Edm.Int32", ErrInvalidInput, name, v.Int)
		}
	case TypeBoolean, TypeDouble, TypeInt64:
	default:
		return fmt.Errorf("%w: property %q has invalid type %d", ErrInvalidInput, name, v.Type)
	}
	return nil
}
