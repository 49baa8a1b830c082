package differential

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// tableSuffixes name the tables a Query Tables run creates (after a
// per-seed prefix): neighbours in order, a digit, upper case.
var tableSuffixes = []string{"aa", "ab", "abc", "b", "B9", "m", "z", "Zz0", "n1"}

// tablesResult is every table name a Query Tables answered, pages
// followed, or its error.
type tablesResult struct {
	rep   reply // the failing page's answer, status 200 when none failed
	names []string
	pages []int
}

func (r tablesResult) errText() string {
	if r.rep.status == 200 {
		return "200 OK"
	}
	return r.rep.text()
}

// queryTables runs GET /Tables with filter (nil: none) and top (0: none)
// on base, following NextTableName, and keeps the names starting with
// prefix (in any case): the other tests' tables are no part of it.
func queryTables(base string, filter *string, top int, prefix string) tablesResult {
	var res tablesResult
	next := ""
	for range 200 {
		v := url.Values{}
		if filter != nil {
			v.Set("$filter", *filter)
		}
		if top > 0 {
			v.Set("$top", strconv.Itoa(top))
		}
		if next != "" {
			v.Set("NextTableName", next)
		}
		path := "/Tables"
		if len(v) > 0 {
			path += "?" + strings.ReplaceAll(v.Encode(), "+", "%20")
		}
		rep := do(base, "GET", path, nil, nil)
		res.rep = rep
		if rep.status != 200 {
			return res
		}
		var body struct {
			Value []struct{ TableName string } `json:"value"`
		}
		if err := json.Unmarshal(rep.body, &body); err != nil {
			res.rep.status, res.rep.code = -1, "undecodable"
			return res
		}
		res.pages = append(res.pages, len(body.Value))
		for _, t := range body.Value {
			if strings.HasPrefix(strings.ToLower(t.TableName), strings.ToLower(prefix)) {
				res.names = append(res.names, t.TableName)
			}
		}
		next = rep.hdr.Get("x-ms-continuation-NextTableName")
		if next == "" {
			return res
		}
	}
	return res
}

// tablesDiff is "" when both answers agree, else what differs.
func tablesDiff(ts, az tablesResult, top int) (kind, detail string) {
	if ts.rep.status != az.rep.status || ts.rep.code != az.rep.code {
		return "error", fmt.Sprintf("tablestore %s, azurite %s", ts.errText(), az.errText())
	}
	if ts.rep.status != 200 {
		return "", ""
	}
	for _, n := range ts.names {
		if !slices.Contains(az.names, n) {
			return "names", "only tablestore returns " + n
		}
	}
	for _, n := range az.names {
		if !slices.Contains(ts.names, n) {
			return "names", "only azurite returns " + n
		}
	}
	if !slices.Equal(ts.names, az.names) {
		return "order", fmt.Sprintf("tablestore %v, azurite %v", ts.names, az.names)
	}
	for side, r := range map[string]tablesResult{"tablestore": ts, "azurite": az} {
		for _, n := range r.pages {
			if top > 0 && n > top {
				return "paging", side + " answered a page larger than $top"
			}
		}
	}
	return "", ""
}

// tableLiteral draws a TableName literal: a created name (sometimes in
// another case), a neighbour of one, the prefix, another seed's prefix,
// the empty string.
func tableLiteral(r *rand.Rand, prefix string) literal {
	s := tableSuffixes[r.IntN(len(tableSuffixes))]
	var text, form string
	switch r.IntN(8) {
	case 0, 1, 2:
		text, form = prefix+s, "a table's name"
	case 3:
		text, form = strings.ToUpper(prefix+s), "a table's name in upper case"
	case 4:
		text, form = prefix+s+"0", "a name just after a table's"
	case 5:
		text, form = prefix, "the prefix"
	case 6:
		text, form = prefix[:len(prefix)-1]+"~", "past the prefix"
	default:
		text, form = "", "empty"
	}
	return literal{tString, "'" + text + "'", form}
}

func tableExpr(r *rand.Rand, prefix string, depth int) *node {
	if depth >= 2 || r.IntN(2) == 0 {
		n := &node{kind: "cmp", prop: "TableName", op: ops[r.IntN(len(ops))], lit: tableLiteral(r, prefix)}
		if r.IntN(8) == 0 {
			n = &node{kind: "not", left: n}
		}
		return n
	}
	kind := "and"
	if r.IntN(2) == 0 {
		kind = "or"
	}
	return &node{kind: kind, left: tableExpr(r, prefix, depth+1), right: tableExpr(r, prefix, depth+1)}
}

