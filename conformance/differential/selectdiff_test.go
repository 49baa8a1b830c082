package differential

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The projection comparison talks REST: $select goes out as written (an
// empty one, blanks, repeats, names without the keys), and the answer is
// compared as sent, annotations and odata.metadata included.

// selToken is one name of a $select list and its class: user property
// names read as P (p when they differ from one only in case), so that
// classes do not multiply by property; * reads as "all (*)", as a * in
// known-differences.txt matches any text.
type selToken struct{ text, label string }

var selTokens = []selToken{
	{"PartitionKey", "PartitionKey"}, {"RowKey", "RowKey"}, {"Timestamp", "Timestamp"},
	{"S", "P"}, {"I", "P"}, {"L", "P"}, {"D", "P"}, {"B", "P"}, {"T", "P"}, {"G", "P"}, {"X", "P"}, {"M", "P"},
	{"Missing", "Missing"}, {"s", "p (case)"}, {"partitionkey", "partitionkey"}, {"timestamp", "timestamp"},
	{" S", " P"}, {"S ", "P "}, {"*", "all (*)"}, {"", ""}, {"odata.etag", "odata.etag"}, {"S%20I", "P P"},
}

// selQuery is one projected query: sel nil means no $select at all.
type selQuery struct {
	sel    []selToken
	filter string
	top    int
}

func (q selQuery) params() string {
	var p []string
	if q.filter != "" {
		p = append(p, "$filter="+strings.ReplaceAll(url.QueryEscape(q.filter), "+", "%20"))
	}
	if q.top > 0 {
		p = append(p, "$top="+strconv.Itoa(q.top))
	}
	if q.sel != nil {
		var names []string
		for _, t := range q.sel {
			names = append(names, strings.ReplaceAll(t.text, " ", "%20"))
		}
		p = append(p, "$select="+strings.Join(names, ","))
	}
	return strings.Join(p, "&")
}

// shape is the query's class: the $select list abstracted, whether a
// filter and $top came with it.
func (q selQuery) shape() string {
	s := "no $select"
	if q.sel != nil {
		var labels []string
		for i, t := range q.sel {
			l := t.label
			if slices.ContainsFunc(q.sel[:i], func(u selToken) bool { return u.text == t.text }) {
				l += " (again)"
			}
			labels = append(labels, l)
		}
		s = "$select=" + strings.Join(labels, ",")
	}
	if q.filter != "" {
		s += " with $filter"
	}
	if q.top > 0 {
		s += " with $top"
	}
	return s
}

// projected is a query's answer, pages followed: the entities as flat
// name → text maps (values canonical, annotations as "name@odata.type",
// the Timestamp's value and odata.etag's reduced to their form).
type projected struct {
	rep      reply // the last page's, or the failing one's
	metadata string
	ents     []map[string]string
	decode   string // a body that did not decode
}

// page adds one answered page (of entities or tables) to res; false when
// the page ends the query: a failure, or a body that did not decode.
func (res *projected) page(rep reply) bool {
	res.rep = rep
	if rep.status != 200 {
		return false
	}
	var body struct {
		Value []json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(rep.body, &body); err != nil {
		res.decode = err.Error()
		return false
	}
	if res.metadata == "" {
		res.metadata = metadataTail(rep.body)
	}
	for _, raw := range body.Value {
		m, err := flatten(raw)
		if err != nil {
			res.decode = err.Error()
			return false
		}
		res.ents = append(res.ents, m)
	}
	return true
}

// flatten reads one minimal-metadata object as flat name → text.
func flatten(raw []byte) (map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for name, v := range m {
		switch {
		case name == "odata.metadata":
			continue
		case name == "odata.etag":
			s, _ := v.(string)
			out[name] = etagShape(s)
			continue
		case strings.HasSuffix(name, "@odata.type"):
			out[name] = fmt.Sprint(v)
			continue
		}
		typ, _ := m[name+"@odata.type"].(string)
		pv, err := canonical(typ, v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = pv.String()
		if name == "Timestamp" && pv.typ != "null" {
			out[name] = pv.typ + "(present)"
		}
	}
	return out, nil
}

// metadataTail is odata.metadata after its '#': what it says about the
// answer (the table, @Element, $select), not the server's address.
func metadataTail(body []byte) string {
	var m struct {
		Meta *string `json:"odata.metadata"`
	}
	if json.Unmarshal(body, &m) != nil || m.Meta == nil {
		return "(none)"
	}
	_, tail, _ := strings.Cut(*m.Meta, "#")
	return tail
}

// queryProjected runs q on table at base, following continuations.
func queryProjected(base, table string, q selQuery) projected {
	var res projected
	var next []string
	for range 100 {
		params := q.params()
		for _, n := range next {
			if params != "" {
				params += "&"
			}
			params += n
		}
		path := "/" + table + "()"
		if params != "" {
			path += "?" + params
		}
		rep := do(base, "GET", path, nil, nil)
		if !res.page(rep) {
			return res
		}
		pk, rk := rep.hdr.Get("x-ms-continuation-NextPartitionKey"), rep.hdr.Get("x-ms-continuation-NextRowKey")
		if pk == "" && rk == "" {
			return res
		}
		next = []string{"NextPartitionKey=" + url.QueryEscape(pk), "NextRowKey=" + url.QueryEscape(rk)}
	}
	return res
}

// userNames are the properties the projection test's entities have.
var userNames = []string{"S", "I", "L", "D", "B", "T", "G", "X", "M"}

// nameClass abstracts an answered property (or annotation) name.
func nameClass(n string) string {
	base, ann := strings.CutSuffix(n, "@odata.type")
	c := base
	switch {
	case slices.Contains(userNames, base):
		c = "P"
	case base == "s":
		c = "p (case)"
	}
	if ann {
		c += "@odata.type"
	}
	return c
}

// projDiff compares two answers: "" when they agree, else the first
// difference, with property names abstracted.
func projDiff(ts, az projected) string {
	if ts.rep.status != az.rep.status || ts.rep.code != az.rep.code {
		return fmt.Sprintf("status: tablestore %s, azurite %s", ts.rep.text(), az.rep.text())
	}
	if ts.rep.status != 200 {
		return ""
	}
	if ts.decode != "" || az.decode != "" {
		return fmt.Sprintf("undecodable answer: tablestore %q, azurite %q", ts.decode, az.decode)
	}
	if len(ts.ents) != len(az.ents) {
		return fmt.Sprintf("entities: tablestore %d, azurite %d", len(ts.ents), len(az.ents))
	}
	for i := range ts.ents {
		a, b := ts.ents[i], az.ents[i]
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range a {
				if !yield(n) {
					return
				}
			}
			for n := range b {
				if _, ok := a[n]; !ok && !yield(n) {
					return
				}
			}
		})
		for _, n := range names {
			x, okx := a[n]
			y, oky := b[n]
			if okx == oky && x == y {
				continue
			}
			if okx && oky {
				// Types differ, or values do: the types say which.
				tx, _, _ := strings.Cut(x, "(")
				ty, _, _ := strings.Cut(y, "(")
				if tx == ty && !strings.HasSuffix(n, "@odata.type") {
					return fmt.Sprintf("property %s: same type %s, other value", nameClass(n), tx)
				}
			}
			return fmt.Sprintf("property %s: tablestore %s, azurite %s", nameClass(n), projState(n, x, okx), projState(n, y, oky))
		}
	}
	return ""
}

// metadataClass is a difference in odata.metadata (compared apart from
// the properties: it is one per answer, and differs on its own), with the
// table's name and the $select list abstracted; "" when they agree.
func metadataClass(ts, az projected, table string) string {
	if ts.rep.status != 200 || az.rep.status != 200 || ts.metadata == az.metadata {
		return ""
	}
	abs := func(m string) string {
		if i := strings.Index(m, "$select="); i >= 0 {
			m = m[:i] + "$select=…"
		}
		return strings.ReplaceAll(m, table, "<t>")
	}
	return fmt.Sprintf("odata.metadata: tablestore #%s, azurite #%s", abs(ts.metadata), abs(az.metadata))
}

// projState is a property's state for a class: absent, null, its type
// (a value's text would split classes by value), an annotation's value.
func projState(name, v string, ok bool) string {
	switch {
	case !ok:
		return "absent"
	case strings.HasSuffix(name, "@odata.type"), name == "odata.etag", v == "null":
		return v
	}
	t, _, _ := strings.Cut(v, "(")
	return t
}

// projEntities are the projection test's entities: two partitions, each
// property of its one type (so that filters on them agree) on about two
// entities in three, and sometimes a property named s beside S.
func projEntities(r *rand.Rand, n int) []entity {
	var out []entity
	for i := range n {
		e := entity{pk: []string{"a", "b"}[i*2/n], rk: fmt.Sprintf("r%02d", i), props: map[string]value{}}
		for _, p := range props {
			if r.IntN(3) > 0 {
				e.props[p.name] = randValue(r, p.main)
			}
		}
		if r.IntN(4) == 0 {
			e.props["s"] = randValue(r, tString)
		}
		out = append(out, e)
	}
	return out
}

// projFilters are the filters projected queries take: ones both servers
// answer alike on these entities (the query test compares filters).
var projFilters = []string{"PartitionKey eq 'a'", "RowKey ge 'r05'", "I lt 7", "S eq 'a' or B eq true", "Missing eq 1"}

func randSelQuery(r *rand.Rand) selQuery {
	var q selQuery
	switch r.IntN(12) {
	case 0:
		// no $select
	case 1:
		q.sel = []selToken{{"", ""}}
	default:
		for range 1 + r.IntN(4) {
			q.sel = append(q.sel, selTokens[r.IntN(len(selTokens))])
		}
	}
	if r.IntN(2) == 0 {
		q.filter = projFilters[r.IntN(len(projFilters))]
	}
	if r.IntN(3) == 0 {
		q.top = 1 + r.IntN(5)
	}
	return q
}

// shrinkSel makes q smaller while it still answers difference d: fewer
// names, no filter, no $top.
func shrinkSel(q selQuery, d string, diffOf func(selQuery) string) selQuery {
	try := func(c selQuery) bool {
		if diffOf(c) == d {
			q = c
			return true
		}
		return false
	}
	for i := 0; i < len(q.sel) && len(q.sel) > 1; i++ {
		c := q
		c.sel = slices.Delete(slices.Clone(q.sel), i, i+1)
		if try(c) {
			i--
		}
	}
	if q.filter != "" {
		c := q
		c.filter = ""
		try(c)
	}
	if q.top > 0 {
		c := q
		c.top = 0
		try(c)
	}
	return q
}

// fixedSelQueries are written by hand: each token alone, with the keys,
// with a filter and $top; * and an empty $select; a repeat.
func fixedSelQueries() []selQuery {
	keys := []selToken{selTokens[0], selTokens[1]}
	var out []selQuery
	for _, t := range selTokens {
		out = append(out, selQuery{sel: []selToken{t}}, selQuery{sel: append(slices.Clone(keys), t)})
	}
	out = append(out,
		selQuery{sel: []selToken{{"S", "P"}, {"S", "P"}}},
		selQuery{sel: []selToken{{"S", "P"}, {"s", "p (case)"}}},
		selQuery{sel: []selToken{{"*", "all (*)"}, {"Missing", "Missing"}}},
		selQuery{sel: []selToken{{"", ""}}, filter: "PartitionKey eq 'a'", top: 2},
		selQuery{sel: []selToken{{"*", "all (*)"}}, filter: "I lt 7", top: 3},
		selQuery{sel: []selToken{{"S", "P"}, {"Timestamp", "Timestamp"}}, filter: "RowKey ge 'r05'", top: 2},
	)
	return out
}

// tableSelects are Query Tables' $select lists, written by hand.
var tableSelects = []string{"TableName", "tablename", "*", "", "TableName,TableName", "Other", "TableName,Other", "%20TableName", "TableName,*", "odata.etag"}

// TestDifferentialSelect writes the same entities to both servers (every
// EDM type, properties missing on some, a property differing from
// another only in case) and compares projected queries: generated and
// hand-written $select lists (the keys and Timestamp or not, absent
// properties, repeats, names in another case, blanks, *, an empty
// $select), with and without $filter and $top (continuations followed).
// Compared: the status and error code, every entity's properties (names, values, types and @odata.type annotations, Timestamp's and
// odata.etag's form only) and odata.metadata after its '#'. Point reads
// and Query Tables with the hand-written $select lists too.
//
// DIFF_SEED (default 1) picks them, DIFF_SELECTS (default 300) how many.
func TestDifferentialSelect(t *testing.T) {
	requireServers(t)
	seed := uint64(envInt("DIFF_SEED", 1))
	n := envInt("DIFF_SELECTS", 300)
	t.Logf("azurite-table %s; seed %d, %d projected queries (DIFF_SEED, DIFF_SELECTS)", azuriteVersion, seed, n)
	known := loadKnown(t)
	r := rand.New(rand.NewPCG(seed, 0x5e1ec7))
	h := newHarness(t, fmt.Sprintf("diffsel%d", seed))
	for _, e := range projEntities(r, 14) {
		wt := do(tsURL, "POST", "/"+h.name, map[string]string{"Prefer": "return-no-content"}, e.jsonOf())
		wa := do(azURL, "POST", "/"+h.name, map[string]string{"Prefer": "return-no-content"}, e.jsonOf())
		if wt.status != 204 || wa.status != 204 {
			t.Fatalf("insert %s: tablestore %s, azurite %s", e.jsonOf(), wt.text(), wa.text())
		}
	}
	cache := map[string]string{}
	answers := map[string][2]projected{}
	diffOf := func(q selQuery) string {
		k := q.params()
		if d, ok := cache[k]; ok {
			return d
		}
		a, b := queryProjected(tsURL, h.name, q), queryProjected(azURL, h.name, q)
		d := projDiff(a, b)
		cache[k], answers[k] = d, [2]projected{a, b}
		return d
	}
	check := func(q selQuery) {
		d := diffOf(q)
		p := answers[q.params()]
		if m := metadataClass(p[0], p[1], h.name); m != "" {
			h.record("select: "+m, fmt.Sprintf("GET /%s()?%s\n  tablestore: %s\n  azurite:    %s", h.name, q.params(), p[0].metadata, p[1].metadata))
		}
		if d == "" {
			return
		}
		min := shrinkSel(q, d, diffOf)
		class := "select: " + min.shape() + ": " + d
		if f := h.findings[class]; f != nil {
			f.count++
			return
		}
		p = answers[min.params()]
		repro := fmt.Sprintf("GET /%s()?%s\n  tablestore: %s %s %s\n  azurite:    %s %s %s", h.name, min.params(),
			p[0].rep.text(), firstLine(p[0].rep.msg), short(string(p[0].rep.body)), p[1].rep.text(), firstLine(p[1].rep.msg), short(string(p[1].rep.body)))
		h.record(class, repro)
	}
	for _, q := range fixedSelQueries() {
		check(q)
	}
	for range n {
		check(randSelQuery(r))
	}
	selectPointReads(h)
	selectTables(h)
	h.t.Logf("%d projected queries run", len(cache))
	h.report(known)
}

// selectPointReads compares point reads (GET /t(PartitionKey,RowKey))
// with the hand-written $select lists, on two entities.
func selectPointReads(h *harness) {
	for _, q := range fixedSelQueries() {
		if q.filter != "" || q.top > 0 {
			continue
		}
		for _, rk := range []string{"r00", "r01"} {
			path := keyPath(h.name, "a", rk) + "?" + q.params()
			var res [2]projected
			for i, base := range []string{tsURL, azURL} {
				rep := do(base, "GET", path, nil, nil)
				res[i].rep = rep
				if rep.status != 200 {
					continue
				}
				res[i].metadata = metadataTail(rep.body)
				m, err := flatten(rep.body)
				if err != nil {
					res[i].decode = err.Error()
				}
				res[i].ents = append(res[i].ents, m)
			}
			repro := fmt.Sprintf("GET %s\n  tablestore: %s %s\n  azurite:    %s %s", path,
				res[0].rep.text(), short(string(res[0].rep.body)), res[1].rep.text(), short(string(res[1].rep.body)))
			if m := metadataClass(res[0], res[1], h.name); m != "" {
				h.record("select, point read: "+m, repro)
			}
			if d := projDiff(res[0], res[1]); d != "" {
				h.record("select, point read: "+q.shape()+": "+d, repro)
			}
		}
	}
}

// selectTables compares Query Tables' answers to $select lists (alone,
// with a filter, with $top) on two tables of its own.
func selectTables(h *harness) {
	prefix := "qsel" + strings.TrimPrefix(h.name, "diffsel") + "x"
	for _, s := range []string{"a", "b"} {
		h.createTable(prefix + s)
	}
	// Every request keeps to the two tables (a table answered without
	// its name cannot be told from another test's).
	own := "&$filter=" + strings.ReplaceAll(url.QueryEscape("TableName ge '"+prefix+"' and TableName lt '"+prefix+"~'"), "+", "%20")
	for _, sel := range tableSelects {
		for _, extra := range []string{"", "&$top=1"} {
			path := "/Tables?$select=" + sel + own + extra
			var res [2]projected
			for i, base := range []string{tsURL, azURL} {
				res[i] = queryTablesProjected(base, path)
			}
			d := projDiff(res[0], res[1])
			if m := metadataClass(res[0], res[1], prefix); m != "" && d == "" {
				d = m
			}
			if d == "" {
				continue
			}
			shape := "tables: $select=" + sel
			if extra != "" {
				shape += " with $top"
			}
			h.record(shape+": "+d, fmt.Sprintf("GET %s\n  tablestore: %s %s\n  azurite:    %s %s", path,
				res[0].rep.text(), short(string(res[0].rep.body)), res[1].rep.text(), short(string(res[1].rep.body))))
		}
	}
}

// queryTablesProjected runs one Query Tables request and its next pages.
func queryTablesProjected(base, path string) projected {
	var res projected
	next := ""
	for range 100 {
		p := path
		if next != "" {
			p += "&NextTableName=" + url.QueryEscape(next)
		}
		rep := do(base, "GET", p, nil, nil)
		if !res.page(rep) {
			return res
		}
		next = rep.hdr.Get("x-ms-continuation-NextTableName")
		if next == "" {
			return res
		}
	}
	return res
}
