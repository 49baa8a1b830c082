package filter

import (
	"strconv"

	"tablestore/internal/edm"
)

// The key properties Bounds understands.
const (
	pkName = "PartitionKey"
	rkName = "RowKey"
)

// Bounds holds the key ranges a filter can match. The zero Bounds is
// unbounded, which is always a correct (if useless) answer.
type Bounds struct {
	// PK contains the PartitionKey of every matching entity.
	PK Interval
	// RK contains the RowKey of every matching entity, in every partition.
	RK Interval
}

// Empty reports whether the filter can match no entity at all, so the
// front-end can answer without asking any partition.
func (b Bounds) Empty() bool { return b.PK.Empty() || b.RK.Empty() }

// Interval is a range of key strings in ordinal (byte) order. A missing
// bound is open-ended; the zero Interval holds every string.
type Interval struct {
	Lower, Upper                   string
	HasLower, HasUpper             bool
	LowerInclusive, UpperInclusive bool
}

// Point returns the only key the interval holds, if it holds exactly one,
// so "PartitionKey eq 'x'" routes to a single partition.
func (iv Interval) Point() (string, bool) {
	if iv.HasLower && iv.HasUpper && iv.LowerInclusive && iv.UpperInclusive && iv.Lower == iv.Upper {
		return iv.Lower, true
	}
	return "", false
}

// Empty reports whether no key lies in the interval, which is how a
// contradictory filter ("PartitionKey eq 'a' and PartitionKey eq 'b'")
// shows up.
func (iv Interval) Empty() bool {
	if iv.HasUpper && iv.Upper == "" && !iv.UpperInclusive {
		return true // nothing sorts below ""
	}
	if !iv.HasLower || !iv.HasUpper {
		return false
	}
	switch {
	case iv.Lower > iv.Upper:
		return true
	case iv.Lower == iv.Upper:
		return !iv.LowerInclusive || !iv.UpperInclusive
	}
	// Lower+"\x00" is the successor of Lower: (x, x+"\x00") holds nothing.
	return !iv.LowerInclusive && !iv.UpperInclusive && iv.Upper == iv.Lower+"\x00"
}

// Contains reports whether key lies in the interval.
func (iv Interval) Contains(key string) bool {
	if iv.HasLower && (key < iv.Lower || (key == iv.Lower && !iv.LowerInclusive)) {
		return false
	}
	if iv.HasUpper && (key > iv.Upper || (key == iv.Upper && !iv.UpperInclusive)) {
		return false
	}
	return true
}

// String renders the interval in mathematical notation for logs and test
// failures: ['a', 'b'), (-inf, +inf), or "empty".
func (iv Interval) String() string {
	if iv.Empty() {
		return "empty"
	}
	s := "(-inf"
	if iv.HasLower {
		s = "(" + strconv.Quote(iv.Lower)
		if iv.LowerInclusive {
			s = "[" + s[1:]
		}
	}
	s += ", "
	if !iv.HasUpper {
		return s + "+inf)"
	}
	s += strconv.Quote(iv.Upper)
	if iv.UpperInclusive {
		return s + "]"
	}
	return s + ")"
}

// emptyInterval is the canonical empty interval: (−inf, "").
var emptyInterval = Interval{HasUpper: true}

var emptyBounds = Bounds{PK: emptyInterval, RK: emptyInterval}

// normalize drops the bound >= "" (it excludes nothing) and makes every
// empty interval the same value, so Bounds compare with ==.
func (iv Interval) normalize() Interval {
	if iv.Empty() {
		return emptyInterval
	}
	if iv.HasLower && iv.Lower == "" && iv.LowerInclusive {
		iv.HasLower, iv.Lower, iv.LowerInclusive = false, "", false
	}
	return iv
}

