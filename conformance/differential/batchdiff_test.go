package differential

import (
	"bytes"
	"context"
	"fmt"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// batchRowKeys: more than a write case's, so that a change set can hold
// several entities.
var batchRowKeys = append(slices.Clone(rowKeys), "d", "e", "f")

// randBcase makes a change set on one partition: distinct entities
// mostly, sometimes one entity twice, an operation on another
// PartitionKey, or 100 or 101 inserts.
func randBcase(r *rand.Rand) wcase {
	c := wcase{}
	for _, rk := range batchRowKeys {
		if r.IntN(2) == 0 {
			c.prior = append(c.prior, entity{rk: rk, props: randProps(r)})
		}
	}
	if r.IntN(25) == 0 {
		n := 100 + r.IntN(2)
		for i := range n {
			c.ops = append(c.ops, wop{method: "POST", ifm: "none", rk: fmt.Sprintf("k%03d", i), props: map[string]value{"N": {tInt32, int32(i)}}, prefer: "return-no-content"})
		}
		return c
	}
	keys := slices.Clone(batchRowKeys)
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	n := 1 + r.IntN(5)
	for i := range n {
		o := randWop(r)
		o.rk = keys[i]
		if r.IntN(4) > 0 {
			o = validWop(r, o, slices.ContainsFunc(c.prior, func(e entity) bool { return e.rk == o.rk }))
			o.bodyKeys = ""
		}
		c.ops = append(c.ops, o)
	}
	if n > 1 && r.IntN(6) == 0 {
		i := 1 + r.IntN(n-1)
		c.ops[i].rk = c.ops[r.IntN(i)].rk
	}
	if r.IntN(10) == 0 {
		c.ops[r.IntN(n)].pk = "other"
	}
	return c
}

// validWop turns o into a write that succeeds on its own: on an existing
// entity an update or delete with its ETag or *, or an upsert; on a
// missing one an insert or an upsert. Without it most change sets would
// fail and the state after a commit would hardly be compared.
func validWop(r *rand.Rand, o wop, exists bool) wop {
	if exists {
		o.method = []string{"PUT", "MERGE", "PATCH", "DELETE"}[r.IntN(4)]
		o.ifm = []string{"match", "star", "none"}[r.IntN(3)]
		if o.method == "DELETE" {
			o.ifm = []string{"match", "star"}[r.IntN(2)]
		}
	} else {
		o.method = []string{"POST", "PUT", "MERGE", "PATCH"}[r.IntN(4)]
		o.ifm = "none"
		o.prefer = randPrefer(r)
	}
	if o.method == "DELETE" {
		o.props = nil
	} else if o.props == nil {
		o.props = map[string]value{}
	}
	return o
}

// opContext describes operation i of change set c for a class: the
// operation, whether its entity existed before the change set, and
// whether it repeats an entity or names another PartitionKey.
func opContext(c wcase, i int) string {
	if i < 0 || i >= len(c.ops) {
		return fmt.Sprintf("index %d (no such operation)", i)
	}
	o := c.ops[i]
	s := o.desc()
	if o.pk == "" && slices.ContainsFunc(c.prior, func(e entity) bool { return e.rk == o.rk }) {
		s += " on an existing entity"
	} else {
		s += " on a missing entity"
	}
	if slices.ContainsFunc(c.ops[:i], func(p wop) bool { return p.rk == o.rk && p.pk == o.pk }) {
		s += ", its second operation"
	}
	if o.pk != "" {
		s += ", other PartitionKey"
	}
	if len(c.ops) > 99 {
		s += fmt.Sprintf(", in a change set of %d", len(c.ops))
	}
	return s
}

// batchBody is the multipart $batch request for c on one side.
func (s *side) batchBody(table, pk string, c wcase) (string, []byte) {
	var b bytes.Buffer
	const bb, cb = "batch_d1ff", "changeset_d1ff"
	fmt.Fprintf(&b, "--%s\r\nContent-Type: multipart/mixed; boundary=%s\r\n\r\n", bb, cb)
	for i, o := range c.ops {
		p := pk
		if o.pk != "" {
			p = o.pk
		}
		fmt.Fprintf(&b, "--%s\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n", cb)
		url := s.base + keyPath(o.tableIn(table), p, o.rk)
		if o.method == "POST" {
			url = s.base + "/" + o.tableIn(table)
		}
		fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nDataServiceVersion: 3.0\r\nContent-ID: %d\r\n", o.method, url, i+1)
		if m := s.ifMatch(p+"/"+o.rk, o.ifm); m != "" && o.method != "POST" {
			fmt.Fprintf(&b, "If-Match: %s\r\n", m)
		}
		if o.prefer != "" {
			fmt.Fprintf(&b, "Prefer: %s\r\n", o.prefer)
		}
		if o.method == "DELETE" {
			b.WriteString("\r\n")
			continue
		}
		ent := o.body(p)
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s\r\n", len(ent), ent)
	}
	fmt.Fprintf(&b, "--%s--\r\n\r\n--%s--\r\n", cb, bb)
	return "multipart/mixed; boundary=" + bb, b.Bytes()
}

// batchOutcome is a $batch answer: the request's status, and the
// sub-responses' statuses, or the failure's code and the operation index
// its message starts with.
type batchOutcome struct {
	rep   reply
	subs  []int
	hdrs  []map[string]string // each sub-response's headers, names in lower case
	code  string
	index int // -1: none
	msg   string
}

var (
	subStatusRE = regexp.MustCompile(`(?m)^HTTP/1\.1 (\d{3})`)
	indexRE     = regexp.MustCompile(`^(\d+):`)
)

func parseBatch(rep reply) batchOutcome {
	out := batchOutcome{rep: rep, index: -1}
	if rep.status != 202 {
		return out
	}
	for _, m := range subStatusRE.FindAllStringSubmatchIndex(string(rep.body), -1) {
		n, _ := strconv.Atoi(string(rep.body[m[2]:m[3]]))
		out.subs = append(out.subs, n)
		h := map[string]string{}
		rest := string(rep.body[m[1]:])
		head, _, _ := strings.Cut(strings.ReplaceAll(rest, "\r\n", "\n"), "\n\n")
		for _, line := range strings.Split(head, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				h[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		out.hdrs = append(out.hdrs, h)
	}
	for _, line := range strings.Split(string(rep.body), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "{") && strings.Contains(line, "odata.error") {
			out.code, out.msg = odataError([]byte(line))
			if m := indexRE.FindStringSubmatch(out.msg); m != nil {
				out.index, _ = strconv.Atoi(m[1])
			}
		}
	}
	return out
}

func (b batchOutcome) failed() bool {
	return b.rep.status != 202 || slices.ContainsFunc(b.subs, func(s int) bool { return s >= 300 })
}

// summary is the outcome for a class: where it failed, not the values.
func (b batchOutcome) summary(c wcase) string {
	if b.rep.status != 202 {
		return b.rep.text()
	}
	if !b.failed() {
		return "commits"
	}
	sub := 0
	for _, s := range b.subs {
		if s >= 300 {
			sub = s
		}
	}
	if b.index < 0 {
		return fmt.Sprintf("fails %d %s with no index", sub, b.code)
	}
	return fmt.Sprintf("fails %d %s at %s", sub, b.code, opContext(c, b.index))
}

// subHeaderDiff compares the headers of one sub-response that say
// something about the operation (not dates or request ids): the ETag's
// form, Preference-Applied, and whether Location, DataServiceId and
// Content-Type are there.
func subHeaderDiff(a, b map[string]string) string {
	if x, y := etagShape(a["etag"]), etagShape(b["etag"]); x != y {
		return fmt.Sprintf("ETag tablestore %s, azurite %s", x, y)
	}
	if x, y := a["preference-applied"], b["preference-applied"]; x != y {
		return fmt.Sprintf("Preference-Applied tablestore %q, azurite %q", x, y)
	}
	for _, name := range []string{"location", "dataserviceid", "content-type"} {
		_, x := a[name]
		_, y := b[name]
		if x != y {
			return fmt.Sprintf("%s present: tablestore %v, azurite %v", name, x, y)
		}
	}
	return ""
}

// brief is summary without the operation.
func (b batchOutcome) brief() string {
	if b.rep.status != 202 {
		return b.rep.text()
	}
	if !b.failed() {
		return "commits"
	}
	return "fails " + b.code
}

// runBcase runs change set c on a fresh partition of both servers and
// returns the class and details of the first difference ("" when none).
func (w *writeHarness) runBcase(c wcase) (class, detail string) {
	w.n++
	pk := fmt.Sprintf("b%d", w.n)
	ts, az := newSide("tablestore", tsURL), newSide("azurite", azURL)
	for _, s := range []*side{ts, az} {
		if err := s.setup(w.table, pk, c.prior); err != nil {
			return "setup failed", err.Error()
		}
	}
	defer func() {
		// The other partition is shared by every case: empty it.
		for _, s := range []*side{ts, az} {
			for _, rk := range batchRowKeys {
				do(s.base, "DELETE", keyPath(w.table, "other", rk), map[string]string{"If-Match": "*"}, nil)
			}
		}
	}()
	var outs [2]batchOutcome
	for i, s := range []*side{ts, az} {
		ct, b := s.batchBody(w.table, pk, c)
		outs[i] = parseBatch(do(s.base, "POST", "/$batch", map[string]string{"Content-Type": ct, "Accept": "", "DataServiceVersion": ""}, b))
	}
	ot, oa := outs[0], outs[1]
	detail = fmt.Sprintf("tablestore: %s subs %v %s %q\n  azurite:    %s subs %v %s %q", ot.rep.text(), ot.subs, ot.code, firstLine(ot.msg), oa.rep.text(), oa.subs, oa.code, firstLine(oa.msg))
	st, sa := ot.summary(c), oa.summary(c)
	if w.stats != nil {
		k := "tablestore " + ot.brief() + ", azurite " + oa.brief()
		if len(c.ops) >= 100 {
			k = fmt.Sprintf("%d operations: %s", len(c.ops), k)
		}
		w.stats[k]++
	}
	switch {
	case st != sa && ot.failed() && oa.failed() && ot.rep.status == 202 && oa.rep.status == 202 && ot.code == oa.code:
		return fmt.Sprintf("batch: same failure, other index: tablestore at %s, azurite at %s", opContext(c, ot.index), opContext(c, oa.index)), detail
	case st != sa && ot.code == "CommandsInBatchActOnDifferentPartitions":
		// Azurite 3.37 does not check the PartitionKeys: whatever it
		// answers comes from the operations themselves.
		return "batch: tablestore refuses CommandsInBatchActOnDifferentPartitions, azurite " + oa.brief(), detail
	case st != sa && ot.failed() && oa.failed() && ot.index >= 0 && oa.index >= 0 && ot.index != oa.index:
		// Each side refuses another operation first: which check comes
		// first, not what either operation does.
		early, late, lateCode, earlyCode := "tablestore", "azurite", oa.code, ot.code
		if ot.index > oa.index {
			early, late, lateCode, earlyCode = "azurite", "tablestore", ot.code, oa.code
		}
		return fmt.Sprintf("batch: order of checks: %s refuses %s at a later operation before %s's %s at an earlier one", late, lateCode, early, earlyCode), detail
	case st != sa && ot.failed():
		return fmt.Sprintf("batch: tablestore %s, azurite %s", st, oa.brief()), detail
	case st != sa:
		return fmt.Sprintf("batch: tablestore %s, azurite %s", st, sa), detail
	case !ot.failed() && !slices.Equal(ot.subs, oa.subs):
		for i := range min(len(ot.subs), len(oa.subs)) {
			if ot.subs[i] != oa.subs[i] {
				return fmt.Sprintf("batch sub-response for %s: tablestore %d, azurite %d", opContext(c, i), ot.subs[i], oa.subs[i]), detail
			}
		}
		return fmt.Sprintf("batch sub-responses: tablestore %d, azurite %d", len(ot.subs), len(oa.subs)), detail
	case !ot.failed():
		for i := range min(len(ot.hdrs), len(oa.hdrs)) {
			if d := subHeaderDiff(ot.hdrs[i], oa.hdrs[i]); d != "" {
				return fmt.Sprintf("batch sub-response for %s: %s", opContext(c, i), d), detail + fmt.Sprintf("\n  sub-response %d headers:\n  tablestore: %v\n  azurite:    %v", i, ot.hdrs[i], oa.hdrs[i])
			}
		}
	}
	// The same outcome: compare what both partitions hold now.
	q := query{filter: &node{kind: "raw", prop: fmt.Sprintf("PartitionKey eq '%s' or PartitionKey eq 'other'", pk)}}
	rt, ra := runQuery(w.ctx, w.ts, q), runQuery(w.ctx, w.az, q)
	after := "a commit"
	if ot.failed() {
		after = "a failure"
	}
	if slices.ContainsFunc(c.ops, func(o wop) bool { return o.upperTable }) {
		after += " (an operation names the table in upper case)"
	}
	for _, d := range compare(q, rt, ra) {
		detail += fmt.Sprintf("\n  read back: %s %s %s %s\n  tablestore: %s\n  azurite:    %s", d.kind, d.key, d.side, short(d.detail), short(fmt.Sprint(rt.ents)), short(fmt.Sprint(ra.ents)))
		switch d.kind {
		case "keys":
			return fmt.Sprintf("batch read-back after %s: an entity only on %s", after, d.side), detail
		case "props":
			return fmt.Sprintf("batch read-back after %s: property %s differs", after, propClass(d.side)), detail
		default:
			return fmt.Sprintf("batch read-back after %s: %s", after, d.kind), detail
		}
	}
	return "", ""
}

// shrinkBcase: as shrinkWcase, for change sets (the 100-operation ones
// are left whole).
func (w *writeHarness) shrinkBcase(c wcase, class, detail string) (wcase, string) {
	if len(c.ops) > 20 {
		return c, detail
	}
	return shrinkCase(c, class, detail, w.runBcase)
}

// fixedBcases are written by hand: a merge past the entity's limits
// inside a change set, an operation on another table.
func fixedBcases() []wcase {
	ins := wop{method: "POST", ifm: "none", rk: "d", props: map[string]value{}}
	return []wcase{
		{prior: []entity{{rk: "a", props: manyProps("A", 200, 1)}}, ops: []wop{ins, {method: "MERGE", ifm: "star", rk: "a", props: manyProps("B", 100, 1)}}},
		{prior: []entity{{rk: "a", props: manyProps("A", 10, 30000)}}, ops: []wop{ins, {method: "MERGE", ifm: "none", rk: "a", props: manyProps("B", 10, 30000)}}},
		{ops: []wop{ins, {method: "POST", ifm: "none", rk: "e", props: map[string]value{}, otherTable: true}}},
		{ops: []wop{{method: "POST", ifm: "none", rk: "e", props: map[string]value{}, otherTable: true}, ins}},
	}
}

// TestDifferentialBatches sends the same generated change sets (the
// writes of TestDifferentialWrites, several entities of one partition,
// failing ones, an entity twice, another PartitionKey, 100 and 101
// operations) to both servers and compares the outcome (status,
// sub-responses, the failure's code and operation index) and what the
// partition holds afterwards.
//
// DIFF_SEED (default 1) picks them, DIFF_BATCHES (default 200) how many.
func TestDifferentialBatches(t *testing.T) {
	requireServers(t)
	seed := uint64(envInt("DIFF_SEED", 1))
	n := envInt("DIFF_BATCHES", 200)
	t.Logf("azurite-table %s; seed %d, %d change sets (DIFF_SEED, DIFF_BATCHES)", azuriteVersion, seed, n)
	known := loadKnown(t)
	r := rand.New(rand.NewPCG(seed, 0xba7c4))
	h := newHarness(t, fmt.Sprintf("diffb%d", seed))
	w := &writeHarness{harness: h, table: h.name, stats: map[string]int{}}
	for _, svc := range []*aztables.ServiceClient{tsSvc, azSvc} {
		if _, err := svc.CreateTable(h.ctx, h.name+"o", nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		tsSvc.DeleteTable(context.Background(), h.name+"o", nil)
		azSvc.DeleteTable(context.Background(), h.name+"o", nil)
	})
	for _, c := range fixedBcases() {
		if class, detail := w.runBcase(c); class != "" {
			h.record(class, c.String()+"\n  "+detail)
		}
	}
	for range n {
		c := randBcase(r)
		class, detail := w.runBcase(c)
		if class == "" {
			continue
		}
		if f := h.findings[class]; f != nil {
			f.count++
			continue
		}
		stats := w.stats
		w.stats = nil // the narrowing runs are not counted
		min, detail := w.shrinkBcase(c, class, detail)
		w.stats = stats
		h.record(class, min.String()+"\n  "+detail)
	}
	for _, k := range slices.Sorted(maps.Keys(w.stats)) {
		t.Logf("outcomes: %4d× %s", w.stats[k], k)
	}
	h.report(known)
}
