package differential

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// wop is one generated write on an entity of a case's partition.
type wop struct {
	// method: POST (insert), PUT (replace; insert-or-replace without
	// If-Match), MERGE or PATCH (merge; insert-or-merge without If-Match),
	// DELETE.
	method string
	// ifm: match (the entity's current ETag), stale (its ETag before the
	// last write), star, none, other (a well-formed ETag of another
	// time), malformed.
	ifm    string
	rk     string
	pk     string // "" is the case's PartitionKey
	props  map[string]value
	prefer string // POST: the Prefer header ("" none)
	// bodyKeys: "" the keys in the body are the URL's; "omitted": none
	// in the body; "other": another RowKey in the body (PUT, MERGE, PATCH).
	bodyKeys string
	// upperTable addresses the table by its name in upper case (table
	// names are case-insensitive).
	upperTable bool
	// otherTable addresses another table (fixed change sets only).
	otherTable bool
}

// desc names the operation for a class of difference.
func (o wop) desc() string {
	s := o.method + " If-Match " + o.ifm
	if o.method == "POST" {
		s = "POST"
		if o.prefer != "" {
			s += " (" + o.prefer + ")"
		}
	}
	if o.bodyKeys != "" {
		s += ", body keys " + o.bodyKeys
	}
	if o.otherTable {
		s += ", another table"
	}
	return s
}

// detailDesc is desc with what a class leaves out (it is narrowed away
// when it does not matter; a reproducer shows what is left).
func (o wop) detailDesc() string {
	s := o.desc()
	if o.upperTable {
		s += ", table name in upper case"
	}
	if o.rk == "" {
		s += ", empty RowKey"
	}
	return s
}

// wcase is a partition's starting entities (each inserted, then merged
// with nothing so that it has a stale ETag) and writes applied in order.
type wcase struct {
	prior []entity
	ops   []wop
}

// rowKeys are the RowKeys cases use: a quote and a non-ASCII letter.
var rowKeys = []string{"a", "b'q", "cü", ""}

var ifmKinds = []string{"match", "match", "stale", "star", "star", "none", "none", "other", "weak-wrong", "malformed"}

// randProps draws properties as genEntities does (sometimes none).
func randProps(r *rand.Rand) map[string]value {
	if r.IntN(8) == 0 {
		return map[string]value{}
	}
	p := genEntities(r, 1)[0].props
	for name := range p { // fewer properties: differences narrow faster
		if r.IntN(2) == 0 {
			delete(p, name)
		}
	}
	if r.IntN(15) == 0 {
		// A client's Timestamp, which the service ignores.
		p["Timestamp"] = value{tDateTime, poolTime[r.IntN(len(poolTime))]}
	}
	if r.IntN(10) == 0 {
		// A JSON null: how a property without a value is written.
		p[[]string{"S", "I", "N"}[r.IntN(3)]] = value{tNull, nil}
	}
	return p
}

// randPrefer draws an insert's Prefer header: none, or either value.
func randPrefer(r *rand.Rand) string {
	return []string{"", "return-content", "return-no-content"}[r.IntN(3)]
}

func randWop(r *rand.Rand) wop {
	o := wop{method: []string{"POST", "PUT", "PUT", "MERGE", "PATCH", "DELETE"}[r.IntN(6)], rk: rowKeys[r.IntN(len(rowKeys))], props: randProps(r)}
	if o.method == "POST" {
		o.prefer = randPrefer(r)
		o.ifm = "none"
	} else {
		o.ifm = ifmKinds[r.IntN(len(ifmKinds))]
	}
	if o.method == "DELETE" {
		o.props = nil
	}
	if o.method != "DELETE" && o.method != "POST" && r.IntN(12) == 0 {
		o.bodyKeys = []string{"omitted", "other"}[r.IntN(2)]
	}
	o.upperTable = r.IntN(15) == 0
	return o
}

func randWcase(r *rand.Rand, maxOps int) wcase {
	var c wcase
	for _, rk := range rowKeys {
		if r.IntN(2) == 0 {
			c.prior = append(c.prior, entity{rk: rk, props: randProps(r)})
		}
	}
	for range 1 + r.IntN(maxOps) {
		c.ops = append(c.ops, randWop(r))
	}
	return c
}

