package filter

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"tablestore/internal/edm"
)

// entity is a map-backed Getter for tests.
type entity map[string]edm.Value

func (e entity) Get(name string) (edm.Value, bool) {
	v, ok := e[name]
	return v, ok
}

func str(s string) edm.Value   { return edm.Value{Type: edm.TypeString, Str: s} }
func i32(n int32) edm.Value    { return edm.Value{Type: edm.TypeInt32, Int: int64(n)} }
func i64(n int64) edm.Value    { return edm.Value{Type: edm.TypeInt64, Int: n} }
func dbl(f float64) edm.Value  { return edm.Value{Type: edm.TypeDouble, Float: f} }
func boolean(b bool) edm.Value { return edm.Value{Type: edm.TypeBoolean, Bool: b} }
func guid(s string) edm.Value  { return edm.Value{Type: edm.TypeGuid, Str: s} }
func bin(b ...byte) edm.Value  { return edm.Value{Type: edm.TypeBinary, Bin: b} }
func dt(s string) edm.Value    { return edm.Value{Type: edm.TypeDateTime, Time: mustTime(s)} }
func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func sample() entity {
	return entity{
		"PartitionKey": str("pk1"),
		"RowKey":       str("rk1"),
		"Timestamp":    dt("2024-01-02T03:04:05.1234567Z"),
		"Name":         str("O'Neil"),
		"Empty":        str(""),
		"Age":          i32(42),
		"Big":          i64(1 << 40),
		"Score":        dbl(2.5),
		"Nan":          dbl(math.NaN()),
		"Active":       boolean(true),
		"Off":          boolean(false),
		"Born":         dt("1990-05-06T07:08:09Z"),
		"ID":           guid("ABCDEF01-2345-6789-ABCD-EF0123456789"),
		"Blob":         bin(0x01, 0x02),
		"Näme":         str("ü"),
	}
}

func mustParse(t testing.TB, s string) *Filter {
	t.Helper()
	f, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return f
}

