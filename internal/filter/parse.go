package filter

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"tablestore/internal/edm"
)

// maxNesting bounds the parser's recursion (parentheses plus not). It is
// larger than MaxDepth because redundant parentheses add nesting but no
// depth, and the canonical form may spend up to two levels per depth.
const maxNesting = 4 * MaxDepth

type tokKind uint8

const (
	tokEOF tokKind = iota
	tokLParen
	tokRParen
	tokIdent
	tokKeyword
	tokLiteral
)

type keyword uint8

const (
	kwAnd keyword = iota
	kwOr
	kwNot
	kwEq
	kwNe
	kwLt
	kwLe
	kwGt
	kwGe
	kwArith // add sub mul div mod
	kwNull
)

var keywords = map[string]keyword{
	"and": kwAnd, "or": kwOr, "not": kwNot,
	"eq": kwEq, "ne": kwNe, "lt": kwLt, "le": kwLe, "gt": kwGt, "ge": kwGe,
	"add": kwArith, "sub": kwArith, "mul": kwArith, "div": kwArith, "mod": kwArith,
	"null": kwNull,
}

var kwOps = map[keyword]op{kwEq: opEq, kwNe: opNe, kwLt: opLt, kwLe: opLe, kwGt: opGt, kwGe: opGe}

type token struct {
	kind     tokKind
	kw       keyword
	pos, end int
	text     string // tokIdent: the name
	lit      literal
}

type parser struct {
	src         string
	pos         int
	tok         token
	comparisons int
}

func wrapf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

func errAt(sentinel error, pos int, format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", sentinel, pos, fmt.Sprintf(format, args...))
}

// describe names the current token for error messages.
func (p *parser) describe() string {
	if p.tok.kind == tokEOF {
		return "the end of the filter"
	}
	s := p.src[p.tok.pos:p.tok.end]
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return strconv.Quote(s)
}

func (p *parser) unexpected(want string) error {
	hint := ""
	if p.tok.kind == tokIdent {
		if _, ok := keywords[strings.ToLower(p.tok.text)]; ok {
			hint = " (operators and keywords are lower-case)"
		}
	}
	return errAt(ErrSyntax, p.tok.pos, "expected %s, found %s%s", want, p.describe(), hint)
}

func (p *parser) isKeyword(kw keyword) bool {
	return p.tok.kind == tokKeyword && p.tok.kw == kw
}

func (p *parser) isComparison() bool {
	return p.tok.kind == tokKeyword && p.tok.kw >= kwEq && p.tok.kw <= kwGe
}

// mk finishes a node, enforcing MaxDepth.
func (p *parser) mk(n *node, pos int) (*node, error) {
	n.depth = 0
	for _, k := range n.kids {
		n.depth = max(n.depth, k.depth+1)
	}
	if n.depth > MaxDepth {
		return nil, errAt(ErrSyntax, pos, "expression nested more than %d levels deep", MaxDepth)
	}
	return n, nil
}

func (p *parser) parseOr(nest int) (*node, error) {
	left, err := p.parseAnd(nest)
	if err != nil {
		return nil, err
	}
	for p.isKeyword(kwOr) {
		pos := p.tok.pos
		if err := p.advance(); err != nil {
			return nil, err
		}
		right, err := p.parseAnd(nest)
		if err != nil {
			return nil, err
		}
		if left, err = p.mk(join(kindOr, left, right), pos); err != nil {
			return nil, err
		}
	}
	return left, nil
}

func (p *parser) parseAnd(nest int) (*node, error) {
	left, err := p.parseNot(nest)
	if err != nil {
		return nil, err
	}
	for p.isKeyword(kwAnd) {
		pos := p.tok.pos
		if err := p.advance(); err != nil {
			return nil, err
		}
		right, err := p.parseNot(nest)
		if err != nil {
			return nil, err
		}
		if left, err = p.mk(join(kindAnd, left, right), pos); err != nil {
			return nil, err
		}
	}
	return left, nil
}

// join builds an n-ary and/or, flattening nested nodes of the same kind so
// that the canonical form does not depend on how the input grouped them.
func join(k kind, a, b *node) *node {
	var kids []*node
	if a.kind == k {
		kids = a.kids
	} else {
		kids = []*node{a}
	}
	if b.kind == k {
		kids = append(kids, b.kids...)
	} else {
		kids = append(kids, b)
	}
	return &node{kind: k, kids: kids}
}

