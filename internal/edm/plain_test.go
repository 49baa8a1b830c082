package edm

import (
	"math/rand/v2"
	"testing"
)

func plainEndNaive(s []byte, i int) int {
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return i
		}
	}
	return i
}

// TestPlainEnd compares the word-at-a-time scan with a bytewise one on
// random strings built mostly of plain bytes, every special byte placed at
// every offset of a word, and on every start index.
func TestPlainEnd(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	specials := []byte{0, 0x1f, '"', '\\', 0x80, 0xc3, 0xff}
	plains := []byte{0x20, '!', '#', '[', ']', 'x', 0x7f, 0x21, 0x5b, 0x5d}
	check := func(s []byte) {
		t.Helper()
		for i := 0; i <= len(s); i++ {
			want := plainEndNaive(s, i)
			if got := plainEnd(s, i); got != want {
				t.Fatalf("plainEnd(%q, %d) = %d, want %d", s, i, got, want)
			}
			if got := plainEnd(string(s), i); got != want {
				t.Fatalf("plainEnd(string %q, %d) = %d, want %d", s, i, got, want)
			}
		}
	}
	for n := 0; n < 40; n++ {
		for pos := 0; pos < n; pos++ {
			for _, sp := range specials {
				s := make([]byte, n)
				for k := range s {
					s[k] = plains[rng.IntN(len(plains))]
				}
				s[pos] = sp
				check(s)
			}
		}
	}
	for range 2000 {
		s := make([]byte, rng.IntN(70))
		for k := range s {
			if rng.IntN(20) == 0 {
				s[k] = byte(rng.IntN(256))
			} else {
				s[k] = plains[rng.IntN(len(plains))]
			}
		}
		check(s)
	}
}