// fixedTableFilters are written by hand: the other property names a
// table has or has not, literal types, syntax.
var fixedTableFilters = []string{
	"", " ", "TableName", "TableName eq 1", "TableName eq 'x' and", "Name eq 'x'", "tablename eq '%[1]saa'",
	"TableName Eq '%[1]saa'", "TableName eq '%[1]saa'", "'%[1]saa' eq TableName", "TableName ne '%[1]saa'",
	"TableName ge '%[1]s' and TableName lt '%[1]s~'", "not (TableName eq '%[1]saa')", "TableName gt ''",
	"true", "TableName eq '%[1]saa' or TableName eq '%[1]sab'", "PartitionKey eq 'x'", "Timestamp gt datetime'2000-01-01T00:00:00Z'",
	"TableName eq '%[1]sAA'", "startswith(TableName,'%[1]s')", "TableName eq guid'00000000-0000-0000-0000-000000000000'",
}

// TestDifferentialQueryTables creates the same tables on both servers and
// compares Query Tables' answers to generated $filter expressions on
// TableName (and hand-written ones), with and without $top.
//
// DIFF_SEED (default 1) picks them, DIFF_TABLE_QUERIES (default 200) how
// many.
func TestDifferentialQueryTables(t *testing.T) {
	requireServers(t)
	seed := uint64(envInt("DIFF_SEED", 1))
	n := envInt("DIFF_TABLE_QUERIES", 200)
	t.Logf("azurite-table %s; seed %d, %d table queries (DIFF_SEED, DIFF_TABLE_QUERIES)", azuriteVersion, seed, n)
	known := loadKnown(t)
	r := rand.New(rand.NewPCG(seed, 0x7ab1e5))
	prefix := fmt.Sprintf("qt%dx", seed)
	h := &harness{t: t, ctx: context.Background(), findings: map[string]*finding{}}
	for _, s := range tableSuffixes {
		h.createTable(prefix + s)
	}
	run := func(f *string, top int) (tablesResult, tablesResult) {
		return queryTables(tsURL, f, top, prefix), queryTables(azURL, f, top, prefix)
	}
	diffOf := func(f string, top int) (string, string) {
		a, b := run(&f, top)
		return tablesDiff(a, b, top)
	}
	for _, f := range fixedTableFilters {
		f = strings.ReplaceAll(f, "%[1]s", prefix)
		a, b := run(&f, 0)
		if kind, d := tablesDiff(a, b, 0); kind != "" {
			cls := strings.ReplaceAll(f, prefix, "<p>")
			h.record(fmt.Sprintf("tables: fixed filter `%s`: %s: %s", cls, kind, d), fmt.Sprintf("$filter=%s\n  tablestore: %s %s %v\n  azurite:    %s %s %v", f, a.errText(), firstLine(a.rep.msg), a.names, b.errText(), firstLine(b.rep.msg), b.names))
		}
	}
	for i := range n {
		e := tableExpr(r, prefix, 0)
		top := 0
		if r.IntN(3) == 0 {
			top = 1 + r.IntN(4)
		}
		if i%20 == 0 {
			e = nil
		}
		var fp *string
		if e != nil {
			fp = new(string)
			*fp = e.render()
		}
		a, b := run(fp, top)
		kind, d := tablesDiff(a, b, top)
		if kind == "" {
			continue
		}
		// Narrow to the smallest sub-filter with the same kind of
		// difference, as TestDifferential does.
		for e != nil {
			next := (*node)(nil)
			for _, c := range e.children() {
				f := c.render()
				if k, cd := diffOf(f, top); k == kind {
					next, d = c, cd
					break
				}
			}
			if next == nil {
				break
			}
			e = next
		}
		shape := "no $filter"
		if e != nil {
			shape = tableShape(unparen(e))
			f := e.render()
			if k, cd := diffOf(f, 0); k == kind {
				top, d = 0, cd
			}
		}
		if top > 0 {
			shape += " with $top"
		}
		repro := "no $filter"
		if e != nil {
			repro = "$filter=" + e.render()
		}
		h.record(fmt.Sprintf("tables: %s: %s", shape, kind), fmt.Sprintf("%s $top=%d: %s", repro, top, d))
	}
	h.report(known)
}

// tableShape abstracts a TableName filter: operators and literal forms.
func tableShape(n *node) string {
	switch n.kind {
	case "cmp":
		return "TableName " + n.op + " <" + n.lit.form + ">"
	case "not":
		return "not (" + tableShape(n.left) + ")"
	case "and", "or":
		return "(" + tableShape(n.left) + ") " + n.kind + " (" + tableShape(n.right) + ")"
	}
	return n.abstract()
}