func intersect(a, b Interval) Interval {
	r := a
	if b.HasLower {
		switch {
		case !r.HasLower || b.Lower > r.Lower:
			r.HasLower, r.Lower, r.LowerInclusive = true, b.Lower, b.LowerInclusive
		case b.Lower == r.Lower:
			r.LowerInclusive = r.LowerInclusive && b.LowerInclusive
		}
	}
	if b.HasUpper {
		switch {
		case !r.HasUpper || b.Upper < r.Upper:
			r.HasUpper, r.Upper, r.UpperInclusive = true, b.Upper, b.UpperInclusive
		case b.Upper == r.Upper:
			r.UpperInclusive = r.UpperInclusive && b.UpperInclusive
		}
	}
	return r.normalize()
}

func hull(a, b Interval) Interval {
	switch {
	case a.Empty():
		return b
	case b.Empty():
		return a
	}
	var r Interval
	if a.HasLower && b.HasLower {
		r.HasLower = true
		switch {
		case a.Lower < b.Lower:
			r.Lower, r.LowerInclusive = a.Lower, a.LowerInclusive
		case b.Lower < a.Lower:
			r.Lower, r.LowerInclusive = b.Lower, b.LowerInclusive
		default:
			r.Lower, r.LowerInclusive = a.Lower, a.LowerInclusive || b.LowerInclusive
		}
	}
	if a.HasUpper && b.HasUpper {
		r.HasUpper = true
		switch {
		case a.Upper > b.Upper:
			r.Upper, r.UpperInclusive = a.Upper, a.UpperInclusive
		case b.Upper > a.Upper:
			r.Upper, r.UpperInclusive = b.Upper, b.UpperInclusive
		default:
			r.Upper, r.UpperInclusive = a.Upper, a.UpperInclusive || b.UpperInclusive
		}
	}
	return r.normalize()
}

func (b Bounds) and(c Bounds) Bounds {
	r := Bounds{PK: intersect(b.PK, c.PK), RK: intersect(b.RK, c.RK)}
	if r.Empty() {
		return emptyBounds
	}
	return r
}

func (b Bounds) or(c Bounds) Bounds {
	return Bounds{PK: hull(b.PK, c.PK), RK: hull(b.RK, c.RK)}
}

func constBounds(v bool) Bounds {
	if v {
		return Bounds{}
	}
	return emptyBounds
}

// bounds computes the key ranges of the node, or of its negation when neg
// is set; negation is pushed down to the leaves by De Morgan's laws.
func (n *node) bounds(neg bool) Bounds {
	switch n.kind {
	case kindConst:
		return constBounds(n.val != neg)
	case kindProp:
		if n.prop == pkName || n.prop == rkName {
			return constBounds(neg) // a String is never a true Boolean
		}
		return Bounds{}
	case kindNot:
		return n.kids[0].bounds(!neg)
	case kindAnd, kindOr:
		intersecting := (n.kind == kindAnd) != neg
		r := n.kids[0].bounds(neg)
		for _, k := range n.kids[1:] {
			if intersecting {
				r = r.and(k.bounds(neg))
			} else {
				r = r.or(k.bounds(neg))
			}
		}
		return r
	}
	// kindCmp
	if n.prop != pkName && n.prop != rkName {
		return Bounds{}
	}
	o := n.op
	if n.lit.Type != edm.TypeString {
		return constBounds(o.holds(mismatch) != neg)
	}
	if neg {
		o = o.negate()
	}
	var iv Interval
	v := n.lit.Str
	switch o {
	case opEq:
		iv = Interval{Lower: v, Upper: v, HasLower: true, HasUpper: true, LowerInclusive: true, UpperInclusive: true}
	case opNe:
		return Bounds{}
	case opLt:
		iv = Interval{Upper: v, HasUpper: true}
	case opLe:
		iv = Interval{Upper: v, HasUpper: true, UpperInclusive: true}
	case opGt:
		iv = Interval{Lower: v, HasLower: true}
	case opGe:
		iv = Interval{Lower: v, HasLower: true, LowerInclusive: true}
	}
	iv = iv.normalize()
	if iv.Empty() {
		return emptyBounds
	}
	if n.prop == pkName {
		return Bounds{PK: iv}
	}
	return Bounds{RK: iv}
}
