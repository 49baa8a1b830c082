package differential

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// Knobs, from the environment (make diff-azurite passes them through).
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// TestDifferential writes the same generated entities to tablestore and
// Azurite, runs generated queries on both and fails on every class of
// difference testdata/known-differences.txt does not list.
//
// DIFF_SEED (default 1) picks the data and the queries, DIFF_QUERIES
// (default 400) how many, DIFF_ENTITIES (default 60) how many entities.
func TestDifferential(t *testing.T) {
	requireServers(t)
	seed := uint64(envInt("DIFF_SEED", 1))
	nq, ne := envInt("DIFF_QUERIES", 400), envInt("DIFF_ENTITIES", 60)
	t.Logf("azurite-table %s; seed %d, %d entities, %d queries (DIFF_SEED, DIFF_ENTITIES, DIFF_QUERIES)", azuriteVersion, seed, ne, nq)
	known := loadKnown(t)
	r := rand.New(rand.NewPCG(seed, 0x7ab1e))
	h := newHarness(t, fmt.Sprintf("diff%d", seed))
	h.insert(genEntities(r, ne))
	g := newGen(r, slices.Collect(func(yield func(entity) bool) {
		for _, k := range h.order {
			if !yield(h.ents[k]) {
				return
			}
		}
	}))
	for i, f := range fixedFilters {
		q := query{filter: &node{kind: "raw", prop: f}}
		p := h.run(q)
		for _, d := range compare(q, p.ts, p.az) {
			h.explain(-1-i, q, d)
		}
	}
	for i, sel := range fixedSelects {
		q := query{sel: sel, filter: &node{kind: "raw", prop: "I lt 2"}}
		p := h.run(q)
		for _, d := range compare(q, p.ts, p.az) {
			h.explain(-100-i, q, d)
		}
	}
	for i := range nq {
		q := g.randQuery()
		if q.filter != nil && q.filter.comparisons() > 15 {
			continue
		}
		p := h.run(q)
		for _, d := range compare(q, p.ts, p.az) {
			h.explain(i, q, d)
		}
	}
	h.report(known)
}

// pair is both servers' answers to one query.
type pair struct{ ts, az result }

// finding is one class of difference: how often it was seen and the first
// minimal reproducer.
type finding struct {
	count int
	repro string
}

type harness struct {
	t        *testing.T
	ctx      context.Context
	ts, az   *aztables.Client
	ents     map[string]entity
	order    []string
	cache    map[string]pair
	findings map[string]*finding
	// fresh makes table names for the one-entity reproducer checks.
	fresh atomic.Int64
	name  string
}

func newHarness(t *testing.T, table string) *harness {
	h := &harness{t: t, ctx: context.Background(), ents: map[string]entity{}, cache: map[string]pair{}, findings: map[string]*finding{}, name: table}
	h.ts, h.az = h.createTable(table)
	return h
}

func (h *harness) createTable(name string) (ts, az *aztables.Client) {
	h.t.Helper()
	for _, svc := range []*aztables.ServiceClient{tsSvc, azSvc} {
		if _, err := svc.CreateTable(h.ctx, name, nil); err != nil {
			h.t.Fatalf("create table %s: %v", name, err)
		}
	}
	h.t.Cleanup(func() {
		tsSvc.DeleteTable(context.Background(), name, nil)
		azSvc.DeleteTable(context.Background(), name, nil)
	})
	return tsSvc.NewClient(name), azSvc.NewClient(name)
}

// insert writes every entity to both servers. An entity one side refuses
// is a difference of its own (the property responsible is found by
// writing each alone) and is left out of both.
func (h *harness) insert(ents []entity) {
	for _, e := range ents {
		body := e.jsonOf()
		_, errT := h.ts.AddEntity(h.ctx, body, nil)
		_, errA := h.az.AddEntity(h.ctx, body, nil)
		if errT == nil && errA == nil {
			h.ents[e.key()] = e
			h.order = append(h.order, e.key())
			continue
		}
		if errT != nil && errA != nil {
			h.t.Logf("both refused entity %s: %v", body, errT)
			continue
		}
		for _, side := range []struct {
			c   *aztables.Client
			err error
		}{{h.ts, errT}, {h.az, errA}} {
			if side.err == nil {
				side.c.DeleteEntity(h.ctx, e.pk, e.rk, nil)
			}
		}
		h.insertCulprits(e, errT, errA)
	}
}

