package differential

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// EDM type names as they appear in @odata.type annotations.
const (
	tString   = "Edm.String"
	tInt32    = "Edm.Int32"
	tInt64    = "Edm.Int64"
	tDouble   = "Edm.Double"
	tBoolean  = "Edm.Boolean"
	tDateTime = "Edm.DateTime"
	tGuid     = "Edm.Guid"
	tBinary   = "Edm.Binary"
	// tNull is no EDM type: a property sent as JSON null (writes only).
	tNull = "null"
	// tRaw is no EDM type either: a property sent as written, its v a
	// rawValue (writes only, for values the service refuses).
	tRaw = "raw"
)

var allTypes = []string{tString, tInt32, tInt64, tDouble, tBoolean, tDateTime, tGuid, tBinary}

// value is one typed property value: v is a string (String, Guid), int32,
// int64, float64, bool, time.Time or []byte.
type value struct {
	typ string
	v   any
}

// Value pools: entities take their values from them and literals mostly
// too, so that comparisons hit equal, smaller and larger values.
var (
	poolString = []string{"", "a", "A", "abc", "abd", "ab", "it's", "ü", "日本語", "😀", "Z", "a b", "0", "true", "123", "\ue000"}
	poolInt32  = []int32{-2147483648, -5, -1, 0, 1, 2, 7, 42, 2147483647}
	poolInt64  = []int64{-9223372036854775808, -9007199254740993, -1, 0, 1, 7, 42, 4294967296, 9007199254740993, 9223372036854775807}
	poolDouble = []float64{-1e300, -2.5, -1, 0, 0.5, 1, 2.5, 7, 42, 1e300, 1e-300, 4294967296}
	poolTime   = []time.Time{
		time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 1, 0, 0, 0, 100, time.UTC),
		time.Date(2024, 1, 1, 0, 0, 0, 123456700, time.UTC),
		time.Date(2024, 6, 15, 12, 30, 45, 500000000, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC),
	}
	poolGuid = []string{
		"00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000001",
		"10000000-0000-0000-0000-000000000000", "a0b1c2d3-e4f5-4678-9abc-def012345678",
		"ffffffff-ffff-ffff-ffff-ffffffffffff",
	}
	poolBinary = [][]byte{{}, {0}, {1}, {1, 2}, {0, 0}, {0xff}, {0x7f, 0x80}}
	// No empty PartitionKey: Azurite 3.37 ends a paged query at the first
	// continuation that names one (every later entity missing), which
	// would drown every other difference of a paged query; the
	// compatibility notes record it.
	poolPK = []string{"A", "a", "b", "b'c", "p1", "ü"}
)

// randValue draws a value of type typ from its pool.
func randValue(r *rand.Rand, typ string) value {
	switch typ {
	case tString:
		return value{typ, poolString[r.IntN(len(poolString))]}
	case tInt32:
		return value{typ, poolInt32[r.IntN(len(poolInt32))]}
	case tInt64:
		return value{typ, poolInt64[r.IntN(len(poolInt64))]}
	case tDouble:
		return value{typ, poolDouble[r.IntN(len(poolDouble))]}
	case tBoolean:
		return value{typ, r.IntN(2) == 0}
	case tDateTime:
		return value{typ, poolTime[r.IntN(len(poolTime))]}
	case tGuid:
		return value{typ, poolGuid[r.IntN(len(poolGuid))]}
	default:
		return value{tBinary, poolBinary[r.IntN(len(poolBinary))]}
	}
}

// propSpec is one generated property: its usual type, how often an entity
// has it, and the other types it takes on some entities.
type propSpec struct {
	name    string
	main    string
	present float64 // probability an entity has it
	other   float64 // probability it has another type
	others  []string
}

var props = []propSpec{
	{"S", tString, 0.85, 0.15, []string{tInt32}},
	{"I", tInt32, 0.85, 0.2, []string{tInt64, tDouble, tString}},
	{"L", tInt64, 0.85, 0.15, []string{tInt32}},
	{"D", tDouble, 0.85, 0.15, []string{tInt32, tInt64}},
	{"B", tBoolean, 0.85, 0.15, []string{tString}},
	{"T", tDateTime, 0.85, 0.1, []string{tString}},
	{"G", tGuid, 0.85, 0.1, []string{tString}},
	{"X", tBinary, 0.85, 0.1, []string{tString}},
	{"M", tString, 0.9, 1, allTypes},
}

