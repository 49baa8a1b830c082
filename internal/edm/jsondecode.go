package edm

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// maxMembers bounds the members of a request body. Azure allows 255
// properties plus their annotations; a body with thousands of members can
// only be an attack on the decoder, so it is refused before any sorting.
const maxMembers = 4096

// DecodeJSON parses an entity from a request body (Insert, Update, Merge,
// and the entity parts of a batch) the way the service's OData reader does:
//
//   - the body must be one JSON object, nothing after it;
//   - "Name@odata.type" may come before or after "Name";
//   - untyped values: string → String, true/false → Boolean, an integer
//     literal that fits Int32 → Int32, any other number (fraction, exponent,
//     or an integer beyond Int32, as the service's reader falls back to
//     double) → Double;
//   - typed values: Edm.Int64 as a string (a number is accepted too),
//     Edm.Double as a number or "NaN"/"Infinity"/"-Infinity" (or "INF"/
//     "-INF", .NET's XML spelling), Edm.DateTime, Edm.Guid (normalised to
//     lowercase), Edm.Binary as base64, Edm.Boolean, Edm.Int32, Edm.String
//     (an Int32 or Boolean written as a string is tolerated);
//   - "odata.*" members (a client echoing odata.etag, say) and other
//     "@odata.*" instance annotations are ignored, whatever their value,
//     and so is a client-sent Timestamp: the server owns it; property values
//     themselves cannot be objects or arrays;
//   - an untyped null value means the property is absent: Azure has no
//     null, and a null in a Merge does not delete the stored property; a
//     null with an @odata.type annotation is InvalidInput, as the service
//     answers it;
//   - PartitionKey and RowKey must be strings when present; absent (or null)
//     is allowed because the URL may carry them, and DecodeJSONKeys tells
//     the caller which were present.
//
// Everything else wrong with the body — syntax, duplicate names, unknown
// type names, values that do not fit their type, annotations without a
// value — is ErrInvalidInput. Azure's limits are not checked here (call
// Validate), except that a body of more than 4096 members is refused with
// ErrTooManyProperties before any work is spent on it. The returned entity
// never aliases data, and its properties are sorted by name.
func DecodeJSON(data []byte) (*Entity, error) {
	e, _, _, err := DecodeJSONKeys(data)
	return e, err
}

// DecodeJSONKeys is DecodeJSON that also reports whether the body carried
// PartitionKey and RowKey, since an empty string is a valid key and only
// presence tells an Insert without keys (PropertiesNeedValue) from one with
// empty keys.
func DecodeJSONKeys(data []byte) (e *Entity, hasPartitionKey, hasRowKey bool, err error) {
	st := decodePool.Get().(*decodeState)
	st.data = data
	e, err = st.decode()
	hasPartitionKey, hasRowKey = st.hasPK, st.hasRK
	st.release()
	if err != nil {
		return nil, false, false, err
	}
	return e, hasPartitionKey, hasRowKey, nil
}

// DecodeJSONKeysBinary is DecodeJSONKeys that also returns the entity's
// binary form, MarshalBinary(e), for an insert, which needs both: the
// entity's strings point into bin instead of into an allocation of their
// own (they are gathered in a pooled buffer first). bin must never change
// (as with UnmarshalBinaryOwned); changing e's fields is fine, but then bin
// no longer encodes e.
func DecodeJSONKeysBinary(data []byte) (e *Entity, bin []byte, hasPartitionKey, hasRowKey bool, err error) {
	st := decodePool.Get().(*decodeState)
	st.data, st.borrow = data, true
	e, err = st.decode()
	if err == nil {
		bin = MarshalBinary(e)
		pointInto(e, bin)
	}
	hasPartitionKey, hasRowKey = st.hasPK, st.hasRK
	st.release() // the arena goes back to the pool: nothing of e is in it now
	if err != nil {
		return nil, nil, false, false, err
	}
	return e, bin, hasPartitionKey, hasRowKey, nil
}

type jkind uint8

const (
	jString jkind = iota + 1
	jNumber
	jTrue
	jFalse
	jNull
	jComplex // an object or array, only allowed where the member is ignored
)

// maxDepth bounds the nesting of the objects and arrays that ignored
// members may carry, so skipping them cannot exhaust the stack.
const maxDepth = 64

