package edm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// sameEntity reports the first difference between two entities, comparing
// values with Value.Equal and times with time.Equal; "" means equal.
func sameEntity(a, b *Entity) string {
	switch {
	case a.PartitionKey != b.PartitionKey:
		return fmt.Sprintf("PartitionKey %q != %q", a.PartitionKey, b.PartitionKey)
	case a.RowKey != b.RowKey:
		return fmt.Sprintf("RowKey %q != %q", a.RowKey, b.RowKey)
	case !a.Timestamp.Equal(b.Timestamp):
		return fmt.Sprintf("Timestamp %v != %v", a.Timestamp, b.Timestamp)
	case len(a.Properties) != len(b.Properties):
		return fmt.Sprintf("%d properties != %d", len(a.Properties), len(b.Properties))
	}
	for i := range a.Properties {
		p, q := a.Properties[i], b.Properties[i]
		if p.Name != q.Name {
			return fmt.Sprintf("property %d: name %q != %q", i, p.Name, q.Name)
		}
		if !p.Value.Equal(q.Value) {
			return fmt.Sprintf("property %q: %#v != %#v", p.Name, p.Value, q.Value)
		}
	}
	return ""
}

func mustTime(s string) time.Time {
	t, err := ParseDateTime(s)
	if err != nil {
		panic(err)
	}
	return t
}

// randEntity builds a valid entity with properties of every type, sorted by
// name, for property-based tests.
func randEntity(r *rand.Rand) *Entity {
	e := &Entity{PartitionKey: randString(r, 20, true), RowKey: randString(r, 20, true)}
	if r.IntN(4) != 0 {
		e.Timestamp = TruncateTick(time.Unix(r.Int64N(4e9), r.Int64N(1e9)))
	}
	n := r.IntN(20)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("P%02d_%s", i, randIdent(r))
		e.Properties = append(e.Properties, Property{Name: name, Value: randValue(r)})
	}
	return e
}

func randIdent(r *rand.Rand) string {
	const chars = "abcXYZ_09é"
	var b strings.Builder
	for i := r.IntN(6); i > 0; i-- {
		b.WriteString(string([]rune(chars)[r.IntN(len([]rune(chars)))]))
	}
	return b.String()
}

func randString(r *rand.Rand, max int, key bool) string {
	pool := []rune("abc XYZ 012 ' \" \\ \n é ü 日本 😀 ~.-_%+")
	if key {
		pool = []rune("abc XYZ 012 ' \" é 日本 😀 ~.-_%+")
	}
	var b strings.Builder
	for i := r.IntN(max + 1); i > 0; i-- {
		b.WriteRune(pool[r.IntN(len(pool))])
	}
	return b.String()
}

func randValue(r *rand.Rand) Value {
	switch Type(r.IntN(8) + 1) {
	case TypeString:
		return StringValue(randString(r, 40, false))
	case TypeBinary:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		return BinaryValue(b)
	case TypeBoolean:
		return BoolValue(r.IntN(2) == 1)
	case TypeDateTime:
		lo, hi := MinDateTime.Unix(), MaxDateTime.Unix()
		return DateTimeValue(time.Unix(lo+r.Int64N(hi-lo), r.Int64N(1e9)))
	case TypeDouble:
		switch r.IntN(8) {
		case 0:
			return DoubleValue(math.NaN())
		case 1:
			return DoubleValue(math.Inf(1 - 2*r.IntN(2)))
		case 2:
			return DoubleValue(float64(r.Int64N(1e6)))
		case 3:
			return DoubleValue(math.Copysign(0, -1))
		case 4:
			return DoubleValue(math.Float64frombits(r.Uint64()&^(0x7FF<<52) | uint64(r.IntN(0x7FF))<<52))
		}
		return DoubleValue(r.NormFloat64() * math.Pow(10, float64(r.IntN(40)-20)))
	case TypeGuid:
		var g [16]byte
		for i := range g {
			g[i] = byte(r.UintN(256))
		}
		return GuidValue(string(appendGuid(nil, g)))
	case TypeInt32:
		return Int32Value(int32(r.Uint32()))
	default:
		return Int64Value(int64(r.Uint64()))
	}
}

func nan() float64         { return math.NaN() }
func inf(sign int) float64 { return math.Inf(sign) }

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
