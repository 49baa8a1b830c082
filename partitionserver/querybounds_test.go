package partitionserver

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"tablestore/internal/edm"
	pb "tablestore/proto/tablestorepb"
)

// TestQueryStopsAtFilterKeyBounds: a page whose last match is the last
// key the filter admits ends the query (no continuation), however the
// filter bounds the keys: an exclusive PartitionKey bound, or a RowKey
// range within one partition. The scan read only inclusive PartitionKey
// bounds, so such a page continued into keys that cannot match (the whole
// next partition for "lt", the rest of the partition for a RowKey range):
// an empty page to follow, or several for a large partition, each reading
// what the filter excludes.
func TestQueryStopsAtFilterKeyBounds(t *testing.T) {
	s := startedServer(t)
	const id = 47
	_, v := leadingRangeWithWrites(t, s, id, 1, 10) // p/r0 .. p/r9
	for i := range 5 {
		rk := fmt.Sprintf("r%d", i)
		op := &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "q", RowKey: rk,
			Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: "q", RowKey: rk})}
		wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := v.Write(wctx, &pb.WriteRequest{RangeId: id, Generation: 1, Ops: []*pb.EntityOp{op}, RequestId: []byte("q" + rk)})
		cancel()
		if err != nil {
			t.Fatalf("write q/%s: %v", rk, err)
		}
	}
	for _, tc := range []struct {
		filter   string
		limit    uint32
		start    [2]string // continuation, "" for none
		want     []string
		wantNext string // "pk/rk", "" for none
	}{
		{filter: "PartitionKey lt 'q'", limit: 10, want: keyRange("p", 0, 10)},
		{filter: "PartitionKey gt 'p'", limit: 5, want: keyRange("q", 0, 5)},
		{filter: "PartitionKey eq 'p' and RowKey ge 'r3' and RowKey lt 'r6'", limit: 3, want: keyRange("p", 3, 6)},
		{filter: "PartitionKey eq 'p' and RowKey gt 'r3' and RowKey le 'r6'", limit: 3, want: keyRange("p", 4, 7)},
		{filter: "PartitionKey ge 'p' and PartitionKey le 'p' and RowKey le 'r1'", limit: 2, want: keyRange("p", 0, 2)},
		{filter: "PartitionKey eq 'p' and RowKey ge 'r3' and RowKey lt 'r6'", limit: 3, start: [2]string{"p", "r4"}, want: keyRange("p", 4, 6)},
		{filter: "PartitionKey eq 'p' and RowKey eq 'r2' and RowKey eq 'r3'", limit: 3},
		// A page that fills inside the bounds still continues.
		{filter: "PartitionKey eq 'p' and RowKey ge 'r3' and RowKey lt 'r6'", limit: 2, want: keyRange("p", 3, 5), wantNext: "p/r5"},
		{filter: "PartitionKey lt 'q'", limit: 9, want: keyRange("p", 0, 9), wantNext: "p/r9"},
		// RowKey bounds across partitions are not used (a seek per
		// partition): the page continues at the next key.
		{filter: "RowKey lt 'r2'", limit: 4, want: append(keyRange("p", 0, 2), keyRange("q", 0, 2)...), wantNext: "q/r2"},
	} {
		req := &pb.QueryRequest{RangeId: id, Generation: 1, Filter: tc.filter, Limit: tc.limit}
		if tc.start[0] != "" {
			req.HasStart, req.StartPartitionKey, req.StartRowKey = true, tc.start[0], tc.start[1]
		}
		resp, err := v.Query(context.Background(), req)
		if err != nil {
			t.Fatalf("%q: %v", tc.filter, err)
		}
		var got []string
		for _, b := range resp.GetEntities() {
			e, err := edm.UnmarshalBinary(b)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, e.PartitionKey+"/"+e.RowKey)
		}
		next := ""
		if resp.GetHasNext() {
			next = resp.GetNextPartitionKey() + "/" + resp.GetNextRowKey()
		}
		if !slices.Equal(got, tc.want) || next != tc.wantNext {
			t.Errorf("%q limit %d from %q: got %v next %q, want %v next %q", tc.filter, tc.limit, tc.start, got, next, tc.want, tc.wantNext)
		}
	}
}

// keyRange is "pk/r<from>" .. "pk/r<to-1>".
func keyRange(pk string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s/r%d", pk, i))
	}
	return out
}