// side is one server's view of a case: its base URL and the ETags it
// gave each RowKey.
type side struct {
	name, base  string
	cur, stale  map[string]string // by PartitionKey/RowKey
	deletedLast map[string]string
}

func newSide(name, base string) *side {
	return &side{name: name, base: base, cur: map[string]string{}, stale: map[string]string{}, deletedLast: map[string]string{}}
}

// otherETag is a well-formed ETag no entity here has.
const otherETag = `W/"datetime'2001-02-03T04%3A05%3A06.7000000Z'"`

// ifMatch resolves an If-Match kind to this side's header value ("" none).
func (s *side) ifMatch(key, kind string) string {
	switch kind {
	case "match":
		if e := s.cur[key]; e != "" {
			return e
		}
		if e := s.deletedLast[key]; e != "" {
			return e
		}
		return otherETag
	case "stale":
		if e := s.stale[key]; e != "" {
			return e
		}
		return otherETag
	case "star":
		return "*"
	case "other":
		return otherETag
	case "weak-wrong":
		// Well-formed, but no datetime: the service answers 412
		// (Azurite issue #1229, observed on Azure).
		return `W/"wrong"`
	case "malformed":
		return "not-an-etag"
	}
	return ""
}

// body is the JSON of an entity with the given keys and properties.
func body(pk, rk string, props map[string]value) []byte {
	return entity{pk: pk, rk: rk, props: props}.jsonOf()
}

// opBody is the body o sends to the entity pk, o.rk.
func (o wop) body(pk string) []byte {
	switch o.bodyKeys {
	case "omitted":
		var m map[string]any
		json.Unmarshal(body(pk, o.rk, o.props), &m)
		delete(m, "PartitionKey")
		delete(m, "RowKey")
		b, _ := json.Marshal(m)
		return b
	case "other":
		return body(pk, o.rk+"x", o.props)
	}
	return body(pk, o.rk, o.props)
}

// tableIn is the table's name as o addresses it.
func (o wop) tableIn(table string) string {
	if o.otherTable {
		return table + "o"
	}
	if o.upperTable {
		return strings.ToUpper(table)
	}
	return table
}

// send applies o on this side and records the ETag it answers.
func (s *side) send(table, pk string, o wop) reply {
	if o.pk != "" {
		pk = o.pk
	}
	key := pk + "/" + o.rk
	var rep reply
	switch o.method {
	case "POST":
		hdr := map[string]string{}
		if o.prefer != "" {
			hdr["Prefer"] = o.prefer
		}
		rep = do(s.base, "POST", "/"+o.tableIn(table), hdr, o.body(pk))
	case "DELETE":
		rep = do(s.base, "DELETE", keyPath(o.tableIn(table), pk, o.rk), map[string]string{"If-Match": s.ifMatch(key, o.ifm)}, nil)
	default:
		rep = do(s.base, o.method, keyPath(o.tableIn(table), pk, o.rk), map[string]string{"If-Match": s.ifMatch(key, o.ifm)}, o.body(pk))
	}
	s.applied(key, o.method, rep)
	return rep
}

// applied updates the ETags after a successful write.
func (s *side) applied(key, method string, rep reply) {
	if rep.status < 200 || rep.status >= 300 {
		return
	}
	if method == "DELETE" {
		s.deletedLast[key] = s.cur[key]
		s.stale[key], s.cur[key] = s.cur[key], ""
		return
	}
	if rep.etag != "" {
		s.stale[key], s.cur[key] = s.cur[key], rep.etag
	}
}

