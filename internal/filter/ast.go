package filter

import (
	"bytes"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"time"

	"tablestore/internal/edm"
)

// op is a comparison operator.
type op uint8

const (
	opEq op = iota
	opNe
	opLt
	opLe
	opGt
	opGe
)

var opNames = [...]string{opEq: "eq", opNe: "ne", opLt: "lt", opLe: "le", opGt: "gt", opGe: "ge"}

func (o op) String() string { return opNames[o] }

// swap gives the operator for reversed operands: 'x' lt P is P gt 'x'.
func (o op) swap() op {
	switch o {
	case opLt:
		return opGt
	case opLe:
		return opGe
	case opGt:
		return opLt
	case opGe:
		return opLe
	}
	return o
}

// negate gives the operator of the negated comparison, valid only when the
// property exists with the literal's type (used for the key bounds).
func (o op) negate() op {
	switch o {
	case opEq:
		return opNe
	case opNe:
		return opEq
	case opLt:
		return opGe
	case opLe:
		return opGt
	case opGt:
		return opLe
	}
	return opLt
}

// Results of compare; mismatch means the types are not comparable.
const (
	less     = -1
	equal    = 0
	greater  = 1
	mismatch = 2
)

// holds applies the operator to a compare result. The mismatch row is the
// service's observed behaviour (see the package documentation).
func (o op) holds(c int) bool {
	if c == mismatch {
		return o == opNe || o == opLt || o == opLe
	}
	switch o {
	case opEq:
		return c == equal
	case opNe:
		return c != equal
	case opLt:
		return c == less
	case opLe:
		return c != greater
	case opGt:
		return c == greater
	}
	return c != less
}

type kind uint8

const (
	kindCmp   kind = iota // prop op lit
	kindProp              // bare Boolean property
	kindConst             // true or false
	kindAnd
	kindOr
	kindNot
)

// literal is a comparison constant converted once at parse time.
type literal struct {
	edm.Value
	guid [16]byte // TypeGuid: the parsed bytes, so matching never re-parses it
	// num is the literal as a Double for Int32/Int64 literals, so a
	// comparison with a Double property does not convert per entity.
	num float64
}

type node struct {
	kind  kind
	op    op
	val   bool   // kindConst
	prop  string // kindCmp, kindProp
	lit   literal
	kids  []*node // kindAnd, kindOr: two or more; kindNot: one
	depth int     // nesting of and/or/not below and including this node
}

func (n *node) eval(g Getter) bool {
	switch n.kind {
	case kindCmp:
		v, ok := g.Get(n.prop)
		if !ok {
			return false
		}
		return n.op.holds(compare(&v, &n.lit))
	case kindProp:
		v, ok := g.Get(n.prop)
		return ok && v.Type == edm.TypeBoolean && v.Bool
	case kindConst:
		return n.val
	case kindAnd:
		for _, k := range n.kids {
			if !k.eval(g) {
				return false
			}
		}
		return true
	case kindOr:
		for _, k := range n.kids {
			if k.eval(g) {
				return true
			}
		}
		return false
	case kindNot:
		return !n.kids[0].eval(g)
	}
	return false
}

// compare orders the property value against the literal, or reports a
// mismatch when Azure would not compare the two types.
func compare(v *edm.Value, l *literal) int {
	switch l.Type {
	case edm.TypeString:
		if v.Type == edm.TypeString {
			return strings.Compare(v.Str, l.Str)
		}
	case edm.TypeInt32:
		switch v.Type {
		case edm.TypeInt32, edm.TypeInt64:
			return cmpInt(v.Int, l.Int)
		case edm.TypeDouble:
			return cmpFloat(v.Float, l.num)
		}
	case edm.TypeInt64:
		switch v.Type {
		case edm.TypeInt64:
			return cmpInt(v.Int, l.Int)
		case edm.TypeDouble:
			return cmpFloat(v.Float, l.num)
		}
	case edm.TypeDouble:
		if v.Type == edm.TypeDouble {
			return cmpFloat(v.Float, l.Float)
		}
	case edm.TypeBoolean:
		if v.Type == edm.TypeBoolean {
			return cmpBool(v.Bool, l.Bool)
		}
	case edm.TypeDateTime:
		if v.Type == edm.TypeDateTime {
			return v.Time.Compare(l.Time)
		}
	case edm.TypeGuid:
		if v.Type == edm.TypeGuid {
			g, ok := parseGUID(v.Str)
			if !ok {
				return mismatch
			}
			return bytes.Compare(g[:], l.guid[:])
		}
	case edm.TypeBinary:
		if v.Type == edm.TypeBinary {
			return bytes.Compare(v.Bin, l.Bin)
		}
	}
	return mismatch
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return less
	case a > b:
		return greater
	}
	return equal
}