func TestParseCanonical(t *testing.T) {
	tests := []struct{ in, want string }{
		{"PartitionKey eq 'a'", "PartitionKey eq 'a'"},
		{"  PartitionKey \t eq\n'a'  ", "PartitionKey eq 'a'"},
		{"Name eq'x'", "Name eq 'x'"},
		{"Name eq 'O''Neil'", "Name eq 'O''Neil'"},
		{"Name eq ''''", "Name eq ''''"},
		{"Name eq ''", "Name eq ''"},
		{"Näme eq 'ü'", "Näme eq 'ü'"},
		{"_x1 eq 1", "_x1 eq 1"},
		// Reversed operands put the property first and mirror the operator.
		{"'a' eq X", "X eq 'a'"},
		{"'a' ne X", "X ne 'a'"},
		{"'a' lt RowKey", "RowKey gt 'a'"},
		{"'a' le RowKey", "RowKey ge 'a'"},
		{"'a' gt RowKey", "RowKey lt 'a'"},
		{"'a' ge RowKey", "RowKey le 'a'"},
		{"5 lt Age", "Age gt 5"},
		// Grouping: flattened, and only the needed parentheses kept.
		{"(A eq 1)and(B eq 2L)", "A eq 1 and B eq 2L"},
		{"((A eq 1))", "A eq 1"},
		{"A eq 1 and (B eq 2 and C eq 3)", "A eq 1 and B eq 2 and C eq 3"},
		{"(A eq 1 or B eq 2) or C eq 3", "A eq 1 or B eq 2 or C eq 3"},
		{"A eq 1 or B eq 2 and C eq 3", "A eq 1 or (B eq 2 and C eq 3)"},
		{"(A eq 1 or B eq 2) and C eq 3", "(A eq 1 or B eq 2) and C eq 3"},
		{"not A eq 1", "not (A eq 1)"},
		{"not(A eq 1)", "not (A eq 1)"},
		{"not A eq 1 and B eq 2", "not (A eq 1) and B eq 2"},
		{"not (A eq 1 or B eq 2)", "not (A eq 1 or B eq 2)"},
		{"not not A", "not (not A)"},
		{"IsActive", "IsActive"},
		{"not IsActive", "not IsActive"},
		{"true", "true"},
		{"not false", "not false"},
		{"(true and RowKey eq 'x') and (false or PartitionKey eq 'y')",
			"true and RowKey eq 'x' and (false or PartitionKey eq 'y')"},
		// Literals.
		{"I eq 007", "I eq 7"},
		{"I eq -0", "I eq 0"},
		{"I eq -2147483648", "I eq -2147483648"},
		{"I eq 2147483647", "I eq 2147483647"},
		{"L eq 5l", "L eq 5L"},
		{"L eq -9223372036854775808L", "L eq -9223372036854775808L"},
		{"D eq 1.50", "D eq 1.5"},
		{"D eq 3D", "D eq 3.0"},
		{"D eq 3d", "D eq 3.0"},
		{"D eq 1e3", "D eq 1000.0"},
		{"D eq 1E+21", "D eq 1e+21"},
		{"D eq 2.5e-3", "D eq 0.0025"},
		{"D eq -2.5d", "D eq -2.5"},
		{"D eq -0.0", "D eq -0.0"},
		{"D eq INF or D eq -INF or D eq NaN", "D eq INF or D eq -INF or D eq NaN"},
		{"B eq true and C ne false", "B eq true and C ne false"},
		{"B eq True and C ne FALSE and D eq tRuE", "B eq true and C ne false and D eq true"},
		{"T eq datetime'2024-01-02T03:04:05.1200000Z'", "T eq datetime'2024-01-02T03:04:05.12Z'"},
		{"T eq DateTime'2024-01-02T03:04Z'", "T eq datetime'2024-01-02T03:04:00Z'"},
		{"T eq datetime'2024-01-02T03:04:05'", "T eq datetime'2024-01-02T03:04:05Z'"},
		{"T eq datetime'2024-01-02T01:04:05+02:30'", "T eq datetime'2024-01-01T22:34:05Z'"},
		{"T eq datetime'2024-01-02T03:04:05.123456789Z'", "T eq datetime'2024-01-02T03:04:05.1234567Z'"},
		{"T eq datetime'0001-01-01T00:00:00Z'", "T eq datetime'0001-01-01T00:00:00Z'"},
		{"G eq GUID'ABCDEF01-2345-6789-ABCD-EF0123456789'", "G eq guid'abcdef01-2345-6789-abcd-ef0123456789'"},
		{"B eq binary'0aff'", "B eq X'0AFF'"},
		{"B eq x'0A'", "B eq X'0A'"},
		{"B eq X''", "B eq X''"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			f := mustParse(t, tt.in)
			if got := f.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
			if again := mustParse(t, tt.want).String(); again != tt.want {
				t.Fatalf("canonical form not stable: %q -> %q", tt.want, again)
			}
		})
	}
}