// setup writes a case's starting entities on this side: insert, then an
// empty merge, so that each has a current and a stale ETag. It fails when
// the two ETags are equal after a few tries (a clock too coarse).
func (s *side) setup(table, pk string, prior []entity) error {
	for _, e := range prior {
		key := pk + "/" + e.rk
		rep := do(s.base, "POST", "/"+table, map[string]string{"Prefer": "return-no-content"}, body(pk, e.rk, e.props))
		if rep.status != 204 {
			return fmt.Errorf("%s: setup insert %s: %s %s", s.name, key, rep.text(), rep.msg)
		}
		s.cur[key] = rep.etag
		for try := 0; ; try++ {
			m := do(s.base, "MERGE", keyPath(table, pk, e.rk), map[string]string{"If-Match": "*"}, body(pk, e.rk, nil))
			if m.status != 204 {
				return fmt.Errorf("%s: setup merge %s: %s %s", s.name, key, m.text(), m.msg)
			}
			if m.etag != s.cur[key] {
				s.stale[key], s.cur[key] = s.cur[key], m.etag
				break
			}
			if try == 5 {
				return fmt.Errorf("%s: setup merge %s: the ETag did not change", s.name, key)
			}
		}
	}
	return nil
}

// readBack is an entity as read by a point GET: the status, its
// properties (normalized) and ETag forms.
type readBack struct {
	rep       reply
	props     map[string]pval
	bodyETag  string // odata.etag
	decodeErr string
}

func read(base, table, pk, rk string) readBack {
	rep := do(base, "GET", keyPath(table, pk, rk), nil, nil)
	rb := readBack{rep: rep}
	if rep.status != 200 {
		return rb
	}
	var m map[string]any
	if err := json.Unmarshal(rep.body, &m); err == nil {
		rb.bodyETag, _ = m["odata.etag"].(string)
	}
	p, err := normalize(rep.body)
	if err != nil {
		rb.decodeErr = err.Error()
	}
	rb.props = p
	return rb
}

// writeDiff compares one write's answers and the entity read back after
// it; it returns "" when they agree, else the difference (without the
// operation, which the caller names).
func writeDiff(o wop, wt, wa reply, rt, ra readBack) string {
	if wt.status != wa.status || wt.code != wa.code {
		return fmt.Sprintf("status: tablestore %s, azurite %s", wt.text(), wa.text())
	}
	if st, sa := etagShape(wt.etag), etagShape(wa.etag); st != sa {
		return fmt.Sprintf("response ETag: tablestore %s, azurite %s", st, sa)
	}
	if pt, pa := wt.hdr.Get("Preference-Applied"), wa.hdr.Get("Preference-Applied"); pt != pa {
		return fmt.Sprintf("Preference-Applied: tablestore %q, azurite %q", pt, pa)
	}
	if wt.status == 201 {
		// The inserted entity as answered: the same as it reads back.
		bt, errT := normalize(wt.body)
		ba, errA := normalize(wa.body)
		if errT != nil || errA != nil {
			return fmt.Sprintf("insert answer undecodable: tablestore %v, azurite %v", errT, errA)
		}
		if d := propsDiff(o, bt, ba); d != "" {
			return "insert answer " + d
		}
	}
	if rt.rep.status != ra.rep.status || rt.rep.code != ra.rep.code {
		return fmt.Sprintf("read back: tablestore %s, azurite %s", rt.rep.text(), ra.rep.text())
	}
	if rt.rep.status != 200 {
		return ""
	}
	if st, sa := etagShape(rt.rep.etag), etagShape(ra.rep.etag); st != sa {
		return fmt.Sprintf("read-back ETag header: tablestore %s, azurite %s", st, sa)
	}
	if st, sa := etagShape(rt.bodyETag), etagShape(ra.bodyETag); st != sa {
		return fmt.Sprintf("read-back odata.etag: tablestore %s, azurite %s", st, sa)
	}
	if wt.status < 300 && wt.etag != "" {
		if et, ea := wt.etag == rt.rep.etag, wa.etag == ra.rep.etag; et != ea {
			return fmt.Sprintf("read-back ETag equals the write's: tablestore %v, azurite %v", et, ea)
		}
	}
	return propsDiff(o, rt.props, ra.props)
}