// jfield is one member of the body that will become a user property. name
// and val alias the request body or st.scratch (when unescaping was needed).
type jfield struct {
	name []byte
	val  []byte // string contents (unescaped) or the number literal
	kind jkind
	typ  Type // from the annotation; 0 when untyped
	// where the name and string value landed in the entity's string arena
	nameOff, strOff, strLen int
	strVal                  bool
}

type jann struct {
	name []byte // the annotated property
	typ  []byte // the annotation's value
}

// decodeState is pooled: decoding sits on every write, and the scratch
// slices would otherwise be allocated per request.
type decodeState struct {
	data    []byte
	pos     int
	scratch []byte
	fields  []jfield
	anns    []jann

	order                  []int32 // fields in name order
	pk, rk                 []byte
	hasPK, hasRK           bool
	seenPK, seenRK, seenTS bool

	// borrow makes build put the entity's strings in arena, which stays
	// with the pooled state: DecodeJSONKeysBinary points them at the
	// binary form before the state is released.
	borrow bool
	arena  []byte
}

var decodePool = sync.Pool{New: func() any { return new(decodeState) }}

func (st *decodeState) release() {
	clear(st.fields)
	clear(st.anns)
	big := cap(st.fields) > 1024 || cap(st.anns) > 1024 || cap(st.scratch) > 1<<16
	arena := st.arena[:0]
	if cap(arena) > 1<<16 {
		arena = nil // one large insert's arena, not the state's other buffers
	}
	*st = decodeState{fields: st.fields[:0], anns: st.anns[:0], scratch: st.scratch[:0], order: st.order[:0], arena: arena}
	if !big {
		decodePool.Put(st)
	}
}

func (st *decodeState) invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidInput}, args...)...)
}

func (st *decodeState) syntax(at int, what string) error {
	return fmt.Errorf("%w: malformed JSON at offset %d: %s", ErrInvalidInput, at, what)
}

var (
	odataPrefix     = []byte("odata.")
	odataAnnotation = []byte("@odata.")
	typeSuffix      = []byte("@odata.type")
	utf8BOM         = []byte{0xEF, 0xBB, 0xBF}
)

func (st *decodeState) decode() (*Entity, error) {
	if err := st.parseObject(); err != nil {
		return nil, err
	}
	if err := st.resolve(); err != nil {
		return nil, err
	}
	return st.build()
}

func (st *decodeState) ws() {
	for st.pos < len(st.data) {
		switch st.data[st.pos] {
		case ' ', '\t', '\n', '\r':
			st.pos++
		default:
			return
		}
	}
}

func (st *decodeState) parseObject() error {
	d := st.data
	if bytes.HasPrefix(d, utf8BOM) { // .NET readers skip it, so clients send it
		st.pos = len(utf8BOM)
	}
	st.ws()
	if st.pos >= len(d) || d[st.pos] != '{' {
		return st.invalid("the request body must be a JSON object")
	}
	st.pos++
	st.ws()
	if st.pos < len(d) && d[st.pos] == '}' {
		st.pos++
	} else {
		for members := 1; ; members++ {
			if members > maxMembers {
				return fmt.Errorf("%w: the body has more than %d members", ErrTooManyProperties, maxMembers)
			}
			st.ws()
			if st.pos >= len(d) || d[st.pos] != '"' {
				return st.syntax(st.pos, "expected a property name")
			}
			name, err := st.str()
			if err != nil {
				return err
			}
			st.ws()
			if st.pos >= len(d) || d[st.pos] != ':' {
				return st.syntax(st.pos, "expected ':'")
			}
			st.pos++
			st.ws()
			kind, val, err := st.value()
			if err != nil {
				return err
			}
			if err := st.member(name, kind, val); err != nil {
				return err
			}
			st.ws()
			if st.pos >= len(d) {
				return st.syntax(st.pos, "unexpected end of input")
			}
			if d[st.pos] == ',' {
				st.pos++
				continue
			}
			if d[st.pos] == '}' {
				st.pos++
				break
			}
			return st.syntax(st.pos, "expected ',' or '}'")
		}
	}
	st.ws()
	if st.pos != len(d) {
		return st.syntax(st.pos, "unexpected data after the JSON object")
	}
	return nil
}

func (st *decodeState) value() (jkind, []byte, error) {
	d := st.data
	if st.pos >= len(d) {
		return 0, nil, st.syntax(st.pos, "expected a value")
	}
	switch c := d[st.pos]; {
	case c == '"':
		s, err := st.str()
		return jString, s, err
	case c == 't':
		return st.literal("true", jTrue)
	case c == 'f':
		return st.literal("false", jFalse)
	case c == 'n':
		return st.literal("null", jNull)
	case c == '{' || c == '[':
		return jComplex, nil, st.skip(1)
	case c == '-' || c >= '0' && c <= '9':
		n, err := st.number()
		return jNumber, n, err
	}
	return 0, nil, st.syntax(st.pos, "expected a value")
}

