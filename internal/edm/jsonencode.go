package edm

import (
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Metadata is the OData JSON metadata level a client asked for, with
// Accept or $format ("application/json;odata=minimalmetadata" etc.).
type Metadata uint8

// The metadata levels. MinimalMetadata is the zero value because it is what
// every Azure SDK asks for and what a bare "application/json" gets.
const (
	MinimalMetadata Metadata = iota
	NoMetadata
	FullMetadata
)

// EncodeOptions says how AppendJSON writes an entity.
type EncodeOptions struct {
	Metadata Metadata
	Table    string // table name, for odata.metadata, odata.type, odata.id, odata.editLink
	Account  string // account name, for odata.type ("account.table")
	BaseURL  string // service root without a trailing slash, e.g. http://127.0.0.1:10002/devstoreaccount1
	// Element marks a single-entity response (Get, Insert with content),
	// which carries its own "odata.metadata": "<base>/$metadata#tbl/@Element".
	// Entities inside a query's "value" array do not.
	Element bool
	// Select is the $select list; nil means everything. PartitionKey, RowKey
	// and Timestamp are written only if listed (or "*" is), as Azure does;
	// odata.etag and the other metadata are written regardless. A selected
	// property the entity lacks is written as null, after the others. It
	// must hold no name twice (the front-end's parseSelect drops repeats).
	Select []string
}

// AppendJSON appends e as one OData v3 JSON object in the shape Azure
// returns at the chosen metadata level, recorded from the service:
//
//   - minimal: odata.metadata (Element only), odata.etag, PartitionKey,
//     RowKey, Timestamp, then the user properties; values whose type a
//     client cannot infer from the JSON (Int64, DateTime, Guid, Binary,
//     NaN/±Inf doubles) are preceded by "Name@odata.type". Int64 travels as
//     a string. Finite doubles are not annotated: like the service, they are
//     always written with a '.' or an exponent ("2.0", "1E+15"), which is
//     how clients tell them from Int32 (the Go SDK even drops a value it
//     sees annotated "Edm.Double").
//   - full: also odata.type, odata.id and odata.editLink, and the
//     "Timestamp@odata.type" annotation; user properties are annotated as in
//     minimal (the service's full-metadata responses leave Int32, Double,
//     Boolean and String bare too).
//   - none: no odata.* names and no annotations; values are written as in
//     minimal (Int64 still a string).
//
// User properties follow the system ones in ascending name order (byte
// order), so responses are stable whatever order the entity was written in.
// Annotations precede their values, as in the service's responses.
func AppendJSON(dst []byte, e *Entity, opts EncodeOptions) []byte {
	w := jsonWriter{b: dst}
	w.b = append(w.b, '{')
	meta := opts.Metadata == MinimalMetadata || opts.Metadata == FullMetadata
	full := opts.Metadata == FullMetadata
	all := selectsAll(opts.Select)

	if meta && opts.Element {
		w.key("odata.metadata")
		w.b = append(w.b, '"')
		w.b = appendJSONStringBody(w.b, opts.BaseURL)
		w.b = append(w.b, "/$metadata#"...)
		w.b = appendJSONStringBody(w.b, opts.Table)
		w.b = append(w.b, `/@Element"`...)
	}
	if full {
		w.key("odata.type")
		w.b = append(w.b, '"')
		w.b = appendJSONStringBody(w.b, opts.Account)
		w.b = append(w.b, '.')
		w.b = appendJSONStringBody(w.b, opts.Table)
		w.b = append(w.b, '"')
		w.key("odata.id")
		w.b = append(w.b, '"')
		w.b = appendJSONStringBody(w.b, opts.BaseURL)
		w.b = append(w.b, '/')
		w.b = appendEditLink(w.b, opts.Table, e)
		w.b = append(w.b, '"')
	}
	if meta && !e.Timestamp.IsZero() {
		w.key("odata.etag")
		w.b = append(w.b, `"W/\"datetime'`...)
		var buf [32]byte
		for _, c := range AppendTimestamp(buf[:0], e.Timestamp) {
			if c == ':' {
				w.b = append(w.b, "%3A"...)
			} else {
				w.b = append(w.b, c)
			}
		}
		w.b = append(w.b, `'\""`...)
	}
	if full {
		w.key("odata.editLink")
		w.b = append(w.b, '"')
		w.b = appendEditLink(w.b, opts.Table, e)
		w.b = append(w.b, '"')
	}
	if all || slices.Contains(opts.Select, "PartitionKey") {
		w.key("PartitionKey")
		w.b = appendJSONString(w.b, e.PartitionKey)
	}
	if all || slices.Contains(opts.Select, "RowKey") {
		w.key("RowKey")
		w.b = appendJSONString(w.b, e.RowKey)
	}
	if !e.Timestamp.IsZero() && (all || slices.Contains(opts.Select, "Timestamp")) {
		if full {
			w.key("Timestamp@odata.type")
			w.b = append(w.b, `"Edm.DateTime"`...)
		}
		w.key("Timestamp")
		w.b = append(w.b, '"')
		w.b = AppendTimestamp(w.b, e.Timestamp)
		w.b = append(w.b, '"')
	}

	if isSortedProps(e.Properties) {
		for i := range e.Properties {
			w.property(&e.Properties[i], meta, all, opts.Select)
		}
	} else {
		order := make([]int, len(e.Properties))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			return strings.Compare(e.Properties[a].Name, e.Properties[b].Name)
		})
		for _, i := range order {
			w.property(&e.Properties[i], meta, all, opts.Select)
		}
	}
	if !all {
		w.missingSelected(e, opts.Select)
	}
	return append(w.b, '}')
}

