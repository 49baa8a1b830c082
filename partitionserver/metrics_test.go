package partitionserver

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
)

// TestObserveCounts: a request is counted under its operation and outcome,
// whether it takes the resolved children of a success or the labelled
// lookup of a failure or another operation.
func TestObserveCounts(t *testing.T) {
	for _, tc := range []struct {
		op, code string
		err      error
	}{
		{"write", "OK", nil},
		{"get", "OK", nil},
		{"query", "OK", nil},
		{"write", "NotFound", rpcerr.New(codes.NotFound, rpcerr.ReasonEntityNotFound, "gone", nil)},
		{"scan", "OK", nil},
	} {
		t.Run(tc.op+"/"+tc.code, func(t *testing.T) {
			c := requestsTotal.WithLabelValues(tc.op, tc.code)
			before := counterValue(t, c)
			observe(tc.op, time.Now(), tc.err)
			if got := counterValue(t, c) - before; got != 1 {
				t.Fatalf("requests_total{%s,%s} moved by %v, want 1", tc.op, tc.code, got)
			}
		})
	}
}