// skip validates and steps over an object or array.
func (st *decodeState) skip(depth int) error {
	if depth > maxDepth {
		return st.invalid("JSON nested deeper than %d levels", maxDepth)
	}
	d := st.data
	open := d[st.pos]
	closing := byte('}')
	if open == '[' {
		closing = ']'
	}
	st.pos++
	st.ws()
	if st.pos < len(d) && d[st.pos] == closing {
		st.pos++
		return nil
	}
	for {
		st.ws()
		if open == '{' {
			if st.pos >= len(d) || d[st.pos] != '"' {
				return st.syntax(st.pos, "expected a property name")
			}
			if _, err := st.str(); err != nil {
				return err
			}
			st.ws()
			if st.pos >= len(d) || d[st.pos] != ':' {
				return st.syntax(st.pos, "expected ':'")
			}
			st.pos++
			st.ws()
		}
		if st.pos < len(d) && (d[st.pos] == '{' || d[st.pos] == '[') {
			if err := st.skip(depth + 1); err != nil {
				return err
			}
		} else if _, _, err := st.value(); err != nil {
			return err
		}
		st.ws()
		if st.pos >= len(d) {
			return st.syntax(st.pos, "unexpected end of input")
		}
		switch d[st.pos] {
		case ',':
			st.pos++
		case closing:
			st.pos++
			return nil
		default:
			return st.syntax(st.pos, "expected ',' or a closing bracket")
		}
	}
}

func (st *decodeState) literal(word string, kind jkind) (jkind, []byte, error) {
	if !bytes.HasPrefix(st.data[st.pos:], []byte(word)) {
		return 0, nil, st.syntax(st.pos, "expected a value")
	}
	v := st.data[st.pos : st.pos+len(word)]
	st.pos += len(word)
	return kind, v, nil
}

// number scans a literal with JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (st *decodeState) number() ([]byte, error) {
	d, start := st.data, st.pos
	i, ok := scanNumber(d, start)
	if !ok {
		return nil, st.syntax(start, "malformed number")
	}
	st.pos = i
	return d[start:i], nil
}

func scanNumber(d []byte, i int) (int, bool) {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i >= len(d):
		return i, false
	case d[i] == '0':
		i++
	case d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return i, false
	}
	if i < len(d) && d[i] == '.' {
		i++
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			return i, false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			return i, false
		}
	}
	return i, true
}

// str scans a string starting at the opening quote. The common case — no
// escapes, valid UTF-8 — returns a slice of the body without copying.
func (st *decodeState) str() ([]byte, error) {
	d := st.data
	start := st.pos + 1
	ascii := true
	for i := plainEnd(d, start); i < len(d); i = plainEnd(d, i+1) {
		switch c := d[i]; {
		case c == '"':
			if !ascii && !utf8.Valid(d[start:i]) {
				return st.strSlow(start, start)
			}
			st.pos = i + 1
			return d[start:i], nil
		case c == '\\' || c < 0x20:
			if !ascii { // the prefix may hold invalid UTF-8 to replace
				return st.strSlow(start, start)
			}
			return st.strSlow(start, i)
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, st.syntax(st.pos, "unterminated string")
}

// strSlow unescapes into st.scratch. Invalid UTF-8 and lone surrogates
// become U+FFFD, as in encoding/json: Go strings cannot carry them through.
func (st *decodeState) strSlow(start, i int) ([]byte, error) {
	d := st.data
	off := len(st.scratch)
	st.scratch = append(st.scratch, d[start:i]...)
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			st.pos = i + 1
			return st.scratch[off:len(st.scratch):len(st.scratch)], nil
		case c < 0x20:
			return nil, st.syntax(i, "control character in string")
		case c == '\\':
			if i+1 >= len(d) {
				return nil, st.syntax(i, "unterminated string")
			}
			var b byte
			switch d[i+1] {
			case '"', '\\', '/':
				b = d[i+1]
			case 'b':
				b = '\b'
			case 'f':
				b = '\f'
			case 'n':
				b = '\n'
			case 'r':
				b = '\r'
			case 't':
				b = '\t'
			case 'u':
				r, n, ok := unescapeU(d[i:])
				if !ok {
					return nil, st.syntax(i, `malformed \u escape`)
				}
				st.scratch = utf8.AppendRune(st.scratch, r)
				i += n
				continue
			default:
				return nil, st.syntax(i, "invalid escape")
			}
			st.scratch = append(st.scratch, b)
			i += 2
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				st.scratch = utf8.AppendRune(st.scratch, unicode.ReplacementChar)
			} else {
				st.scratch = append(st.scratch, d[i:i+size]...)
			}
			i += size
		default:
			st.scratch = append(st.scratch, c)
			i++
		}
	}
	return nil, st.syntax(start-1, "unterminated string")
}

