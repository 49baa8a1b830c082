package fsm

import (
	"bytes"
	"errors"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestGetManyMatchesGet: each key of a GetMany gets exactly what Get
// returns for it (found, not found, outside the range), and a frozen range
// refuses every key.
func TestGetManyMatchesGet(t *testing.T) {
	s, r := openTestRange(t, &pb.RangeDescriptor{RangeId: 1, TableId: 7, Start: "m", End: "t", Generation: 2})
	a := &applier{t: t, r: r, clock: 1}
	for _, pk := range []string{"n", "p"} {
		if res := a.apply(op(pb.OpKind_OP_KIND_INSERT, pk, "r", entityBytes(t, nil))); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	s.Flush()
	ks := []Key{{"n", "r"}, {"n", "other"}, {"a", "r"}, {"p", "r"}, {"t", "r"}, {"n", "r"}}
	bs, errs := r.GetMany(ks)
	if len(bs) != len(ks) || len(errs) != len(ks) {
		t.Fatalf("%d answers, %d errors for %d keys", len(bs), len(errs), len(ks))
	}
	for i, k := range ks {
		want, wantErr := r.Get(k.PK, k.RK)
		if !errors.Is(errs[i], wantErr) || (wantErr == nil && errs[i] != nil) || !bytes.Equal(bs[i], want) {
			t.Errorf("key %v: %x, %v; Get gives %x, %v", k, bs[i], errs[i], want, wantErr)
		}
	}
	if !errors.Is(errs[1], ErrEntityNotFound) || !errors.Is(errs[2], ErrKeyOutOfRange) || errs[0] != nil || len(bs[0]) == 0 {
		t.Fatalf("answers %v: want found, not found, out of range, ...", errs)
	}

	_, _, right, _, _, _ := mergeFixture(t)
	_, errs = right.GetMany([]Key{{"x", "r"}, {"y", "r"}, {"z", "r"}})
	for i, err := range errs {
		if !errors.Is(err, ErrRangeFrozen) {
			t.Errorf("frozen range, key %d: %v, want ErrRangeFrozen", i, err)
		}
	}
}