// cmpFloat orders like .NET Double.CompareTo: NaN is below every number and
// equal to itself, which keeps not (x lt y) equivalent to x ge y.
func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return less
	case a > b:
		return greater
	case a == b:
		return equal
	}
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn:
		return equal
	case an:
		return less
	}
	return greater
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return equal
	case b:
		return less
	}
	return greater
}

// String renders the canonical form documented on Filter.String.
func (n *node) String() string {
	var b strings.Builder
	n.write(&b)
	return b.String()
}

func (n *node) write(b *strings.Builder) {
	switch n.kind {
	case kindCmp:
		b.WriteString(n.prop)
		b.WriteByte(' ')
		b.WriteString(n.op.String())
		b.WriteByte(' ')
		n.lit.write(b)
	case kindProp:
		b.WriteString(n.prop)
	case kindConst:
		b.WriteString(strconv.FormatBool(n.val))
	case kindAnd, kindOr:
		sep := " and "
		if n.kind == kindOr {
			sep = " or "
		}
		for i, k := range n.kids {
			if i > 0 {
				b.WriteString(sep)
			}
			writeGrouped(b, k, k.kind == kindAnd || k.kind == kindOr)
		}
	case kindNot:
		k := n.kids[0]
		b.WriteString("not ")
		writeGrouped(b, k, k.kind != kindProp && k.kind != kindConst)
	}
}

func writeGrouped(b *strings.Builder, n *node, group bool) {
	if group {
		b.WriteByte('(')
	}
	n.write(b)
	if group {
		b.WriteByte(')')
	}
}

func (l *literal) write(b *strings.Builder) {
	switch l.Type {
	case edm.TypeString:
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(l.Str, "'", "''"))
		b.WriteByte('\'')
	case edm.TypeInt32:
		b.WriteString(strconv.FormatInt(l.Int, 10))
	case edm.TypeInt64:
		b.WriteString(strconv.FormatInt(l.Int, 10))
		b.WriteByte('L')
	case edm.TypeDouble:
		b.WriteString(formatDouble(l.Float))
	case edm.TypeBoolean:
		b.WriteString(strconv.FormatBool(l.Bool))
	case edm.TypeDateTime:
		b.WriteString("datetime'")
		b.WriteString(l.Time.UTC().Format("2006-01-02T15:04:05.9999999Z07:00"))
		b.WriteByte('\'')
	case edm.TypeGuid:
		b.WriteString("guid'")
		b.WriteString(formatGUID(l.guid))
		b.WriteByte('\'')
	case edm.TypeBinary:
		b.WriteString("X'")
		b.WriteString(strings.ToUpper(hex.EncodeToString(l.Bin)))
		b.WriteByte('\'')
	}
}

// formatDouble spells a Double so that it lexes back as a Double.
func formatDouble(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "INF"
	case math.IsInf(f, -1):
		return "-INF"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

func formatGUID(g [16]byte) string {
	var buf [36]byte
	hex.Encode(buf[0:8], g[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], g[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], g[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], g[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:36], g[10:16])
	return string(buf[:])
}

// parseGUID reads a Guid literal the way entity values are read (edm).
func parseGUID(s string) ([16]byte, bool) { return edm.GuidBytes(s) }

// parseDateTime reads yyyy-mm-ddThh:mm[:ss[.f…]][Z|±hh:mm]. A missing zone
// means UTC; digits past the seventh fraction digit (100 ns) are dropped.
func parseDateTime(s string) (time.Time, bool) {
	t, err := edm.ParseDateTime(s)
	return t, err == nil
}