// insertCulprits writes each property of a refused entity alone to a
// scratch table on both sides and records the ones answered differently.
func (h *harness) insertCulprits(e entity, errT, errA error) {
	ts, az := h.createTable(fmt.Sprintf("diffins%d", h.fresh.Add(1)))
	found := false
	for name, v := range e.props {
		one := entity{pk: "p", rk: "r" + name, props: map[string]value{name: v}}
		_, t := ts.AddEntity(h.ctx, one.jsonOf(), nil)
		_, a := az.AddEntity(h.ctx, one.jsonOf(), nil)
		if (t == nil) != (a == nil) {
			found = true
			class := fmt.Sprintf("insert %s: tablestore %s, azurite %s", pval{v.typ, valueText(v)}, errStatus(t), errStatus(a))
			h.record(class, fmt.Sprintf("insert %s\n  tablestore: %v\n  azurite:    %v", one.jsonOf(), t, a))
		}
	}
	if !found {
		h.record(fmt.Sprintf("insert (whole entity): tablestore %s, azurite %s", errStatus(errT), errStatus(errA)),
			fmt.Sprintf("insert %s\n  tablestore: %v\n  azurite:    %v", e.jsonOf(), errT, errA))
	}
}

func valueText(v value) string {
	if b, ok := v.v.([]byte); ok {
		return fmt.Sprintf("%x", b)
	}
	return fmt.Sprint(v.v)
}

func errStatus(err error) string {
	if err == nil {
		return "accepted"
	}
	return "refused (" + firstLine(err.Error()) + ")"
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "ERROR CODE:") {
			return l
		}
	}
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// run answers q on both servers, once per distinct query.
func (h *harness) run(q query) pair {
	k := q.String()
	if p, ok := h.cache[k]; ok {
		return p
	}
	p := pair{runQuery(h.ctx, h.ts, q), runQuery(h.ctx, h.az, q)}
	h.cache[k] = p
	return p
}

func (h *harness) record(class, repro string) {
	f := h.findings[class]
	if f == nil {
		f = &finding{repro: repro}
		h.findings[class] = f
	}
	f.count++
}

// explain classifies difference d of query number i and records it with a
// minimal reproducer.
func (h *harness) explain(i int, q query, d diff) {
	switch d.kind {
	case "error":
		h.explainError(q)
	case "keys":
		h.explainKey(q, d)
	case "props":
		h.explainProp(q, d)
	case "keyless":
		side := "tablestore"
		if strings.Contains(d.detail, "tablestore 0 of") {
			side = "azurite"
		}
		h.record("keyless: "+side+" answered entities without PartitionKey/RowKey to $select="+strings.Join(q.sel, ","), fmt.Sprintf("query #%d: %s: %s", i, q, d.detail))
	case "order":
		h.record("order: same entities, other order", fmt.Sprintf("query #%d: %s\n%s", i, q, d.detail))
	case "paging":
		h.record("paging: "+d.side+" answered a page larger than $top", fmt.Sprintf("query #%d: %s: %s", i, q, d.detail))
	}
}

// withFilter is q with another filter.
func (q query) withFilter(n *node) query { q.filter = n; return q }

func (h *harness) keyDiff(q query, key string) (diff, bool) {
	p := h.run(q)
	for _, d := range compare(q, p.ts, p.az) {
		if d.kind == "keys" && d.key == key {
			return d, true
		}
	}
	return diff{}, false
}