func TestParseEmpty(t *testing.T) {
	for _, s := range []string{"", "   ", "\t\n"} {
		f, err := Parse(s)
		if err != nil || f != nil {
			t.Fatalf("Parse(%q) = %v, %v; want nil, nil", s, f, err)
		}
		if !f.Match(entity{}) || f.String() != "" || f.Bounds() != (Bounds{}) || f.Comparisons() != 0 {
			t.Fatalf("nil filter must match everything and be unbounded")
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in     string
		want   error
		offset int // -1: not checked
	}{
		{"Name eq", ErrSyntax, 7},
		{"eq 'x'", ErrSyntax, 0},
		{"Name eq 'x", ErrSyntax, 8},
		{"(Name eq 'x'", ErrSyntax, 12},
		{"Name eq 'x')", ErrSyntax, 11},
		{"Name EQ 'x'", ErrSyntax, 5},
		{"Name eq 'x' AND Age eq 1", ErrSyntax, 12},
		{"Name eq 'x' Or Age eq 1", ErrSyntax, 12},
		{"Name eq 'x' Age eq 1", ErrSyntax, 12},
		{"Age eq 1 and", ErrSyntax, 12},
		{"and Age eq 1", ErrSyntax, 0},
		{"not", ErrSyntax, 3},
		{"()", ErrSyntax, 1},
		{"Age eq (1)", ErrSyntax, 7},
		{"Age eq 1 eq 2", ErrSyntax, 9},
		{"(Age eq 1) eq true", ErrSyntax, 11},
		{"'abc'", ErrSyntax, 0},
		{"5", ErrSyntax, 0},
		{"5 and Age eq 1", ErrSyntax, 0},
		{"Name eq \"x\"", ErrSyntax, 8},
		{"Name eq 'a' , Age eq 1", ErrSyntax, 12},
		{"Name eq null", ErrSyntax, 8},
		{"null eq Name", ErrSyntax, 0},
		{"property1 eq 1'invalid'", ErrSyntax, 14},
		{"Age eq 2147483648", ErrSyntax, 7},
		{"Age eq -2147483649", ErrSyntax, 7},
		{"Age eq 9223372036854775808L", ErrSyntax, 7},
		{"Age eq 1.5L", ErrSyntax, 7},
		{"Age eq 1.", ErrSyntax, 7},
		{"Age eq 1.2.3", ErrSyntax, 7},
		{"Age eq 12abc", ErrSyntax, 7},
		{"Age eq 1e", ErrSyntax, 7},
		{"Age eq 1e400", ErrSyntax, 7},
		{"Age eq 1LL", ErrSyntax, 7},
		{"T eq datetime'2024-02-30T00:00:00Z'", ErrSyntax, 5},
		{"T eq datetime'2024-01-02'", ErrSyntax, 5},
		{"T eq datetime'2024-01-02T24:00:00Z'", ErrSyntax, 5},
		{"T eq datetime'2024-01-02T03:04:60Z'", ErrSyntax, 5},
		{"T eq datetime'2024-13-02T03:04:05Z'", ErrSyntax, 5},
		{"T eq datetime'0000-01-01T00:00:00Z'", ErrSyntax, 5},
		{"T eq datetime'0001-01-01T00:00:00+01:00'", ErrSyntax, 5},
		{"T eq datetime'2024-01-02T03:04:05.Z'", ErrSyntax, 5},
		{"T eq datetime'2024-01-02T03:04:05+1:00'", ErrSyntax, 5},
		{"T eq datetime'2024-01-02T03:04:05Z '", ErrSyntax, 5},
		{"G eq guid'xyz'", ErrSyntax, 5},
		{"B eq X'012'", ErrSyntax, 5},
		{"B eq X'zz'", ErrSyntax, 5},
		{"A eq foo'bar'", ErrSyntax, 5},
		{"A eq datetime 'x'", ErrSyntax, 14},
		{"guid '00000000-0000-0000-0000-000000000000' eq A", ErrSyntax, 5},
		{"Name eq '\xff'", ErrSyntax, 9},
		{"Name eq 'é\xc3'", ErrSyntax, 11},
		{"A eq datetimeoffset'2024-01-02T03:04:05Z'", ErrUnsupported, 5},
		{"A eq time'PT1H'", ErrUnsupported, 5},
		{"Age eq 1.5M", ErrUnsupported, 7},
		{"Age eq 1.5f", ErrUnsupported, 7},
		{"A eq B", ErrUnsupported, 0},
		{"'a' eq 'b'", ErrUnsupported, 0},
		{"1 eq 1", ErrUnsupported, 0},
		{"startswith(Name, 'a')", ErrUnsupported, 0},
		{"substringof('a', Name) eq true", ErrUnsupported, 0},
		{"Name eq tolower('A')", ErrUnsupported, 8},
		{"Age add 1 eq 2", ErrUnsupported, 4},
		{"Age eq 1 add 2", ErrUnsupported, 9},
		{"Age mul 2", ErrUnsupported, 4},
		{"Address/City eq 'x'", ErrUnsupported, 7},
		{"-Age eq 1", ErrUnsupported, 0},
		{strings.Repeat("(", 500) + "A" + strings.Repeat(")", 500), ErrSyntax, -1},
		{strings.Repeat("not ", 101) + "A", ErrSyntax, -1},
		{strings.Repeat("not ", 5000) + "A", ErrSyntax, -1},
		{comparisons(MaxComparisons + 1), ErrTooManyComparisons, -1},
		{comparisons(MaxComparisons) + " and Flag", ErrTooManyComparisons, -1},
	}
	for _, tt := range tests {
		name := tt.in
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			f, err := Parse(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse(%q) = %v, %v; want %v", tt.in, f, err, tt.want)
			}
			for _, other := range []error{ErrSyntax, ErrUnsupported, ErrTooManyComparisons} {
				if other != tt.want && errors.Is(err, other) {
					t.Fatalf("error %v also wraps %v", err, other)
				}
			}
			if tt.offset >= 0 && !strings.Contains(err.Error(), fmt.Sprintf("at offset %d:", tt.offset)) {
				t.Fatalf("error %q does not name offset %d", err, tt.offset)
			}
		})
	}
}