// propsDiff names the first property a and b differ in, by how o wrote it.
func propsDiff(o wop, a, b map[string]pval) string {
	for _, n := range propNames(a, b) {
		x, okx := a[n]
		y, oky := b[n]
		if okx == oky && x == y {
			continue
		}
		name := n
		if n != "PartitionKey" && n != "RowKey" && n != "Timestamp" {
			name = "P"
			if v, ok := o.props[n]; ok {
				name += " written as " + strings.TrimPrefix(v.typ, "Edm.")
			} else {
				name += " not written"
			}
		}
		if okx && oky && x.typ == y.typ {
			return fmt.Sprintf("property %s: same type %s, other value", name, x.typ)
		}
		return fmt.Sprintf("property %s: tablestore %s, azurite %s", name, typeState(x, okx), typeState(y, oky))
	}
	return ""
}

// writeHarness runs write cases on one table of each server.
type writeHarness struct {
	*harness
	table string
	n     int // partitions used so far
	// stats counts the change sets' outcomes (nil: not counted).
	stats map[string]int
}

// runWcase runs c on a fresh partition of both servers and returns the
// class and details of its first difference ("" when none).
func (w *writeHarness) runWcase(c wcase) (class, detail string) {
	w.n++
	pk := fmt.Sprintf("w%d", w.n)
	ts, az := newSide("tablestore", tsURL), newSide("azurite", azURL)
	for _, s := range []*side{ts, az} {
		if err := s.setup(w.table, pk, c.prior); err != nil {
			return "setup failed", err.Error()
		}
	}
	state := map[string]bool{}
	for _, e := range c.prior {
		state[e.rk] = true
	}
	for i, o := range c.ops {
		wt, wa := ts.send(w.table, pk, o), az.send(w.table, pk, o)
		rt, ra := read(tsURL, w.table, pk, o.rk), read(azURL, w.table, pk, o.rk)
		exists := "a missing"
		if state[o.rk] {
			exists = "an existing"
		}
		if d := writeDiff(o, wt, wa, rt, ra); d != "" {
			detail = fmt.Sprintf("op %d of %d: %s %s\n  tablestore: %s %s (ETag %s)\n  azurite:    %s %s (ETag %s)\n  read back: tablestore %s %s %s\n             azurite    %s %s %s",
				i, len(c.ops), o.detailDesc(), keyPath(o.tableIn(w.table), pk, o.rk), wt.text(), firstLine(wt.msg), wt.etag, wa.text(), firstLine(wa.msg), wa.etag,
				rt.rep.text(), rt.rep.etag, short(fmt.Sprint(rt.props)), ra.rep.text(), ra.rep.etag, short(fmt.Sprint(ra.props)))
			return fmt.Sprintf("write %s on %s entity: %s", o.desc(), exists, d), detail
		}
		state[o.rk] = rt.rep.status == 200
	}
	return "", ""
}

// shrinkWcase makes a case with difference class smaller while the class
// stays: fewer operations, fewer starting entities, fewer properties.
func (w *writeHarness) shrinkWcase(c wcase, class, detail string) (wcase, string) {
	return shrinkCase(c, class, detail, w.runWcase)
}

// shrinkCase makes c smaller while run still finds difference class in it.
func shrinkCase(c wcase, class, detail string, run func(wcase) (string, string)) (wcase, string) {
	try := func(d wcase) bool {
		cl, det := run(d)
		if cl == class {
			c, detail = d, det
			return true
		}
		return false
	}
	for i := 0; i < len(c.ops); i++ {
		d := wcase{prior: c.prior, ops: slices.Delete(slices.Clone(c.ops), i, i+1)}
		if len(d.ops) > 0 && try(d) {
			i--
		}
	}
	for i := 0; i < len(c.prior); i++ {
		if try(wcase{prior: slices.Delete(slices.Clone(c.prior), i, i+1), ops: c.ops}) {
			i--
		}
	}
	for i := range c.prior {
		for name := range c.prior[i].props {
			d := wcase{prior: slices.Clone(c.prior), ops: c.ops}
			d.prior[i].props = maps.Clone(c.prior[i].props)
			delete(d.prior[i].props, name)
			try(d)
		}
	}
	for i := range c.ops {
		if c.ops[i].upperTable {
			d := wcase{prior: c.prior, ops: slices.Clone(c.ops)}
			d.ops[i].upperTable = false
			try(d)
		}
		for name := range c.ops[i].props {
			d := wcase{prior: c.prior, ops: slices.Clone(c.ops)}
			d.ops[i].props = maps.Clone(c.ops[i].props)
			delete(d.ops[i].props, name)
			try(d)
		}
	}
	return c, detail
}

