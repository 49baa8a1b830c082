package keys

import (
	"bytes"
	"math/rand"
	"sort"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	cases := []struct{ pk, rk string }{
		{"", ""},
		{"a", ""},
		{"", "b"},
		{"p\x00k", "r\x00\x00"},
		{"\x00", "\xff"},
		{"päß", "行"},
	}
	for _, c := range cases {
		t.Run(c.pk+"/"+c.rk, func(t *testing.T) {
			pk, rk, err := Decode(Encode(c.pk, c.rk))
			if err != nil || pk != c.pk || rk != c.rk {
				t.Fatalf("Decode(Encode(%q,%q)) = %q,%q,%v", c.pk, c.rk, pk, rk, err)
			}
		})
	}
}

func TestOrderMatchesPairOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	alphabet := []byte{0x00, 0x01, 0x02, 'a', 'b', 0xff}
	gen := func() string {
		n := rng.Intn(4)
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		return string(b)
	}
	type pair struct{ pk, rk string }
	pairs := make([]pair, 2000)
	for i := range pairs {
		pairs[i] = pair{gen(), gen()}
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].pk != pairs[j].pk {
			return pairs[i].pk < pairs[j].pk
		}
		return pairs[i].rk < pairs[j].rk
	})
	for i := 1; i < len(pairs); i++ {
		a, b := Encode(pairs[i-1].pk, pairs[i-1].rk), Encode(pairs[i].pk, pairs[i].rk)
		if bytes.Compare(a, b) > 0 {
			t.Fatalf("order broken between %q and %q", pairs[i-1], pairs[i])
		}
		for _, p := range []pair{pairs[i-1], pairs[i]} {
			k := Encode(p.pk, p.rk)
			if bytes.Compare(k, PartitionStart(p.pk)) < 0 || bytes.Compare(k, PartitionEnd(p.pk)) >= 0 {
				t.Fatalf("key of %q outside its partition bounds", p)
			}
		}
		if pairs[i-1].pk < pairs[i].pk && bytes.Compare(PartitionEnd(pairs[i-1].pk), b) > 0 {
			t.Fatalf("PartitionEnd(%q) above a key of %q", pairs[i-1].pk, pairs[i].pk)
		}
	}
}

// TestRowEnd: RowEnd(pk, rk) lies above exactly the keys (pk, x) with
// x <= rk and the keys of smaller PartitionKeys.
func TestRowEnd(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	alphabet := []byte{0x00, 0x01, 0x02, 'a', 'b', 0xff}
	gen := func() string {
		b := make([]byte, rng.Intn(4))
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		return string(b)
	}
	for range 20000 {
		pk, rk, xpk, xrk := gen(), gen(), gen(), gen()
		below := bytes.Compare(Encode(xpk, xrk), RowEnd(pk, rk)) < 0
		if want := xpk < pk || (xpk == pk && xrk <= rk); below != want {
			t.Fatalf("key (%q, %q) below RowEnd(%q, %q): %v, want %v", xpk, xrk, pk, rk, below, want)
		}
	}
}

func TestDecodeCorrupt(t *testing.T) {
	for _, b := range [][]byte{nil, {'a'}, {0x00}, {0x00, 0x05}, {'a', 0x00, 0x01}, {0x00, 0x01, 0x00, 0x01, 'x'}} {
		if _, _, err := Decode(b); err == nil {
			t.Errorf("Decode(%x) succeeded", b)
		}
	}
}