// comparisons builds a filter of n comparisons joined by and/or.
func comparisons(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("P%d eq %d", i, i)
	}
	return strings.Join(parts, " or ")
}

func TestComparisonLimit(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{comparisons(MaxComparisons), MaxComparisons},
		{comparisons(MaxComparisons-1) + " and Flag", MaxComparisons},
		{comparisons(MaxComparisons) + " and true or false and not true", MaxComparisons},
		{"A", 1},
		{"true", 0},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := mustParse(t, tt.in).Comparisons(); got != tt.want {
				t.Fatalf("Comparisons() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestNestingLimit(t *testing.T) {
	ok := strings.Repeat("not ", MaxDepth) + "A"
	f := mustParse(t, ok)
	if again := mustParse(t, f.String()); again.String() != f.String() {
		t.Fatalf("deep canonical form does not reparse identically")
	}
	mustParse(t, strings.Repeat("(", 300)+"A eq 1"+strings.Repeat(")", 300))
}

func TestMatch(t *testing.T) {
	tests := []struct {
		filter string
		want   bool
	}{
		// String: ordinal.
		{"Name eq 'O''Neil'", true},
		{"Name ne 'O''Neil'", false},
		{"Name gt 'O'", true},
		{"Name lt 'o'", true},
		{"Name ge 'O''Neil'", true},
		{"Name le 'O''Neil'", true},
		{"Name lt 'O''Neil'", false},
		{"Name gt 'O''Neil'", false},
		{"Name eq 'o''neil'", false},
		{"Empty eq ''", true},
		{"Empty lt 'a'", true},
		{"Näme eq 'ü'", true},
		// Reversed operands.
		{"'O''Neil' eq Name", true},
		{"'P' gt Name", true},
		{"'P' lt Name", false},
		{"'O''Neil' ge Name", true},
		{"'O''Neil' le Name", true},
		{"42 lt Age", false},
		{"41 lt Age", true},
		// Int32 property.
		{"Age eq 42", true},
		{"Age ne 42", false},
		{"Age gt 41", true},
		{"Age ge 43", false},
		{"Age le 42", true},
		{"Age lt 42", false},
		{"Age gt -1", true},
		{"Age eq 42L", false}, // Int64 literal does not narrow to Int32
		{"Age lt 42L", true},  // ... and mismatches answer lt true
		{"Age eq 42.0", false},
		// Int64 property.
		{"Big eq 1099511627776L", true},
		{"Big gt 5", true},
		{"Big lt 5", false},
		{"Big ge 1099511627777L", false},
		{"Big eq 1099511627776.0", false},
		// Double property.
		{"Score eq 2.5", true},
		{"Score eq 2.5D", true},
		{"Score ge 2.5d", true},
		{"Score gt 2", true},
		{"Score lt 3L", true},
		{"Score eq 25e-1", true},
		{"Score lt INF", true},
		{"Score gt -INF", true},
		{"Score gt NaN", true},
		{"Nan eq NaN", true},
		{"Nan lt 0.0", true},
		{"Nan lt -INF", true},
		{"Nan gt 0", false},
		// Boolean, false < true.
		{"Active", true},
		{"Off", false},
		{"not Off", true},
		{"not Active", false},
		{"Active eq true", true},
		{"Active ne false", true},
		{"Off lt true", true},
		{"Active gt false", true},
		{"Active le false", false},
		{"Active ge true", true},
		{"Name", false}, // a bare non-Boolean property is false
		{"not Name", true},
		{"Missing", false},
		{"not Missing", true},
		// DateTime.
		{"Born eq datetime'1990-05-06T07:08:09Z'", true},
		{"Born eq datetime'1990-05-06T09:08:09+02:00'", true},
		{"Born eq datetime'1990-05-06T07:08:09'", true},
		{"Born eq datetime'1990-05-06T07:08:09.0000000Z'", true},
		{"Born gt datetime'1990-05-06T07:08Z'", true},
		{"Born lt datetime'1990-05-06T07:08:09.0000001Z'", true},
		{"Born ge datetime'1990-05-06T07:08:09.0000001Z'", false},
		{"Timestamp ge datetime'2024-01-02T03:04:05.1234567Z'", true},
		{"Timestamp gt datetime'2024-01-02T03:04:05.1234567Z'", false},
		{"Born eq '1990-05-06T07:08:09Z'", false},
		// Guid: property text in any case; ordered by bytes.
		{"ID eq guid'abcdef01-2345-6789-abcd-ef0123456789'", true},
		{"ID ne guid'ABCDEF01-2345-6789-ABCD-EF0123456789'", false},
		{"ID gt guid'abcdef01-2345-6789-abcd-ef0123456788'", true},
		{"ID lt guid'bbcdef01-2345-6789-abcd-ef0123456789'", true},
		{"ID eq 'ABCDEF01-2345-6789-ABCD-EF0123456789'", false}, // Azurite #1504
		// Binary: bytewise, a prefix sorts first.
		{"Blob eq X'0102'", true},
		{"Blob eq binary'0102'", true},
		{"Blob gt X'01'", true},
		{"Blob lt X'0103'", true},
		{"Blob lt X'010200'", true},
		{"Blob gt X''", true},
		{"Blob eq X'0201'", false},
		// Missing properties never match a comparison; not negates that.
		{"Missing eq ''", false},
		{"Missing ne ''", false},
		{"Missing lt 1", false},
		{"Missing ge 1", false},
		{"not (Missing eq 1)", true},
		{"not (Missing ne 1)", true},
		{"not Missing eq 1 and Age eq 42", true},
		// Keys and constants.
		{"PartitionKey eq 'pk1' and RowKey eq 'rk1'", true},
		{"PartitionKey eq 'pk1' and RowKey eq 'rk2'", false},
		{"true", true},
		{"false", false},
		{"not true", false},
		{"(true and RowKey eq 'rk1') and ((false or PartitionKey eq 'x') or PartitionKey eq 'pk1')", true},
		// Precedence: or < and < not < comparison.
		{"Age eq 42 or Age eq 1 and Name eq 'x'", true},
		{"(Age eq 42 or Age eq 1) and Name eq 'x'", false},
		{"not Age eq 42 or Age eq 42", true},
		{"not Age eq 42 and Age eq 1", false},
		{"not (Age eq 42 and Age eq 1)", true},
		{"Age eq 1 or not Active or Score eq 2.5", true},
		{"not not Active", true},
	}
	e := sample()
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			f := mustParse(t, tt.filter)
			if got := f.Match(e); got != tt.want {
				t.Fatalf("Match = %v, want %v (canonical %q)", got, tt.want, f)
			}
			if got := mustParse(t, f.String()).Match(e); got != tt.want {
				t.Fatalf("canonical %q: Match = %v, want %v", f, got, tt.want)
			}
		})
	}
}

