package differential

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// rawValue is a property as sent, for values the service refuses: val is
// its JSON text ("" none: the annotation alone), ann the JSON text of its
// @odata.type annotation ("" none), label its class.
type rawValue struct{ val, ann, label string }

func raw(label, val, ann string) value {
	return value{tRaw, rawValue{val: val, ann: ann, label: label}}
}

// badValues are typed values whose annotation disagrees with the value,
// or is malformed, and untyped values JSON allows but the data model has
// no type for.
var badValues = []value{
	raw("Int32 above its range", `2147483648`, `"Edm.Int32"`),
	raw("Int32 below its range", `-2147483649`, `"Edm.Int32"`),
	raw("Int32 as a string", `"5"`, `"Edm.Int32"`),
	raw("Int32 as a non-integer string", `"abc"`, `"Edm.Int32"`),
	raw("Int32 with a fraction", `1.5`, `"Edm.Int32"`),
	raw("Int32 as an exponent", `1e3`, `"Edm.Int32"`),
	raw("Int64 as a number", `5`, `"Edm.Int64"`),
	raw("Int64 above its range", `"9223372036854775808"`, `"Edm.Int64"`),
	raw("Int64 as a fraction string", `"1.5"`, `"Edm.Int64"`),
	raw("Int64 as a non-integer string", `"abc"`, `"Edm.Int64"`),
	raw("Int64 with a plus sign", `"+5"`, `"Edm.Int64"`),
	raw("Double as \"NaN\"", `"NaN"`, `"Edm.Double"`),
	raw("Double as \"Infinity\"", `"Infinity"`, `"Edm.Double"`),
	raw("Double as \"-Infinity\"", `"-Infinity"`, `"Edm.Double"`),
	raw("Double as \"INF\"", `"INF"`, `"Edm.Double"`),
	raw("Double as \"1e400\"", `"1e400"`, `"Edm.Double"`),
	raw("Double as 1e400", `1e400`, `"Edm.Double"`),
	raw("Double as \"1.5\"", `"1.5"`, `"Edm.Double"`),
	raw("Double as \"abc\"", `"abc"`, `"Edm.Double"`),
	raw("untyped 1e400", `1e400`, ``),
	raw("untyped integer beyond Int32", `2147483648`, ``),
	raw("untyped integer beyond Int64", `9223372036854775808`, ``),
	raw("Boolean as \"true\"", `"true"`, `"Edm.Boolean"`),
	raw("Boolean as \"True\"", `"True"`, `"Edm.Boolean"`),
	raw("Boolean as 1", `1`, `"Edm.Boolean"`),
	raw("DateTime with month 13", `"2024-13-01T00:00:00Z"`, `"Edm.DateTime"`),
	raw("DateTime not a date", `"not a date"`, `"Edm.DateTime"`),
	raw("DateTime before 1601", `"1600-12-31T23:59:59Z"`, `"Edm.DateTime"`),
	raw("DateTime year 1", `"0001-01-01T00:00:00Z"`, `"Edm.DateTime"`),
	raw("DateTime without a time", `"2024-01-01"`, `"Edm.DateTime"`),
	raw("DateTime without a zone", `"2024-01-01T00:00:00"`, `"Edm.DateTime"`),
	raw("DateTime with an offset", `"2024-01-01T01:00:00+01:00"`, `"Edm.DateTime"`),
	raw("DateTime with 8 fraction digits", `"2024-01-01T00:00:00.12345678Z"`, `"Edm.DateTime"`),
	raw("DateTime as a number", `0`, `"Edm.DateTime"`),
	raw("Guid not a Guid", `"xyz"`, `"Edm.Guid"`),
	raw("Guid without dashes", `"00000000000000000000000000000001"`, `"Edm.Guid"`),
	raw("Guid in braces", `"{00000000-0000-0000-0000-000000000001}"`, `"Edm.Guid"`),
	raw("Guid with a non-hex digit", `"00000000-0000-0000-0000-00000000000g"`, `"Edm.Guid"`),
	raw("Guid as a number", `5`, `"Edm.Guid"`),
	raw("Binary not base64", `"!!!"`, `"Edm.Binary"`),
	raw("Binary without padding", `"AQI"`, `"Edm.Binary"`),
	raw("Binary as a number", `5`, `"Edm.Binary"`),
	raw("String as a number", `5`, `"Edm.String"`),
	raw("String as a boolean", `true`, `"Edm.String"`),
	raw("unknown type Edm.Single", `1.5`, `"Edm.Single"`),
	raw("unknown type Edm.Decimal", `"1.5"`, `"Edm.Decimal"`),
	raw("unknown type Edm.Foo", `"x"`, `"Edm.Foo"`),
	raw("type name in lower case", `"x"`, `"edm.string"`),
	raw("empty type name", `"x"`, `""`),
	raw("annotation not a string", `"x"`, `5`),
	raw("annotation with no value", ``, `"Edm.Int32"`),
	raw("typed null", `null`, `"Edm.Int32"`),
	raw("object value", `{"a":1}`, ``),
	raw("array value", `[1]`, ``),
}

// badNames are property names the data model refuses (and two it
// allows, as controls), each with a String value.
var badNames = map[string]string{
	strings.Repeat("N", 256): "name of 256 characters",
	strings.Repeat("N", 255): "name of 255 characters",
	"1abc":                   "name starting with a digit",
	"a-b":                    "name with a hyphen",
	"a b":                    "name with a space",
	"a.b":                    "name with a dot",
	"a$b":                    "name with a dollar sign",
	"a/b":                    "name with a slash",
	"_ab":                    "name starting with an underscore",
	"ab\u00e9":               "name with a non-ASCII letter",
	"ab\U0001F600":           "name with a character beyond U+FFFF",
	"":                       "empty name",
}