// missingSelected writes "Name":null for each selected property e lacks,
// in $select order, once each: the service answers a projection naming an
// absent property with a null value ("Query Entities" in the REST
// reference: "the missing property is marked with a null attribute";
// CloudStub's service-run
// Query_WhenUsingSelectColumns_ReturnsEntitiesWithSpecifiedColumns, Azurite
// issue #2535), and the SDKs read it as a property holding null. The system
// properties always exist, and a name that cannot be a property's
// (odata.etag, "a b") is not invented: none of those is added.
func (w *jsonWriter) missingSelected(e *Entity, sel []string) {
	for _, name := range sel {
		switch {
		case name == "PartitionKey" || name == "RowKey" || name == "Timestamp",
			ValidatePropertyName(name) != nil,
			slices.ContainsFunc(e.Properties, func(p Property) bool { return p.Name == name }):
			continue
		}
		w.quotedKey(name)
		w.b = append(w.b, "null"...)
	}
}

type jsonWriter struct {
	b []byte
	n int
}

func (w *jsonWriter) key(k string) {
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.n++
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

// quotedKey writes a key that may need JSON escaping (a name from the request).
func (w *jsonWriter) quotedKey(k string) {
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.n++
	w.b = appendJSONString(w.b, k)
	w.b = append(w.b, ':')
}

func (w *jsonWriter) property(p *Property, meta, all bool, sel []string) {
	if !all && !slices.Contains(sel, p.Name) {
		return
	}
	v := &p.Value
	if meta && needsAnnotation(v) {
		if w.n > 0 {
			w.b = append(w.b, ',')
		}
		w.n++
		w.b = append(w.b, '"')
		w.b = appendJSONStringBody(w.b, p.Name)
		w.b = append(w.b, `@odata.type":"`...)
		w.b = append(w.b, v.Type.String()...)
		w.b = append(w.b, '"')
	}
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.n++
	w.b = appendJSONString(w.b, p.Name)
	w.b = append(w.b, ':')
	w.b = appendValue(w.b, v)
}

// needsAnnotation reports whether a client could not infer the value's type
// from its JSON form alone: strings, true/false, integers and numbers with
// a '.' or exponent are read back as String, Boolean, Int32 and Double.
func needsAnnotation(v *Value) bool {
	switch v.Type {
	case TypeInt64, TypeDateTime, TypeGuid, TypeBinary:
		return true
	case TypeDouble:
		return math.IsNaN(v.Float) || math.IsInf(v.Float, 0)
	}
	return false
}

func appendValue(dst []byte, v *Value) []byte {
	switch v.Type {
	case TypeString, TypeGuid:
		return appendJSONString(dst, v.Str)
	case TypeBinary:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.Bin)
		return append(dst, '"')
	case TypeBoolean:
		return strconv.AppendBool(dst, v.Bool)
	case TypeDateTime:
		dst = append(dst, '"')
		dst = AppendTimestamp(dst, v.Time)
		return append(dst, '"')
	case TypeDouble:
		switch {
		case math.IsNaN(v.Float):
			return append(dst, `"NaN"`...)
		case math.IsInf(v.Float, 1):
			return append(dst, `"Infinity"`...)
		case math.IsInf(v.Float, -1):
			return append(dst, `"-Infinity"`...)
		}
		return appendDouble(dst, v.Float)
	case TypeInt32:
		return strconv.AppendInt(dst, v.Int, 10)
	case TypeInt64:
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, v.Int, 10)
		return append(dst, '"')
	}
	return append(dst, "null"...) // an invalid Value; keep the document well-formed
}