// TestTypeMatrix compares a property of every type with a literal of every
// type, both holding "3": comparable pairs are equal, the rest follow the
// mismatch table (eq false, ne true, lt true, le true, gt false, ge false),
// as CloudStub recorded against the service.
func TestTypeMatrix(t *testing.T) {
	props := map[string]edm.Value{
		"Int32":    i32(3),
		"Int64":    i64(3),
		"Double":   dbl(3),
		"Boolean":  boolean(true),
		"DateTime": dt("2020-01-22T00:00:00Z"),
		"Guid":     guid("68260b3f-beab-45e2-b900-33e2b442e724"),
		"Binary":   bin(3),
		"String":   str("3"),
	}
	lits := map[string]string{
		"Int32":    "3",
		"Int64":    "3L",
		"Double":   "3D",
		"Boolean":  "true",
		"DateTime": "datetime'2020-01-22T00:00:00Z'",
		"Guid":     "guid'68260b3f-beab-45e2-b900-33e2b442e724'",
		"Binary":   "X'03'",
		"String":   "'3'",
	}
	comparable := map[[2]string]bool{ // {property, literal}
		{"Int64", "Int32"}:  true,
		{"Double", "Int32"}: true,
		{"Double", "Int64"}: true,
	}
	ops := []string{"eq", "ne", "lt", "le", "gt", "ge"}
	equalWant := map[string]bool{"eq": true, "ne": false, "lt": false, "le": true, "gt": false, "ge": true}
	mismatchWant := map[string]bool{"eq": false, "ne": true, "lt": true, "le": true, "gt": false, "ge": false}
	for pt, pv := range props {
		for lt, lv := range lits {
			for _, o := range ops {
				filter := fmt.Sprintf("P %s %s", o, lv)
				t.Run(pt+"/"+filter, func(t *testing.T) {
					want := mismatchWant[o]
					if pt == lt || comparable[[2]string{pt, lt}] {
						want = equalWant[o]
					}
					if got := mustParse(t, filter).Match(entity{"P": pv}); got != want {
						t.Fatalf("%s property: Match = %v, want %v", pt, got, want)
					}
				})
			}
		}
	}
}