func (p *parser) parseNot(nest int) (*node, error) {
	if !p.isKeyword(kwNot) {
		return p.parsePrimary(nest)
	}
	pos := p.tok.pos
	if nest >= maxNesting {
		return nil, errAt(ErrSyntax, pos, "expression nested more than %d levels deep", maxNesting)
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	child, err := p.parseNot(nest + 1)
	if err != nil {
		return nil, err
	}
	return p.mk(&node{kind: kindNot, kids: []*node{child}}, pos)
}

func (p *parser) parsePrimary(nest int) (*node, error) {
	switch p.tok.kind {
	case tokLParen:
		open := p.tok.pos
		if nest >= maxNesting {
			return nil, errAt(ErrSyntax, open, "expression nested more than %d levels deep", maxNesting)
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		n, err := p.parseOr(nest + 1)
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tokRParen {
			return nil, p.unexpected(fmt.Sprintf("and, or or ')' closing the '(' at offset %d", open))
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		if p.isComparison() {
			return nil, errAt(ErrSyntax, p.tok.pos, "a parenthesized expression cannot be compared; compare a property with a literal")
		}
		return n, nil
	case tokIdent, tokLiteral:
		return p.parseCondition()
	case tokKeyword:
		if p.tok.kw == kwNull {
			return nil, errNull(p.tok.pos)
		}
	}
	return nil, p.unexpected("a property name, a literal, not or '('")
}

func errNull(pos int) error {
	return errAt(ErrSyntax, pos, "null is not supported: Azure Table has no null values; a missing property never matches a comparison")
}

// parseCondition parses "operand [cmpop operand]" starting at the current
// token, which is a property name or a literal.
func (p *parser) parseCondition() (*node, error) {
	left := p.tok
	if err := p.advance(); err != nil {
		return nil, err
	}
	if err := p.checkAfterOperand(left); err != nil {
		return nil, err
	}
	if !p.isComparison() {
		switch {
		case left.kind == tokIdent:
			p.comparisons++
			return &node{kind: kindProp, prop: left.text}, nil
		case left.lit.Type == edm.TypeBoolean:
			return &node{kind: kindConst, val: left.lit.Bool}, nil
		}
		if p.tok.kind == tokEOF || p.tok.kind == tokRParen || p.isKeyword(kwAnd) || p.isKeyword(kwOr) {
			return nil, errAt(ErrSyntax, left.pos, "a literal that is not true or false cannot be a condition; compare it with a property")
		}
		return nil, p.unexpected("a comparison operator (eq, ne, gt, ge, lt, le)")
	}
	o := kwOps[p.tok.kw]
	if err := p.advance(); err != nil {
		return nil, err
	}
	right := p.tok
	switch right.kind {
	case tokIdent, tokLiteral:
	case tokKeyword:
		if right.kw == kwNull {
			return nil, errNull(right.pos)
		}
		return nil, p.unexpected("a property name or a literal")
	default:
		return nil, p.unexpected("a property name or a literal")
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	if err := p.checkAfterOperand(right); err != nil {
		return nil, err
	}
	var n *node
	switch {
	case left.kind == tokIdent && right.kind == tokLiteral:
		n = &node{kind: kindCmp, prop: left.text, op: o, lit: right.lit}
	case left.kind == tokLiteral && right.kind == tokIdent:
		n = &node{kind: kindCmp, prop: right.text, op: o.swap(), lit: left.lit}
	case left.kind == tokIdent:
		return nil, errAt(ErrUnsupported, left.pos, "comparing two properties (%s %s %s) is not supported; one side must be a literal", left.text, o, right.text)
	default:
		return nil, errAt(ErrUnsupported, left.pos, "comparing two literals is not supported; one side must be a property")
	}
	p.comparisons++
	if p.isComparison() {
		return nil, errAt(ErrSyntax, p.tok.pos, "comparisons cannot be chained; join them with and/or")
	}
	return n, nil
}

// checkAfterOperand rejects the OData constructs Azure Table does not
// implement that show up right after an operand: a function call and an
// arithmetic operator.
func (p *parser) checkAfterOperand(operand token) error {
	if operand.kind == tokIdent && p.tok.kind == tokLParen {
		return errAt(ErrUnsupported, operand.pos, "function %s() is not supported by Azure Table", operand.text)
	}
	if operand.kind == tokIdent && p.tok.kind == tokLiteral && p.src[p.tok.pos] == '\'' {
		switch strings.ToLower(operand.text) {
		case "datetime", "guid", "binary", "x":
			return errAt(ErrSyntax, p.tok.pos, "no space may separate %s from its quoted value", operand.text)
		}
	}
	if p.isKeyword(kwArith) {
		return errAt(ErrUnsupported, p.tok.pos, "arithmetic operator %s is not supported by Azure Table", p.src[p.tok.pos:p.tok.end])
	}
	return nil
}

// advance scans the next token into p.tok.
func (p *parser) advance() error {
	s := p.src
	for p.pos < len(s) {
		r, w := utf8.DecodeRuneInString(s[p.pos:])
		if !unicode.IsSpace(r) {
			break
		}
		p.pos += w
	}
	start := p.pos
	p.tok = token{pos: start, end: start}
	if start == len(s) {
		p.tok.kind = tokEOF
		return nil
	}
	c := s[start]
	var err error
	switch {
	case c == '(':
		p.tok.kind, p.pos = tokLParen, start+1
	case c == ')':
		p.tok.kind, p.pos = tokRParen, start+1
	case c == '\'':
		var str string
		if str, p.pos, err = scanQuoted(s, start); err != nil {
			return err
		}
		p.tok.kind = tokLiteral
		p.tok.lit.Type, p.tok.lit.Str = edm.TypeString, str
	case isDigit(c) || (c == '-' && start+1 < len(s) && isDigit(s[start+1])):
		err = p.scanNumber()
	case c == '-' && strings.HasPrefix(s[start+1:], "INF") && !isIdentAt(s, start+4):
		p.tok.kind, p.pos = tokLiteral, start+4
		p.tok.lit.Type, p.tok.lit.Float = edm.TypeDouble, math.Inf(-1)
	case c == '-':
		return errAt(ErrUnsupported, start, "arithmetic negation is not supported by Azure Table; write the sign into a numeric literal")
	case c == '/':
		return errAt(ErrUnsupported, start, "member access (/) is not supported by Azure Table")
	default:
		if r, _ := utf8.DecodeRuneInString(s[start:]); r == '_' || unicode.IsLetter(r) {
			err = p.scanWord()
		} else {
			return errAt(ErrSyntax, start, "unexpected character %q", r)
		}
	}
	p.tok.end = p.pos
	return err
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isIdentAt reports whether an identifier character starts at s[i].
func isIdentAt(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// scanQuoted reads the quoted text whose opening quote is s[start], with a
// doubled quote standing for one, returning the text and the offset after
// the closing quote.
func scanQuoted(s string, start int) (string, int, error) {
	var b strings.Builder
	i := start + 1
	for {
		j := strings.IndexByte(s[i:], '\'')
		if j < 0 {
			return "", 0, errAt(ErrSyntax, start, "unterminated quoted literal")
		}
		j += i
		if j+1 < len(s) && s[j+1] == '\'' {
			b.WriteString(s[i : j+1])
			i = j + 2
			continue
		}
		if b.Len() == 0 {
			return s[start+1 : j], j + 1, nil
		}
		b.WriteString(s[i:j])
		return b.String(), j + 1, nil
	}
}

// scanWord reads an identifier, keyword, true/false, INF/NaN or a
// prefixed literal such as datetime'…'.
func (p *parser) scanWord() error {
	s, start := p.src, p.pos
	i := start
	for isIdentAt(s, i) {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	word := s[start:i]
	p.pos = i
	if kw, ok := keywords[word]; ok {
		p.tok.kind, p.tok.kw = tokKeyword, kw // "eq'x'" is eq then 'x'
		return nil
	}
	// The service reads boolean literals case-insensitively (eq True,
	// eq FALSE), so a property named like one cannot be compared by name.
	isTrue, isFalse := strings.EqualFold(word, "true"), strings.EqualFold(word, "false")
	if i < len(s) && s[i] == '\'' && !isTrue && !isFalse && word != "INF" && word != "NaN" {
		return p.scanPrefixed(word)
	}
	switch {
	case isTrue || isFalse:
		p.tok.kind = tokLiteral
		p.tok.lit.Type, p.tok.lit.Bool = edm.TypeBoolean, isTrue
	case word == "INF" || word == "NaN":
		p.tok.kind = tokLiteral
		p.tok.lit.Type, p.tok.lit.Float = edm.TypeDouble, math.Inf(1)
		if word == "NaN" {
			p.tok.lit.Float = math.NaN()
		}
	default:
		p.tok.kind, p.tok.text = tokIdent, word
	}
	return nil
}

// scanPrefixed reads prefix'…' after the prefix word.
func (p *parser) scanPrefixed(prefix string) error {
	start := p.pos - len(prefix)
	text, end, err := scanQuoted(p.src, p.pos)
	if err != nil {
		return err
	}
	p.pos = end
	p.tok.kind = tokLiteral
	l := &p.tok.lit
	switch strings.ToLower(prefix) {
	case "datetime":
		t, ok := parseDateTime(text)
		if !ok {
			return errAt(ErrSyntax, start, "invalid datetime literal %q: want yyyy-mm-ddThh:mm[:ss[.fffffff]][Z|±hh:mm] within years 0001-9999", text)
		}
		l.Type, l.Time = edm.TypeDateTime, t
	case "guid":
		g, ok := parseGUID(text)
		if !ok {
			return errAt(ErrSyntax, start, "invalid guid literal %q: want 8-4-4-4-12 hex digits", text)
		}
		l.Type, l.guid, l.Str = edm.TypeGuid, g, formatGUID(g)
	case "x", "binary":
		b, err := hex.DecodeString(text)
		if err != nil {
			return errAt(ErrSyntax, start, "invalid binary literal %q: want an even number of hex digits", text)
		}
		l.Type, l.Bin = edm.TypeBinary, b
	case "datetimeoffset", "time", "duration", "geography", "geometry":
		return errAt(ErrUnsupported, start, "%s literals are not supported by Azure Table", prefix)
	default:
		return errAt(ErrSyntax, start, "unknown literal prefix %q (want datetime, guid, binary or X)", prefix)
	}
	return nil
}

// scanNumber reads an Int32, Int64 (L suffix) or Double (fraction,
// exponent or D suffix) literal, optionally negative.
func (p *parser) scanNumber() error {
	s, start := p.src, p.pos
	i := start
	if s[i] == '-' {
		i++
	}
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	double := false
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return errAt(ErrSyntax, start, "malformed number: digits must follow the decimal point")
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		double = true
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && isDigit(s[j]) {
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			i, double = j, true
		}
	}
	digits := s[start:i]
	suffix := byte(0)
	if i < len(s) {
		switch s[i] {
		case 'L', 'l', 'D', 'd', 'M', 'm', 'F', 'f':
			suffix = s[i] | 0x20
			i++
		}
	}
	p.pos = i
	if isIdentAt(s, i) || (i < len(s) && s[i] == '.') {
		return errAt(ErrSyntax, start, "malformed number %q", s[start:min(i+1, len(s))])
	}
	l := &p.tok.lit
	p.tok.kind = tokLiteral
	switch {
	case suffix == 'm' || suffix == 'f':
		return errAt(ErrUnsupported, start, "Edm.Decimal and Edm.Single literals are not supported by Azure Table; use a Double")
	case suffix == 'l' && double:
		return errAt(ErrSyntax, start, "malformed Int64 literal %q", s[start:i])
	case suffix == 'l':
		v, err := strconv.ParseInt(digits, 10, 64)
		if err != nil {
			return errAt(ErrSyntax, start, "Int64 literal %q out of range", s[start:i])
		}
		l.Type, l.Int, l.num = edm.TypeInt64, v, float64(v)
	case suffix == 'd' || double:
		v, err := strconv.ParseFloat(digits, 64)
		if err != nil && !(errors.Is(err, strconv.ErrRange) && !math.IsInf(v, 0)) {
			return errAt(ErrSyntax, start, "Double literal %q out of range", s[start:i])
		}
		l.Type, l.Float = edm.TypeDouble, v
	default:
		v, err := strconv.ParseInt(digits, 10, 32)
		if err != nil {
			return errAt(ErrSyntax, start, "unrecognized Edm.Int32 literal %q: out of range, add the L suffix for an Int64", digits)
		}
		l.Type, l.Int, l.num = edm.TypeInt32, v, float64(v)
	}
	return nil
}