// unescapeU decodes \uXXXX (b starts at the backslash), joining a surrogate
// pair written as two escapes.
func unescapeU(b []byte) (rune, int, bool) {
	r, ok := hex4(b)
	if !ok {
		return 0, 0, false
	}
	if utf16.IsSurrogate(r) {
		if r2, ok := hex4(b[6:]); ok {
			if dec := utf16.DecodeRune(r, r2); dec != unicode.ReplacementChar {
				return dec, 12, true
			}
		}
		return unicode.ReplacementChar, 6, true
	}
	return r, 6, true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		v, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

func (st *decodeState) member(name []byte, kind jkind, val []byte) error {
	switch {
	case bytes.HasPrefix(name, odataPrefix):
		return nil
	case bytes.HasSuffix(name, typeSuffix):
		if kind != jString {
			return st.invalid("the annotation %q must be a string", name)
		}
		st.anns = append(st.anns, jann{name: name[:len(name)-len(typeSuffix)], typ: val})
		return nil
	case bytes.Contains(name, odataAnnotation):
		return nil
	}
	switch string(name) {
	case "PartitionKey":
		return st.key(&st.seenPK, &st.hasPK, &st.pk, "PartitionKey", kind, val)
	case "RowKey":
		return st.key(&st.seenRK, &st.hasRK, &st.rk, "RowKey", kind, val)
	case "Timestamp":
		if st.seenTS {
			return st.invalid("duplicate property %q", "Timestamp")
		}
		st.seenTS = true
		return nil
	}
	if kind == jComplex {
		return st.invalid("property %q: values must be strings, numbers, booleans or null", name)
	}
	st.fields = append(st.fields, jfield{name: name, val: val, kind: kind})
	return nil
}

func (st *decodeState) key(seen, has *bool, dst *[]byte, name string, kind jkind, val []byte) error {
	if *seen {
		return st.invalid("duplicate property %q", name)
	}
	*seen = true
	switch kind {
	case jNull:
	case jString:
		*has, *dst = true, val
	default:
		return st.invalid("%s must be a string", name)
	}
	return nil
}

// byName orders st.order by field name; a named pointer type so sorting
// does not allocate.
type byName decodeState

func (s *byName) Len() int { return len(s.order) }
func (s *byName) Less(i, j int) bool {
	return bytes.Compare(s.fields[s.order[i]].name, s.fields[s.order[j]].name) < 0
}
func (s *byName) Swap(i, j int) { s.order[i], s.order[j] = s.order[j], s.order[i] }

func compareAnns(a, b jann) int { return bytes.Compare(a.name, b.name) }

// resolve pairs annotations with their values. Both lists are sorted by
// name, which also makes duplicates adjacent and gives the entity its
// property order.
func (st *decodeState) resolve() error {
	n := 0
	for _, a := range st.anns {
		switch string(a.name) {
		case "PartitionKey", "RowKey":
			if string(a.typ) != "Edm.String" {
				return st.invalid("%s must be Edm.String, not %q", a.name, a.typ)
			}
			if string(a.name) == "PartitionKey" && !st.seenPK || string(a.name) == "RowKey" && !st.seenRK {
				return st.invalid("type annotation for %q without a value", a.name)
			}
		case "Timestamp":
		default:
			st.anns[n] = a
			n++
		}
	}
	clear(st.anns[n:])
	st.anns = st.anns[:n]

	fields := st.fields
	for i := range fields {
		st.order = append(st.order, int32(i))
	}
	// Sort indices, not the fields: they are large. SDKs that marshal maps
	// send sorted names, so check first.
	if !sort.IsSorted((*byName)(st)) {
		sort.Sort((*byName)(st))
	}
	order := st.order
	for i := 1; i < len(order); i++ {
		if bytes.Equal(fields[order[i-1]].name, fields[order[i]].name) {
			return st.invalid("duplicate property %q", fields[order[i]].name)
		}
	}
	anns := st.anns
	if !slices.IsSortedFunc(anns, compareAnns) {
		slices.SortFunc(anns, compareAnns)
	}
	j := 0
	for i, a := range anns {
		if i > 0 && bytes.Equal(anns[i-1].name, a.name) {
			return st.invalid("duplicate type annotation for %q", a.name)
		}
		for j < len(order) && bytes.Compare(fields[order[j]].name, a.name) < 0 {
			j++
		}
		if j == len(order) || !bytes.Equal(fields[order[j]].name, a.name) {
			return st.invalid("type annotation for %q without a value", a.name)
		}
		t, ok := parseTypeName(string(a.typ))
		if !ok {
			return st.invalid("property %q has unknown type %q", a.name, a.typ)
		}
		if fields[order[j]].kind == jNull {
			// The SDKs send a typed null for values JSON cannot carry (an
			// invalid Date, Infinity); the service refuses it rather than
			// dropping the property.
			return st.invalid("property %q is null with type %q", a.name, a.typ)
		}
		fields[order[j]].typ = t
	}
	return nil
}

// arena collects an entity's names and string values (build).
type arena struct{ b []byte }

func (a *arena) Len() int       { return len(a.b) }
func (a *arena) Write(p []byte) { a.b = append(a.b, p...) }

// build converts the fields into the entity. All names and string values
// are copied into one string and all binary values into one byte slice, so
// an entity costs a handful of allocations however many properties it has.
func (st *decodeState) build() (*Entity, error) {
	fields := st.fields
	strSize, binSize, kept := len(st.pk)+len(st.rk), 0, 0
	for i := range fields {
		f := &fields[i]
		if f.kind == jNull {
			continue
		}
		kept++
		strSize += len(f.name)
		switch {
		case f.typ == TypeGuid:
			strSize += 36
		case f.typ == TypeBinary:
			binSize += base64.StdEncoding.DecodedLen(len(f.val))
		case f.kind == jString && (f.typ == 0 || f.typ == TypeString):
			strSize += len(f.val)
		}
	}

	var sb arena
	if st.borrow && cap(st.arena) >= strSize {
		sb.b = st.arena[:0]
	} else {
		sb.b = make([]byte, 0, strSize)
		if st.borrow {
			st.arena = sb.b
		}
	}
	sb.Write(st.pk)
	sb.Write(st.rk)
	var bin []byte
	if binSize > 0 {
		bin = make([]byte, 0, binSize)
	}
	var props []Property
	if kept > 0 {
		props = make([]Property, 0, kept)
	}
	for _, i := range st.order {
		f := &fields[i]
		if f.kind == jNull {
			continue
		}
		f.nameOff = sb.Len()
		sb.Write(f.name)
		var v Value
		var err error
		if f.typ == TypeBinary {
			v, bin, err = decodeBinary(f, bin)
		} else {
			v, err = convert(f, &sb)
		}
		if err != nil {
			return nil, err
		}
		props = append(props, Property{Value: v})
	}

	// sb.b is never written again: in its own allocation it is the
	// entity's, and a borrowed arena is left only after
	// DecodeJSONKeysBinary has pointed every string elsewhere.
	all := unsafe.String(unsafe.SliceData(sb.b), len(sb.b))
	e := &Entity{
		PartitionKey: all[:len(st.pk)],
		RowKey:       all[len(st.pk) : len(st.pk)+len(st.rk)],
		Properties:   props,
	}
	k := 0
	for _, i := range st.order {
		f := &fields[i]
		if f.kind == jNull {
			continue
		}
		p := &props[k]
		k++
		p.Name = all[f.nameOff : f.nameOff+len(f.name)]
		if f.strVal {
			p.Value.Str = all[f.strOff : f.strOff+f.strLen]
		}
	}
	return e, nil
}

func decodeBinary(f *jfield, bin []byte) (Value, []byte, error) {
	if f.kind != jString {
		return Value{}, bin, mismatch(f)
	}
	start := len(bin)
	n, err := base64.StdEncoding.Decode(bin[start:start+base64.StdEncoding.DecodedLen(len(f.val))], f.val)
	if err != nil {
		return Value{}, bin, fmt.Errorf("%w: property %q: invalid base64", ErrInvalidInput, f.name)
	}
	bin = bin[:start+n]
	return Value{Type: TypeBinary, Bin: bin[start : start+n : start+n]}, bin, nil
}

func mismatch(f *jfield) error {
	what := "a boolean"
	switch f.kind {
	case jString:
		what = "a string"
	case jNumber:
		what = "a number"
	}
	if f.typ == 0 {
		return fmt.Errorf("%w: property %q: unsupported value %s", ErrInvalidInput, f.name, what)
	}
	return fmt.Errorf("%w: property %q: %s is not a valid %s value", ErrInvalidInput, f.name, what, f.typ)
}

// convert turns one field into a Value. String payloads are written to sb;
// their position is recorded in f and filled in once sb is final.
func convert(f *jfield, sb *arena) (Value, error) {
	setStr := func(b []byte) {
		f.strOff, f.strLen, f.strVal = sb.Len(), len(b), true
		sb.Write(b)
	}
	switch f.typ {
	case 0:
		switch f.kind {
		case jString:
			setStr(f.val)
			return Value{Type: TypeString}, nil
		case jTrue, jFalse:
			return Value{Type: TypeBoolean, Bool: f.kind == jTrue}, nil
		case jNumber:
			if bytes.IndexAny(f.val, ".eE") < 0 {
				if i, ok := parseInt(f.val); ok && i >= math.MinInt32 && i <= math.MaxInt32 {
					return Value{Type: TypeInt32, Int: i}, nil
				}
			}
			x, ok := parseDouble(f.val)
			if !ok {
				return Value{}, fmt.Errorf("%w: property %q: %s is out of range for Edm.Double", ErrInvalidInput, f.name, f.val)
			}
			return Value{Type: TypeDouble, Float: x}, nil
		}
	case TypeString:
		if f.kind == jString {
			setStr(f.val)
			return Value{Type: TypeString}, nil
		}
	case TypeBoolean:
		switch {
		case f.kind == jTrue || f.kind == jString && string(f.val) == "true":
			return Value{Type: TypeBoolean, Bool: true}, nil
		case f.kind == jFalse || f.kind == jString && string(f.val) == "false":
			return Value{Type: TypeBoolean}, nil
		}
	case TypeInt32:
		if f.kind == jNumber || f.kind == jString {
			if i, ok := parseInt(f.val); ok && i >= math.MinInt32 && i <= math.MaxInt32 {
				return Value{Type: TypeInt32, Int: i}, nil
			}
		}
	case TypeInt64:
		if f.kind == jNumber || f.kind == jString {
			if i, ok := parseInt(f.val); ok {
				return Value{Type: TypeInt64, Int: i}, nil
			}
		}
	case TypeDouble:
		if f.kind == jNumber || f.kind == jString {
			if x, ok := doubleValue(f); ok {
				return Value{Type: TypeDouble, Float: x}, nil
			}
		}
	case TypeDateTime:
		if f.kind == jString {
			if t, ok := parseDateTime(f.val); ok {
				return Value{Type: TypeDateTime, Time: t}, nil
			}
		}
	case TypeGuid:
		if f.kind == jString {
			if g, ok := parseGuid(f.val); ok {
				var buf [36]byte
				setStr(appendGuid(buf[:0], g))
				return Value{Type: TypeGuid}, nil
			}
		}
	}
	return Value{}, mismatch(f)
}

func doubleValue(f *jfield) (float64, bool) {
	if f.kind == jString {
		switch string(f.val) {
		case "NaN":
			return math.NaN(), true
		case "Infinity", "INF":
			return math.Inf(1), true
		case "-Infinity", "-INF":
			return math.Inf(-1), true
		}
		if end, ok := scanNumber(f.val, 0); !ok || end != len(f.val) {
			return 0, false
		}
	}
	return parseDouble(f.val)
}

// parseDouble parses a JSON number literal. Overflow is an error, as in the
// service (a literal like 13e7705 is InvalidInput there); underflow reads
// as zero, as .NET does.
func parseDouble(b []byte) (float64, bool) {
	x, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !(errors.Is(err, strconv.ErrRange) && !math.IsInf(x, 0)) {
		return 0, false
	}
	return x, true
}

// parseInt parses an optionally signed decimal integer that fits an int64,
// without allocating.
func parseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	var n uint64
	for _, c := range b {
		d := uint64(c - '0')
		if d > 9 || n > (limit-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if neg {
		return -int64(n), true // n == 1<<63 wraps to MinInt64, as intended
	}
	return int64(n), true
}
