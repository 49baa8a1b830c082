package fsm

import (
	"fmt"
	"strings"
	"testing"

	"tablestore/internal/edm"
	pb "tablestore/proto/tablestorepb"
)

// TestMedianKey: the size median splits the range's bytes into two
// non-empty halves, or there is none. A split at the first PartitionKey
// the range holds leaves the left half empty: a range holding one key
// above its start (its left neighbour's keys merged away, or a table
// whose keys all sort above the range's start) was split into an empty
// range and itself, and the right half, now one key at its start, could
// never split again.
func TestMedianKey(t *testing.T) {
	big := entityBytes(t, map[string]edm.Value{"S": {Type: edm.TypeString, Str: strings.Repeat("x", 1000)}})
	small := entityBytes(t, map[string]edm.Value{"S": {Type: edm.TypeString, Str: "x"}})
	cases := []struct {
		name   string
		start  string
		rows   map[string]int // PartitionKey -> rows
		want   string
		wantOK bool
	}{
		{"even keys: the middle", "", map[string]int{"a": 10, "b": 10, "c": 10, "d": 10, "e": 10}, "c", true},
		{"one key at the start: none", "k", map[string]int{"k": 40}, "", false},
		{"one key above the start: none (no empty left half)", "a", map[string]int{"k": 40}, "", false},
		{"the first key carries most: the next key", "a", map[string]int{"k": 40, "m": 2, "n": 2}, "m", true},
		{"the first key carries most, at the start: the next key", "k", map[string]int{"k": 40, "m": 2}, "m", true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, r := openTestRange(t, &pb.RangeDescriptor{RangeId: uint64(i + 1), TableId: 7, Generation: 1, Start: c.start})
			a := &applier{t: t, r: r, clock: 1}
			for pk, n := range c.rows {
				for j := 0; j < n; j++ {
					ent := small
					if n >= 10 {
						ent = big
					}
					if res := a.apply(op(pb.OpKind_OP_KIND_INSERT, pk, fmt.Sprintf("r%03d", j), ent)); res.Err != nil {
						t.Fatal(res.Err)
					}
				}
			}
			key, ok, err := r.MedianKey()
			if err != nil || key != c.want || ok != c.wantOK {
				t.Fatalf("MedianKey = %q, %v, %v; want %q, %v", key, ok, err, c.want, c.wantOK)
			}
		})
	}
}