// appendDouble writes a finite double the way the service's OData writer
// does (.NET round-trip formatting): the shortest digits that read back to
// the same double, fixed notation for decimal exponents -4..14, otherwise
// d.dddE+XX with at least two exponent digits, and ".0" appended to a whole
// number so that it still reads as a Double, not an Int32.
func appendDouble(dst []byte, f float64) []byte {
	var buf [32]byte
	s := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // [-]d[.ddd]e±dd
	if s[0] == '-' {
		dst = append(dst, '-')
		s = s[1:]
	}
	e := 0
	for i := range s {
		if s[i] == 'e' {
			neg := s[i+1] == '-'
			for _, c := range s[i+2:] {
				e = e*10 + int(c-'0')
			}
			if neg {
				e = -e
			}
			s = s[:i]
			break
		}
	}
	var digits [24]byte
	nd := 0
	for _, c := range s {
		if c != '.' {
			digits[nd] = c
			nd++
		}
	}
	d := digits[:nd]
	switch {
	case e >= 15 || e < -4:
		dst = append(dst, d[0])
		if nd > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'E')
		if e < 0 {
			dst = append(dst, '-')
			e = -e
		} else {
			dst = append(dst, '+')
		}
		if e < 10 {
			dst = append(dst, '0')
		}
		return strconv.AppendInt(dst, int64(e), 10)
	case e < 0:
		dst = append(dst, '0', '.')
		for i := 0; i < -e-1; i++ {
			dst = append(dst, '0')
		}
		return append(dst, d...)
	default:
		if nd <= e+1 {
			dst = append(dst, d...)
			for i := nd; i < e+1; i++ {
				dst = append(dst, '0')
			}
			return append(dst, '.', '0')
		}
		dst = append(dst, d[:e+1]...)
		dst = append(dst, '.')
		return append(dst, d[e+1:]...)
	}
}

// appendEditLink writes tbl(PartitionKey='..',RowKey='..') with the keys
// quoted as OData literals (single quotes doubled) and then percent-encoded
// like .NET's Uri.EscapeDataString, which is how the service and the SDKs
// put keys in entity URLs.
func appendEditLink(dst []byte, table string, e *Entity) []byte {
	dst = appendJSONStringBody(dst, table)
	dst = append(dst, "(PartitionKey='"...)
	dst = appendKeyLiteral(dst, e.PartitionKey)
	dst = append(dst, "',RowKey='"...)
	dst = appendKeyLiteral(dst, e.RowKey)
	return append(dst, "')"...)
}

const upperHex = "0123456789ABCDEF"

func appendKeyLiteral(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~':
			dst = append(dst, c)
		case c == '\'':
			dst = append(dst, "%27%27"...)
		default:
			dst = append(dst, '%', upperHex[c>>4], upperHex[c&15])
		}
	}
	return dst
}

// AppendJSONString appends s as a JSON string (invalid UTF-8 becomes
// U+FFFD); the front-end writes its other JSON documents with it too.
func AppendJSONString(dst []byte, s string) []byte { return appendJSONString(dst, s) }

func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONStringBody(dst, s)
	return append(dst, '"')
}

// appendJSONStringBody escapes what JSON requires and nothing else
// (non-ASCII stays UTF-8, which every client reads); invalid UTF-8, which
// only an entity built in code can contain, becomes U+FFFD so the response
// is always valid JSON.
func appendJSONStringBody(dst []byte, s string) []byte {
	start := 0
	for i := plainEnd(s, 0); i < len(s); i = plainEnd(s, i) {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		}
		i++
		start = i
	}
	return append(dst, s[start:]...)
}