func (c wcase) String() string {
	var b strings.Builder
	b.WriteString("starting entities:")
	if len(c.prior) == 0 {
		b.WriteString(" none")
	}
	for _, e := range c.prior {
		fmt.Fprintf(&b, " %s", short(string(body("pk", e.rk, e.props))))
	}
	for i, o := range c.ops {
		if len(c.ops) > 20 && i == 3 {
			fmt.Fprintf(&b, "\n  … (%d operations in all, the others like these)", len(c.ops))
		}
		if len(c.ops) > 20 && i >= 3 && i < len(c.ops)-2 {
			continue
		}
		fmt.Fprintf(&b, "\n  op %d: %s RowKey %q", i, o.detailDesc(), o.rk)
		if o.pk != "" {
			fmt.Fprintf(&b, " PartitionKey %q", o.pk)
		}
		if o.props != nil {
			fmt.Fprintf(&b, " %s", short(string(o.body("pk"))))
		}
	}
	return b.String()
}

// short cuts s to a few hundred bytes for a reproducer.
func short(s string) string {
	if len(s) > 400 {
		return s[:400] + fmt.Sprintf("…(%d bytes)", len(s))
	}
	return s
}

// manyProps is n String properties named prefix000… of size characters.
func manyProps(prefix string, n, size int) map[string]value {
	m := map[string]value{}
	for i := range n {
		m[fmt.Sprintf("%s%03d", prefix, i)] = value{tString, strings.Repeat("x", size)}
	}
	return m
}

// fixedWcases are written by hand: merges whose result passes the
// entity's limits (252 properties, 1 MiB) though neither body does.
func fixedWcases() []wcase {
	var out []wcase
	for _, m := range []string{"MERGE", "PATCH"} {
		for _, ifm := range []string{"star", "none"} {
			out = append(out,
				wcase{prior: []entity{{rk: "a", props: manyProps("A", 200, 1)}}, ops: []wop{{method: m, ifm: ifm, rk: "a", props: manyProps("B", 100, 1)}}},
				wcase{prior: []entity{{rk: "a", props: manyProps("A", 10, 30000)}}, ops: []wop{{method: m, ifm: ifm, rk: "a", props: manyProps("B", 10, 30000)}}})
		}
	}
	return out
}

// TestDifferentialWrites applies the same generated writes (insert,
// replace, merge by MERGE and PATCH, insert-or-replace, insert-or-merge,
// delete; If-Match current, stale, *, absent, of another time, malformed;
// on existing and missing entities, up to three in a row on one entity)
// to both servers and compares the status and error code, the ETag's form
// and the entity read back after each.
//
// DIFF_SEED (default 1) picks them, DIFF_WRITES (default 300) how many
// cases.
func TestDifferentialWrites(t *testing.T) {
	requireServers(t)
	seed := uint64(envInt("DIFF_SEED", 1))
	n := envInt("DIFF_WRITES", 300)
	t.Logf("azurite-table %s; seed %d, %d write cases (DIFF_SEED, DIFF_WRITES)", azuriteVersion, seed, n)
	known := loadKnown(t)
	r := rand.New(rand.NewPCG(seed, 0x3717e5))
	h := newHarness(t, fmt.Sprintf("diffw%d", seed))
	w := &writeHarness{harness: h, table: h.name}
	for _, c := range fixedWcases() {
		if class, detail := w.runWcase(c); class != "" {
			h.record(class, c.String()+"\n  "+detail)
		}
	}
	for range n {
		c := randWcase(r, 3)
		class, detail := w.runWcase(c)
		if class == "" {
			continue
		}
		if f := h.findings[class]; f != nil {
			f.count++
			continue
		}
		min, detail := w.shrinkWcase(c, class, detail)
		h.record(class, min.String()+"\n  "+detail)
	}
	h.report(known)
}
