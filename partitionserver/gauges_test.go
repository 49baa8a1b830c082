package partitionserver

import (
	"reflect"
	"testing"
)

func TestBusiest(t *testing.T) {
	rates := []rangeRate{{rangeID: 1, entitiesPerSec: 5}, {rangeID: 2, entitiesPerSec: 50}, {rangeID: 3, entitiesPerSec: 5}, {rangeID: 4}}
	for _, tc := range []struct {
		name string
		n    int
		want []uint64
	}{
		{"top two", 2, []uint64{2, 1}},
		{"ties by id", 3, []uint64{2, 1, 3}},
		{"fewer than n", 10, []uint64{2, 1, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []uint64
			for _, r := range busiest(rates, tc.n) {
				got = append(got, r.rangeID)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("busiest(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
}