// explainKey narrows a filter on which the servers disagree about one
// entity down to the smallest sub-expression on which they still
// disagree about it (there is one among the children of any and, or and
// not the servers disagree on), drops $top and $select when they do not
// matter, and classifies the result by the entity's property type and the
// literal's type.
func (h *harness) explainKey(q query, d diff) {
	if q.filter == nil {
		h.record("unfiltered query: "+d.side+" only", fmt.Sprintf("%s: entity %s only on %s", q, d.key, d.side))
		return
	}
	n := q.filter
	for {
		next := (*node)(nil)
		for _, c := range n.children() {
			if nd, ok := h.keyDiff(q.withFilter(c), d.key); ok {
				next, d = c, nd
				break
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	if len(n.children()) > 0 {
		// No part disagrees about the entity alone: a part one server
		// refuses on its own (an error, not an answer) is evaluated to
		// something inside the larger filter. Name that part.
		for _, c := range n.children() {
			cq := q.withFilter(c)
			p := h.run(cq)
			for _, cd := range compare(cq, p.ts, p.az) {
				if cd.kind == "error" {
					h.record("wrong result where a part alone is refused: "+cd.detail+": "+unparen(c).abstract()+" -> only "+d.side+" returns it",
						fmt.Sprintf("%s\n  entity: %s\n  the part alone: %s answers tablestore %s, azurite %s", q, h.ents[d.key].jsonOf(), c.render(), p.ts.errText(), p.az.errText()))
					return
				}
			}
		}
	}
	if n.kind == "cmp" && n.reversed {
		m := *n
		m.reversed = false
		if nd, ok := h.keyDiff(q.withFilter(&m), d.key); ok {
			n, d = &m, nd
		}
	}
	n = unparen(n)
	min := query{filter: n}
	if nd, ok := h.keyDiff(min, d.key); ok {
		d = nd
	} else {
		min = q.withFilter(n)
	}
	e := h.ents[d.key]
	class := describe(n, e) + " -> only " + d.side + " returns it"
	if min.top > 0 || min.sel != nil {
		class += " (with $top/$select)"
	}
	if f := h.findings[class]; f != nil {
		f.count++ // the first occurrence's reproducer stands
		return
	}
	p := h.run(min)
	repro := fmt.Sprintf("%s\n  entity: %s\n  tablestore: %s (%d entities)\n  azurite:    %s (%d entities)\n  on a one-entity table: %s",
		min, e.jsonOf(), inOut(p.ts, d.key), len(p.ts.keys), inOut(p.az, d.key), len(p.az.keys), h.oneEntity(e, min))
	h.record(class, repro)
}

// unparen copies n without its redundant outer parentheses.
func unparen(n *node) *node {
	m := *n
	m.paren = false
	return &m
}

func inOut(r result, key string) string {
	if r.status != 0 {
		return r.errText()
	}
	if _, ok := r.ents[key]; ok {
		return "returns it"
	}
	return "does not return it"
}

// describe names a minimal filter's class for entity e: the property's
// type on e (Key for PartitionKey and RowKey, missing when e lacks it),
// the operator and the literal's type.
func describe(n *node, e entity) string {
	switch n.kind {
	case "cmp":
		pt := propType(n.prop, e)
		s := pt + " " + n.op + " " + n.lit.form + " literal"
		if mismatch(pt, n.lit.typ) {
			s = "type mismatch: " + s
		}
		if pt == "String" && n.lit.typ == tString && (beyondE000(n.lit.text) || beyondE000(e.props[n.prop].v.(string))) {
			// UTF-8 and UTF-16 orders differ only there.
			s += " (text beyond U+E000)"
		}
		if v, ok := e.props[n.prop].v.(string); ok && v == "" && pt == "String" {
			s += " (empty value)"
		}
		if n.reversed {
			s += " (literal first)"
		}
		return s
	case "bare":
		return "bare property, " + propType(n.prop, e)
	case "not":
		return "not (" + describe(n.left, e) + ")"
	case "const":
		return "constant " + strconv.FormatBool(n.constant)
	case "raw":
		// The type of the property the filter starts with, when it
		// does: what most of the fixed filters' differences depend on.
		// Characters that do not show are escaped (\ue000).
		q := strconv.QuoteToGraphic(n.prop)
		s := "fixed filter `" + strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`) + "`"
		if name := firstProperty(n.prop); name != "" {
			s += " on a " + propType(name, e) + " property"
		}
		return s
	}
	return "shape " + n.abstract()
}

// mismatch says whether a property of type pt (propType) compared with a
// literal of EDM type lit is one the REST reference gives no result for
// ("The constant value must be of the same data type as the property in
// order for the filter to return valid results"), apart from a literal
// widened to the property's numeric type (Int32 to Int64 or Double, Int64
// to Double), which OData's type promotion defines.
func mismatch(pt, lit string) bool {
	lit = strings.TrimPrefix(lit, "Edm.")
	switch {
	case pt == "missing":
		return false
	case pt == "Key":
		return lit != "String"
	case lit == "Int32" && (pt == "Int64" || pt == "Double"), lit == "Int64" && pt == "Double":
		return false
	}
	return pt != lit
}

// firstProperty is the first word of a filter that starts with a capital
// letter outside quotes: the property it compares, in the fixed filters.
func firstProperty(f string) string {
	inQuote := false
	word := ""
	for _, r := range f + " " {
		switch {
		case r == '\'':
			inQuote = !inQuote
			word = ""
		case !inQuote && (r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9'):
			word += string(r)
		default:
			if word != "" && word[0] >= 'A' && word[0] <= 'Z' {
				return word
			}
			word = ""
		}
	}
	return ""
}

// beyondE000 says whether s holds a character at or above U+E000, where
// UTF-8 byte order and UTF-16 code unit order can disagree.
func beyondE000(s string) bool {
	for _, r := range s {
		if r >= 0xe000 {
			return true
		}
	}
	return false
}

func propType(name string, e entity) string {
	if name == "PartitionKey" || name == "RowKey" {
		return "Key"
	}
	v, ok := e.props[name]
	if !ok {
		return "missing"
	}
	return strings.TrimPrefix(v.typ, "Edm.")
}

// oneEntity re-runs a reproducer on a fresh table holding only e and
// says whether the servers still disagree about it.
func (h *harness) oneEntity(e entity, q query) string {
	ts, az := h.createTable(fmt.Sprintf("diffone%d", h.fresh.Add(1)))
	if _, err := ts.AddEntity(h.ctx, e.jsonOf(), nil); err != nil {
		return "insert failed: " + err.Error()
	}
	if _, err := az.AddEntity(h.ctx, e.jsonOf(), nil); err != nil {
		return "insert failed: " + err.Error()
	}
	a, b := runQuery(h.ctx, ts, q), runQuery(h.ctx, az, q)
	for _, d := range compare(q, a, b) {
		if d.kind == "keys" && d.key == e.key() {
			return "reproduced"
		}
	}
	return "NOT reproduced (the difference needs other entities)"
}

// explainError narrows a filter one server refuses and the other does
// not (or refuses differently) to its smallest such sub-expression.
func (h *harness) explainError(q query) {
	errDiff := func(q query) (diff, bool) {
		p := h.run(q)
		for _, d := range compare(q, p.ts, p.az) {
			if d.kind == "error" {
				return d, true
			}
		}
		return diff{}, false
	}
	d, _ := errDiff(q)
	if q.filter != nil {
		n := q.filter
		for {
			next := (*node)(nil)
			for _, c := range n.children() {
				if nd, ok := errDiff(q.withFilter(c)); ok {
					next, d = c, nd
					break
				}
			}
			if next == nil {
				break
			}
			n = next
		}
		q = q.withFilter(unparen(n))
	}
	for _, smaller := range []query{{filter: q.filter}, {filter: q.filter, top: q.top}, {filter: q.filter, sel: q.sel}} {
		if nd, ok := errDiff(smaller); ok {
			q, d = smaller, nd
			break
		}
	}
	shape := "no $filter"
	if q.filter != nil {
		shape = q.filter.abstract()
	}
	if q.top > 0 {
		shape += " with $top"
	}
	if q.sel != nil {
		shape += " with $select"
		if q.filter != nil && q.filter.kind == "raw" {
			shape += "=" + strings.Join(q.sel, ",")
		}
	}
	p := h.run(q)
	h.record("error: "+d.detail+": "+shape, fmt.Sprintf("%s\n  tablestore: %s %s\n  azurite:    %s %s", q, p.ts.errText(), firstLine(p.ts.msg), p.az.errText(), firstLine(p.az.msg)))
}

// explainProp records a property answered differently for an entity both
// servers returned, with a reproducer addressing that entity alone.
func (h *harness) explainProp(q query, d diff) {
	p := h.run(q)
	x, okx := p.ts.ents[d.key][d.side]
	y, oky := p.az.ents[d.key][d.side]
	name := d.side
	if name != "PartitionKey" && name != "RowKey" && name != "Timestamp" {
		name = "P"
	}
	class := fmt.Sprintf("property %s: tablestore %s, azurite %s", name, typeState(x, okx), typeState(y, oky))
	if okx && oky && x.typ == y.typ {
		class = fmt.Sprintf("property %s: same type %s, other value", name, x.typ)
	}
	if q.sel != nil {
		class += " (with $select)"
		if q.filter != nil && q.filter.kind == "raw" {
			class += " $select=" + strings.Join(q.sel, ",")
		}
	}
	e := h.ents[d.key]
	min := query{sel: q.sel, filter: &node{kind: "and",
		left:  &node{kind: "cmp", prop: "PartitionKey", op: "eq", lit: literal{tString, "'" + strings.ReplaceAll(e.pk, "'", "''") + "'", "string"}},
		right: &node{kind: "cmp", prop: "RowKey", op: "eq", lit: literal{tString, "'" + strings.ReplaceAll(e.rk, "'", "''") + "'", "string"}}}}
	h.record(class, fmt.Sprintf("%s\n  entity: %s\n  property %s: %s", min, e.jsonOf(), d.side, d.detail))
}

func typeState(p pval, ok bool) string {
	if !ok {
		return "absent"
	}
	if p.typ == "null" {
		return "null"
	}
	return p.typ
}

// knownFile lists the classes of difference already triaged.
const knownFile = "testdata/known-differences.txt"

// loadKnown reads the known classes: one per line, "class  # why".
func loadKnown(t *testing.T) map[string]string {
	f, err := os.Open(knownFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	known := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		class, why, _ := strings.Cut(line, "  # ")
		known[strings.TrimSpace(class)] = why
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return known
}

// knownClass says whether class is listed; a * in a listed class
// matches any text.
func knownClass(known map[string]string, class string) bool {
	for k := range known {
		if globMatch(k, class) {
			return true
		}
	}
	return false
}

func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

// report prints every class seen, the known ones briefly and the new ones
// with their reproducers, and fails when there is a new one.
func (h *harness) report(known map[string]string) {
	classes := slices.Sorted(func(yield func(string) bool) {
		for c := range h.findings {
			if !yield(c) {
				return
			}
		}
	})
	var fresh []string
	for _, c := range classes {
		f := h.findings[c]
		if knownClass(known, c) {
			h.t.Logf("known (%d×): %s\n    e.g. %s", f.count, c, strings.ReplaceAll(f.repro, "\n", "\n    "))
			continue
		}
		fresh = append(fresh, c)
	}
	for _, c := range fresh {
		f := h.findings[c]
		h.t.Errorf("NEW difference (%d×): %s\n  reproducer: %s", f.count, c, f.repro)
	}
	if len(fresh) > 0 {
		h.t.Logf("%d new classes; once triaged, add to %s:\n%s", len(fresh), knownFile, strings.Join(fresh, "  # \n")+"  # ")
	}
	if len(h.cache) > 0 {
		h.t.Logf("%d queries run, %d classes of difference (%d new)", len(h.cache), len(classes), len(fresh))
	} else {
		h.t.Logf("%d classes of difference (%d new)", len(classes), len(fresh))
	}
}