// entity is one generated entity.
type entity struct {
	pk, rk string
	props  map[string]value
}

func (e entity) key() string { return e.pk + "/" + e.rk }

// genEntities makes n entities with unique keys.
func genEntities(r *rand.Rand, n int) []entity {
	var out []entity
	for i := range n {
		e := entity{pk: poolPK[r.IntN(len(poolPK))], rk: fmt.Sprintf("r%03d", i), props: map[string]value{}}
		switch r.IntN(10) {
		case 0:
			e.rk += "ü"
		case 1:
			e.rk += "'q"
		}
		for _, p := range props {
			if r.Float64() >= p.present {
				continue
			}
			typ := p.main
			if r.Float64() < p.other {
				typ = p.others[r.IntN(len(p.others))]
			}
			e.props[p.name] = randValue(r, typ)
		}
		out = append(out, e)
	}
	return out
}

// jsonOf is the entity as the SDK sends it: every non-String, non-Int32,
// non-Boolean value annotated (whole Doubles too, else they would be read
// as Int32).
func (e entity) jsonOf() []byte {
	m := map[string]any{"PartitionKey": e.pk, "RowKey": e.rk}
	for name, v := range e.props {
		switch v.typ {
		case tString, tInt32, tBoolean, tNull:
			m[name] = v.v
			continue
		case tRaw:
			rv := v.v.(rawValue)
			if rv.val != "" {
				m[name] = json.RawMessage(rv.val)
			}
			if rv.ann != "" {
				m[name+"@odata.type"] = json.RawMessage(rv.ann)
			}
			continue
		case tInt64:
			m[name] = strconv.FormatInt(v.v.(int64), 10)
		case tDouble:
			m[name] = v.v
		case tDateTime:
			m[name] = v.v.(time.Time).Format("2006-01-02T15:04:05.0000000Z")
		case tGuid:
			m[name] = v.v
		case tBinary:
			m[name] = base64.StdEncoding.EncodeToString(v.v.([]byte))
		}
		m[name+"@odata.type"] = v.typ
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// literal is one $filter literal: its EDM type, the text sent and its
// form (the spelling variant, for classifying syntax differences).
type literal struct {
	typ, text, form string
}

// randLiteral renders a value of type typ as a literal in one of the
// spellings Azure documents (and a few it does not say it refuses).
func randLiteral(r *rand.Rand, typ string, pool []value) literal {
	v := randValue(r, typ)
	if len(pool) > 0 && r.IntN(3) > 0 {
		if p := pool[r.IntN(len(pool))]; p.typ == typ {
			v = p
		}
	}
	switch typ {
	case tString:
		return literal{typ, "'" + strings.ReplaceAll(v.v.(string), "'", "''") + "'", "string"}
	case tInt32:
		return literal{typ, strconv.FormatInt(int64(v.v.(int32)), 10), "int32"}
	case tInt64:
		return literal{typ, strconv.FormatInt(v.v.(int64), 10) + "L", "int64"}
	case tDouble:
		f := v.v.(float64)
		s := strconv.FormatFloat(f, 'g', -1, 64)
		form := "double"
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		} else if strings.Contains(s, "e") {
			form = "double-exponent"
		}
		return literal{typ, s, form}
	case tBoolean:
		s := strconv.FormatBool(v.v.(bool))
		return literal{typ, s, "bool"}
	case tDateTime:
		t := v.v.(time.Time)
		switch r.IntN(3) {
		case 0:
			return literal{typ, "datetime'" + t.Format("2006-01-02T15:04:05Z") + "'", "datetime-seconds"}
		case 1:
			return literal{typ, "datetime'" + t.Format("2006-01-02T15:04:05.0000000Z") + "'", "datetime-7digits"}
		default:
			return literal{typ, "datetime'" + t.Format(time.RFC3339Nano) + "'", "datetime-rfc3339nano"}
		}
	case tGuid:
		g := v.v.(string)
		if r.IntN(4) == 0 {
			return literal{typ, "guid'" + strings.ToUpper(g) + "'", "guid-upper"}
		}
		return literal{typ, "guid'" + g + "'", "guid"}
	default:
		h := hex.EncodeToString(v.v.([]byte))
		switch r.IntN(3) {
		case 0:
			return literal{typ, "X'" + h + "'", "X"}
		case 1:
			return literal{typ, "binary'" + h + "'", "binary"}
		default:
			return literal{typ, "X'" + strings.ToUpper(h) + "'", "X-upper"}
		}
	}
}

// node is a $filter expression tree.
type node struct {
	kind     string // cmp, bare, and, or, not, const, raw
	prop     string // cmp, bare; raw: the filter text
	op       string // cmp
	lit      literal
	reversed bool // cmp: the literal first ("5 lt I")
	left     *node
	right    *node // and, or; not uses left
	constant bool
	paren    bool // render with (redundant) parentheses
}

var ops = []string{"eq", "ne", "gt", "ge", "lt", "le"}

// comparisons counts the comparisons Azure's limit counts.
func (n *node) comparisons() int {
	switch n.kind {
	case "cmp", "bare":
		return 1
	case "and", "or":
		return n.left.comparisons() + n.right.comparisons()
	case "not":
		return n.left.comparisons()
	}
	return 0
}

// size is the number of nodes, to try smaller reproducers first.
func (n *node) size() int {
	if n == nil {
		return 0
	}
	return 1 + n.left.size() + n.right.size()
}

// gen holds the generator's state: the values present in the data per
// property, so literals often equal stored ones.
type gen struct {
	r      *rand.Rand
	byProp map[string][]value
}

func newGen(r *rand.Rand, ents []entity) *gen {
	g := &gen{r: r, byProp: map[string][]value{}}
	for _, e := range ents {
		g.byProp["PartitionKey"] = append(g.byProp["PartitionKey"], value{tString, e.pk})
		g.byProp["RowKey"] = append(g.byProp["RowKey"], value{tString, e.rk})
		for name, v := range e.props {
			g.byProp[name] = append(g.byProp[name], v)
		}
	}
	return g
}

// comparison makes one comparison: mostly a literal of the property's
// usual type, sometimes any type (mismatches), sometimes a property no
// entity has.
func (g *gen) comparison() *node {
	r := g.r
	var prop, typ string
	switch x := r.IntN(20); {
	case x < 3:
		prop, typ = []string{"PartitionKey", "RowKey"}[r.IntN(2)], tString
	case x == 3:
		prop, typ = "Missing", allTypes[r.IntN(len(allTypes))]
	default:
		p := props[r.IntN(len(props))]
		prop, typ = p.name, p.main
		if p.name == "M" {
			typ = allTypes[r.IntN(len(allTypes))]
		}
	}
	if r.IntN(4) == 0 {
		typ = allTypes[r.IntN(len(allTypes))]
	}
	if typ == tBoolean && r.IntN(3) == 0 {
		return &node{kind: "bare", prop: prop}
	}
	return &node{kind: "cmp", prop: prop, op: ops[r.IntN(len(ops))], lit: randLiteral(r, typ, g.byProp[prop]), reversed: r.IntN(12) == 0}
}

// expr makes an expression of at most budget comparisons.
func (g *gen) expr(depth, budget int) *node {
	r := g.r
	if depth >= 3 || budget < 2 || r.IntN(3) == 0 {
		if r.IntN(40) == 0 {
			return &node{kind: "const", constant: r.IntN(2) == 0}
		}
		n := g.comparison()
		if r.IntN(6) == 0 {
			n = &node{kind: "not", left: n}
		}
		return n
	}
	switch r.IntN(7) {
	case 0:
		return &node{kind: "not", left: g.expr(depth+1, budget)}
	default:
		kind := "and"
		if r.IntN(2) == 0 {
			kind = "or"
		}
		lb := 1 + r.IntN(budget-1)
		return &node{kind: kind, left: g.expr(depth+1, lb), right: g.expr(depth+1, budget-lb), paren: r.IntN(4) == 0}
	}
}

// render writes the filter, with the parentheses precedence needs (or
// binds loosest, then and, then not) and the redundant ones asked for.
func (n *node) render() string {
	var s string
	switch n.kind {
	case "raw":
		return n.prop
	case "const":
		s = strconv.FormatBool(n.constant)
	case "bare":
		s = n.prop
	case "cmp":
		if n.reversed {
			s = n.lit.text + " " + flip(n.op) + " " + n.prop
		} else {
			s = n.prop + " " + n.op + " " + n.lit.text
		}
	case "not":
		c := n.left.render()
		// "(A) or (B)" starts with a parenthesis but is no group: only a
		// node rendered with its own parentheses needs none.
		if n.left.kind != "bare" && n.left.kind != "const" && !n.left.paren {
			c = "(" + c + ")"
		}
		s = "not " + c
	case "and", "or":
		l, r := n.left.render(), n.right.render()
		if n.kind == "and" {
			if n.left.kind == "or" && !n.left.paren {
				l = "(" + l + ")"
			}
			if n.right.kind == "or" && !n.right.paren {
				r = "(" + r + ")"
			}
		}
		s = l + " " + n.kind + " " + r
	}
	if n.paren {
		s = "(" + s + ")"
	}
	return s
}

// flip turns "I lt 5" into the operator of "5 gt I".
func flip(op string) string {
	switch op {
	case "gt":
		return "lt"
	case "lt":
		return "gt"
	case "ge":
		return "le"
	case "le":
		return "ge"
	}
	return op
}

// abstract is the filter's shape with literal values replaced by their
// forms and user property names by P: what a syntax difference depends on.
func (n *node) abstract() string {
	switch n.kind {
	case "raw":
		return "`" + n.prop + "`"
	case "const":
		return strconv.FormatBool(n.constant)
	case "bare":
		return propClass(n.prop)
	case "cmp":
		if n.reversed {
			return "<" + n.lit.form + "> " + flip(n.op) + " " + propClass(n.prop)
		}
		return propClass(n.prop) + " " + n.op + " <" + n.lit.form + ">"
	case "not":
		return "not (" + n.left.abstract() + ")"
	}
	return "(" + n.left.abstract() + ") " + n.kind + " (" + n.right.abstract() + ")"
}

func propClass(p string) string {
	if p == "PartitionKey" || p == "RowKey" {
		return p
	}
	return "P"
}

// subtrees lists n's proper sub-expressions, children first.
func (n *node) children() []*node {
	switch n.kind {
	case "and", "or":
		return []*node{n.left, n.right}
	case "not":
		return []*node{n.left}
	}
	return nil
}

// query is one generated query.
type query struct {
	filter *node // nil: no $filter
	top    int32 // 0: no $top
	sel    []string
}

func (q query) String() string {
	var parts []string
	if q.filter != nil {
		parts = append(parts, "$filter="+q.filter.render())
	}
	if q.top > 0 {
		parts = append(parts, "$top="+strconv.Itoa(int(q.top)))
	}
	if q.sel != nil {
		parts = append(parts, "$select="+strings.Join(q.sel, ","))
	}
	return strings.Join(parts, "&")
}

// randQuery makes a query: mostly filtered, sometimes paged by $top,
// sometimes projected.
func (g *gen) randQuery() query {
	r := g.r
	var q query
	if r.IntN(20) > 0 {
		q.filter = g.expr(0, 1+r.IntN(8))
	}
	if r.IntN(3) == 0 {
		q.top = int32(1 + r.IntN(9))
	}
	if r.IntN(4) == 0 {
		// The keys are always selected: they name the entities whose
		// answers are compared.
		q.sel = []string{"PartitionKey", "RowKey"}
		names := []string{"Timestamp", "Missing"}
		for _, p := range props {
			names = append(names, p.name)
		}
		for _, name := range names {
			if r.IntN(3) == 0 {
				q.sel = append(q.sel, name)
			}
		}
	}
	return q
}

// fixedFilters are written by hand: the literal spellings, syntax edges and
// refusals the generator does not make (it makes only well-formed
// comparisons). Each runs as it is.
var fixedFilters = []string{
	// Literal spellings.
	"I eq 3000000000", "I eq -2147483648", "I eq 2147483648", "L eq 1l", "L eq 9223372036854775808L",
	"D eq 1.5D", "D eq 1.5d", "D eq 2", "D eq .5", "D eq 1.", "D eq 1E5", "D eq 1e-5", "D eq INF", "D eq -INF", "D eq NaN",
	"D eq 1.5M", "D eq 1.5F", "I eq -0", "I eq +1", "I eq 01",
	"B eq True", "B eq FALSE", "B eq 1", "B eq 'true'",
	"T eq datetime'2024-01-01'", "T eq datetime'2024-01-01T00:00'", "T eq datetime'2024-01-01T00:00:00'",
	"T eq datetime'2024-01-01T01:00:00+01:00'", "T eq DateTime'2024-01-01T00:00:00Z'", "T eq datetime'2024-01-01T00:00:00.12345678Z'",
	"T eq datetime'2024-13-01T00:00:00Z'", "T eq datetime'1600-12-31T23:59:59Z'", "T eq datetimeoffset'2024-01-01T00:00:00Z'",
	"G eq guid'00000000-0000-0000-0000-000000000001'", "G eq GUID'00000000-0000-0000-0000-000000000001'",
	"G eq guid'0000000000000000000000000000001'", "G eq guid'{00000000-0000-0000-0000-000000000001}'", "G eq guid'xyz'",
	"G eq '00000000-0000-0000-0000-000000000001'",
	"X eq X'0102'", "X eq x'0102'", "X eq binary'0102'", "X eq BINARY'0102'", "X eq X'102'", "X eq X''", "X eq X'zz'",
	"S eq 'it''s'", "S eq 'a''", "S eq \"a\"", "S eq ''", "S eq '日本語'",
	// Syntax.
	"", " ", "true", "false", "not true", "(S eq 'a')", "((S eq 'a'))", "S eq 'a' and", "(S eq 'a'", "S Eq 'a'", "S eq 'a' AND I eq 1",
	"S eq 'a' && I eq 1", "not I eq 1", "not(I eq 1)", "not not B", "'a' eq S", "1 eq 1", "I eq I", "I eq null", "null eq I",
	"startswith(S,'a')", "substringof('a',S)", "I add 1 eq 2", "I/X eq 1", "Missing", "not Missing",
	"PartitionKey eq 'a' and RowKey eq 'r001'", "PartitionKey gt 'a' and PartitionKey lt 'b'", "RowKey ge 'r010' and RowKey lt 'r020'",
	"PartitionKey eq 1", "RowKey lt 5L", "Timestamp gt datetime'2000-01-01T00:00:00Z'", "Timestamp lt datetime'2000-01-01T00:00:00Z'",
	"S eq 'a' or S eq 'b' or S eq 'c' or S eq 'd' or S eq 'e' or S eq 'f' or S eq 'g' or S eq 'h' or S eq 'i' or S eq 'j' or S eq 'k' or S eq 'l' or S eq 'm' or S eq 'n' or S eq 'o'",
	"S eq 'a' or S eq 'b' or S eq 'c' or S eq 'd' or S eq 'e' or S eq 'f' or S eq 'g' or S eq 'h' or S eq 'i' or S eq 'j' or S eq 'k' or S eq 'l' or S eq 'm' or S eq 'n' or S eq 'o' or S eq 'p'",
	"S lt '\ue000'", "S gt '😀'", "S ge 'a' and S lt 'b'", "S gt ''",
}

// fixedSelects are $select lists written by hand (the keys always
// included, as the comparison needs them): OData's *, repeats, case,
// spaces, system properties.
var fixedSelects = [][]string{
	{"*"}, {"PartitionKey", "RowKey", "*"}, {"PartitionKey", "RowKey", "S", "S"}, {"PartitionKey", "RowKey", "s"},
	{"PartitionKey", "RowKey", " S"}, {"PartitionKey", "RowKey", "S "}, {"PartitionKey", "RowKey", "Timestamp"},
	{"PartitionKey", "RowKey", ""}, {"PartitionKey", "RowKey", "odata.etag"},
}