func TestNumericPromotion(t *testing.T) {
	tests := []struct {
		filter string
		prop   edm.Value
		want   bool
	}{
		{"P gt 2147483647", i64(1 << 40), true},
		{"P lt -2147483648", i64(-1 << 40), true},
		{"P eq 9007199254740993L", i64(9007199254740993), true},
		{"P eq 9007199254740992L", i64(9007199254740993), false},
		// The Int64 literal is widened to Double, as OData promotes it.
		{"P eq 9007199254740993L", dbl(9007199254740992), true},
		{"P gt 1", dbl(1.5), true},
		{"P lt 2", dbl(1.5), true},
		{"P eq 1.5", i32(1), false},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			if got := mustParse(t, tt.filter).Match(entity{"P": tt.prop}); got != tt.want {
				t.Fatalf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBounds(t *testing.T) {
	const all = "(-inf, +inf)"
	tests := []struct {
		filter string
		pk, rk string
	}{
		{"", all, all},
		{"PartitionKey eq 'a'", `["a", "a"]`, all},
		{"'a' eq PartitionKey", `["a", "a"]`, all},
		{"PartitionKey ge 'a' and PartitionKey lt 'b'", `["a", "b")`, all},
		{"PartitionKey gt 'a'", `("a", +inf)`, all},
		{"PartitionKey le 'a'", `(-inf, "a"]`, all},
		{"'b' gt PartitionKey", `(-inf, "b")`, all},
		{"PartitionKey ne 'a'", all, all},
		{"PartitionKey ge ''", all, all},
		{"PartitionKey lt ''", "empty", "empty"},
		{"PartitionKey eq 'a' and RowKey ge 'r1' and RowKey le 'r9'", `["a", "a"]`, `["r1", "r9"]`},
		{"RowKey eq 'r'", all, `["r", "r"]`},
		{"PartitionKey eq 'a' or PartitionKey eq 'c'", `["a", "c"]`, all},
		{"PartitionKey eq 'a' and RowKey gt 'x' or PartitionKey eq 'b'", `["a", "b"]`, all},
		{"(PartitionKey eq 'a' and RowKey gt 'x') or (PartitionKey eq 'b' and RowKey ge 'y')", `["a", "b"]`, `("x", +inf)`},
		{"PartitionKey eq 'a' and (RowKey lt 'b' or RowKey gt 'y')", `["a", "a"]`, all},
		{"(RowKey ge 'b' and RowKey lt 'd') or (RowKey ge 'c' and RowKey le 'f')", all, `["b", "f"]`},
		{"(PartitionKey ge 'a' and PartitionKey lt 'c') or (PartitionKey gt 'a' and PartitionKey le 'c')", `["a", "c"]`, all},
		// Contradictions.
		{"PartitionKey eq 'a' and PartitionKey eq 'b'", "empty", "empty"},
		{"PartitionKey gt 'b' and PartitionKey lt 'a'", "empty", "empty"},
		{"PartitionKey gt 'a' and PartitionKey lt 'a'", "empty", "empty"},
		{"PartitionKey ge 'a' and PartitionKey lt 'a'", "empty", "empty"},
		{"PartitionKey gt 'a' and PartitionKey lt 'a\x00'", "empty", "empty"},
		{"PartitionKey ge 'a' and PartitionKey le 'a'", `["a", "a"]`, all},
		{"PartitionKey eq 'a' and RowKey eq 'x' and RowKey eq 'y'", "empty", "empty"},
		{"(PartitionKey eq 'a' and PartitionKey eq 'b') or RowKey eq 'r'", all, `["r", "r"]`},
		// Negation.
		{"not (PartitionKey lt 'm')", `["m", +inf)`, all},
		{"not (PartitionKey ge 'm')", `(-inf, "m")`, all},
		{"not (PartitionKey gt 'm')", `(-inf, "m"]`, all},
		{"not (PartitionKey le 'm')", `("m", +inf)`, all},
		{"not (PartitionKey eq 'a')", all, all},
		{"not (PartitionKey ne 'a')", `["a", "a"]`, all},
		{"not not PartitionKey eq 'a'", `["a", "a"]`, all},
		{"not (PartitionKey ge 'a' and PartitionKey lt 'b')", all, all},
		{"not (PartitionKey lt 'a' or PartitionKey ge 'b')", `["a", "b")`, all},
		{"not (PartitionKey ne 'a' or RowKey ne 'r')", `["a", "a"]`, `["r", "r"]`},
		// Other properties constrain nothing.
		{"Name eq 'x'", all, all},
		{"PartitionKey eq 'a' and Name eq 'x'", `["a", "a"]`, all},
		{"PartitionKey eq 'a' or Name eq 'x'", all, all},
		{"not (PartitionKey eq 'a' and Name eq 'x')", all, all},
		{"PartitionKey eq 'a' and not Name eq 'x'", `["a", "a"]`, all},
		// Keys against non-String literals fold to the mismatch constants.
		{"PartitionKey eq 1", "empty", "empty"},
		{"PartitionKey gt 1", "empty", "empty"},
		{"PartitionKey lt 1", all, all},
		{"PartitionKey ne 1", all, all},
		{"not (PartitionKey gt 1)", all, all},
		{"not (PartitionKey le 1)", "empty", "empty"},
		{"PartitionKey eq 1 or PartitionKey eq 'a'", `["a", "a"]`, all},
		{"PartitionKey", "empty", "empty"},
		{"not PartitionKey", all, all},
		// Constants.
		{"true", all, all},
		{"false", "empty", "empty"},
		{"not true", "empty", "empty"},
		{"false or PartitionKey eq 'a'", `["a", "a"]`, all},
		{"true and PartitionKey eq 'a'", `["a", "a"]`, all},
		{"true or PartitionKey eq 'a'", all, all},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			var f *Filter
			if tt.filter != "" {
				f = mustParse(t, tt.filter)
			}
			b := f.Bounds()
			if b.PK.String() != tt.pk || b.RK.String() != tt.rk {
				t.Fatalf("Bounds = PK %s RK %s, want PK %s RK %s", b.PK, b.RK, tt.pk, tt.rk)
			}
			if want := tt.pk == "empty" || tt.rk == "empty"; b.Empty() != want {
				t.Fatalf("Empty() = %v, want %v", b.Empty(), want)
			}
		})
	}
}

func TestIntervalPointAndContains(t *testing.T) {
	b := mustParse(t, "PartitionKey eq 'a' and RowKey gt 'b' and RowKey le 'd'").Bounds()
	if p, ok := b.PK.Point(); !ok || p != "a" {
		t.Fatalf("PK.Point() = %q, %v", p, ok)
	}
	if _, ok := b.RK.Point(); ok {
		t.Fatalf("RK is not a point")
	}
	if _, ok := (Interval{}).Point(); ok {
		t.Fatalf("the unbounded interval is not a point")
	}
	for key, want := range map[string]bool{"a": false, "b": false, "b\x00": true, "c": true, "d": true, "d\x00": false} {
		if got := b.RK.Contains(key); got != want {
			t.Errorf("RK.Contains(%q) = %v, want %v", key, got, want)
		}
	}
	if !(Interval{}).Contains("") || (Interval{}).Empty() {
		t.Fatalf("the zero interval holds every key")
	}
}

// TestBoundsAreConservative checks on random filters that every entity a
// filter matches lies inside its bounds, and that empty bounds match none.
func TestBoundsAreConservative(t *testing.T) {
	keys := []string{"", "a", "a\x00", "aa", "ab", "b", "ba", "c"}
	rng := rand.New(rand.NewPCG(1, 2))
	var gen func(depth int) string
	gen = func(depth int) string {
		if depth > 3 || rng.IntN(3) == 0 {
			prop := []string{"PartitionKey", "RowKey", "Name"}[rng.IntN(3)]
			o := opNames[rng.IntN(len(opNames))]
			switch rng.IntN(10) {
			case 0:
				return prop
			case 1:
				return []string{"true", "false"}[rng.IntN(2)]
			case 2:
				return fmt.Sprintf("%s %s %d", prop, o, rng.IntN(3))
			}
			return fmt.Sprintf("%s %s '%s'", prop, o, keys[rng.IntN(len(keys))])
		}
		switch rng.IntN(3) {
		case 0:
			return "not (" + gen(depth+1) + ")"
		case 1:
			return "(" + gen(depth+1) + ") and (" + gen(depth+1) + ")"
		}
		return "(" + gen(depth+1) + ") or (" + gen(depth+1) + ")"
	}
	for range 10000 {
		s := gen(0)
		f, err := Parse(s)
		if errors.Is(err, ErrTooManyComparisons) {
			continue
		}
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		b := f.Bounds()
		for _, pk := range keys {
			for _, rk := range keys {
				e := entity{"PartitionKey": str(pk), "RowKey": str(rk), "Name": str(pk + rk)}
				if f.Match(e) && (!b.PK.Contains(pk) || !b.RK.Contains(rk) || b.Empty()) {
					t.Fatalf("%q matches PK %q RK %q outside bounds PK %s RK %s", s, pk, rk, b.PK, b.RK)
				}
			}
		}
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	f := mustParse(t, "PartitionKey eq 'pk1' and RowKey ge 'r' and (Age gt 40 or Score lt 1.0) and "+
		"ID eq guid'abcdef01-2345-6789-abcd-ef0123456789' and Blob ge X'01' and Born lt datetime'2000-01-01T00:00:00Z' "+
		"and Active and not (Missing eq 1) and Big ge 1L")
	e := sample()
	if !f.Match(e) {
		t.Fatalf("filter should match the sample")
	}
	if n := testing.AllocsPerRun(100, func() { f.Match(e) }); n != 0 {
		t.Fatalf("Match allocates %v times per run", n)
	}
}

// FuzzParse checks that Parse never panics, that the canonical form is a
// fixed point, and that it means the same as the input.
func FuzzParse(f *testing.F) {
	e := sample()
	f.Fuzz(func(t *testing.T, s string) {
		flt, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrTooManyComparisons) {
				t.Fatalf("Parse(%q): error %v wraps no sentinel", s, err)
			}
			return
		}
		c := flt.String()
		again, err := Parse(c)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its canonical form %q fails: %v", s, c, err)
		}
		if again.String() != c {
			t.Fatalf("canonical form not stable: %q -> %q -> %q", s, c, again.String())
		}
		if again.Bounds() != flt.Bounds() || again.Comparisons() != flt.Comparisons() {
			t.Fatalf("canonical form %q changed bounds or comparison count", c)
		}
		if again.Match(e) != flt.Match(e) {
			t.Fatalf("canonical form %q changed the result on the sample", c)
		}
	})
}

func BenchmarkMatch(b *testing.B) {
	f := mustParse(b, "PartitionKey eq 'pk1' and RowKey ge 'r' and RowKey lt 's' and Age gt 30 and Active")
	g := sliceGetter{
		{Name: "PartitionKey", Value: str("pk1")}, {Name: "RowKey", Value: str("rk1")},
		{Name: "Timestamp", Value: dt("2024-01-02T03:04:05Z")}, {Name: "Name", Value: str("n")},
		{Name: "Age", Value: i32(42)}, {Name: "Active", Value: boolean(true)},
	}
	var getter Getter = g // box once: the benchmark measures Match, not the conversion
	b.ReportAllocs()
	for b.Loop() {
		if !f.Match(getter) {
			b.Fatal("no match")
		}
	}
}

// sliceGetter resembles a decoded row: a short list scanned by name.
type sliceGetter []edm.Property

func (s sliceGetter) Get(name string) (edm.Value, bool) {
	for i := range s {
		if s[i].Name == name {
			return s[i].Value, true
		}
	}
	return edm.Value{}, false
}