// badLabel names the refused thing a write carries ("" none).
func badLabel(o wop) string {
	var labels []string
	for name, v := range o.props {
		if v.typ == tRaw {
			labels = append(labels, v.v.(rawValue).label)
		} else if l, ok := badNames[name]; ok {
			labels = append(labels, l)
		}
	}
	if n := len(o.props); n > 252 {
		labels = append(labels, fmt.Sprintf("%d properties", n))
	}
	return strings.Join(labels, ", ")
}

// randBadWop is a write carrying one refused value or name among
// properties drawn as the write test draws them.
func randBadWop(r *rand.Rand) wop {
	o := wop{method: []string{"POST", "PUT", "MERGE", "PATCH"}[r.IntN(4)], rk: "a", props: randProps(r), ifm: "none"}
	if o.method == "POST" {
		// Not the default: Azurite's Preference-Applied without a Prefer
		// is a known difference that would hide the body's.
		o.prefer = "return-no-content"
	} else {
		o.ifm = []string{"none", "star", "match"}[r.IntN(3)]
	}
	if r.IntN(4) == 0 {
		names := make([]string, 0, len(badNames))
		for n := range badNames {
			names = append(names, n)
		}
		slices.Sort(names)
		o.props[names[r.IntN(len(names))]] = value{tString, "x"}
	} else {
		o.props["Z"] = badValues[r.IntN(len(badValues))]
	}
	return o
}

// fixedBadCases: each refused value and name alone, inserted and merged
// into an existing entity, and 253 and 256 properties inserted.
func fixedBadCases() []wcase {
	prior := []entity{{rk: "a", props: map[string]value{"Z": {tInt32, int32(1)}}}}
	var out []wcase
	add := func(props map[string]value) {
		out = append(out,
			wcase{ops: []wop{{method: "POST", ifm: "none", rk: "a", props: props, prefer: "return-no-content"}}},
			wcase{prior: prior, ops: []wop{{method: "MERGE", ifm: "star", rk: "a", props: props}}})
	}
	for _, v := range badValues {
		add(map[string]value{"Z": v})
	}
	for _, n := range slices.Sorted(maps.Keys(badNames)) {
		add(map[string]value{n: {tString, "x"}})
	}
	for _, n := range []int{253, 256} {
		out = append(out, wcase{ops: []wop{{method: "POST", ifm: "none", rk: "a", props: manyProps("A", n, 1), prefer: "return-no-content"}}})
	}
	return out
}

// badClass turns a write difference into a refused write's: what the
// write carried, then the difference without the operation (named in the
// reproducer), a success answered as "accepted" whichever its status.
func badClass(class, label string) string {
	_, d, ok := strings.Cut(class, " entity: ")
	if !ok {
		d = class
	}
	for _, side := range []string{"tablestore", "azurite"} {
		for _, st := range []string{"201", "204"} {
			d = strings.Replace(d, side+" "+st+",", side+" accepts,", 1)
			if strings.HasSuffix(d, side+" "+st) {
				d = strings.TrimSuffix(d, st) + "accepts"
			}
		}
	}
	d = strings.ReplaceAll(d, "P written as raw", "P")
	return "bad write [" + label + "]: " + d
}

// TestDifferentialBadWrites sends the same refused writes to both
// servers: typed values their annotation disagrees with (Int32 out of
// range or as a string, Int64 as a number, Double as "NaN", "Infinity",
// "1e400", malformed or out-of-range DateTimes, malformed Guids and
// base64, Boolean as a string), unknown and malformed annotations, an
// annotation without a value, property names the data model refuses,
// more than 252 properties; as inserts, replaces and merges (with and
// without If-Match) on existing and missing entities. Compared, as in
// TestDifferentialWrites: the status and error code, and the entity read
// back (whether anything was written).
//
// DIFF_SEED (default 1) picks them, DIFF_BAD_WRITES (default 150) how
// many generated cases come after the hand-written ones.
func TestDifferentialBadWrites(t *testing.T) {
	requireServers(t)
	seed := uint64(envInt("DIFF_SEED", 1))
	n := envInt("DIFF_BAD_WRITES", 150)
	t.Logf("azurite-table %s; seed %d, %d generated refused writes (DIFF_SEED, DIFF_BAD_WRITES)", azuriteVersion, seed, n)
	known := loadKnown(t)
	r := rand.New(rand.NewPCG(seed, 0xbad7e5))
	h := newHarness(t, fmt.Sprintf("diffbad%d", seed))
	w := &writeHarness{harness: h, table: h.name}
	// The class names what the write carried, so that shrinking keeps it.
	run := func(c wcase) (string, string) {
		class, detail := w.runWcase(c)
		if class == "" {
			return "", ""
		}
		var labels []string
		for _, o := range c.ops {
			if l := badLabel(o); l != "" {
				labels = append(labels, l)
			}
		}
		return badClass(class, strings.Join(labels, "; ")), detail
	}
	for _, c := range fixedBadCases() {
		if class, detail := run(c); class != "" {
			h.record(class, c.String()+"\n  "+detail)
		}
	}
	for range n {
		c := wcase{ops: []wop{randBadWop(r)}}
		if r.IntN(2) == 0 {
			c.prior = []entity{{rk: "a", props: randProps(r)}}
		}
		class, detail := run(c)
		if class == "" {
			continue
		}
		if f := h.findings[class]; f != nil {
			f.count++
			continue
		}
		min, detail := shrinkCase(c, class, detail, run)
		h.record(class, min.String()+"\n  "+detail)
	}
	h.report(known)
}
