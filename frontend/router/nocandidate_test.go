package router

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestRangeWithoutReplicas: a range the map lists with no replica and no
// leader (nothing to try) fails, once the retry budget is spent, as a
// range that cannot be reached now (Unavailable, UNAVAILABLE: 503
// ServerBusy with Retry-After) on the leader path as on the secondary's,
// not as rangeclient.ErrNoCandidate, a plain error the front-end answers
// 500 InternalError.
func TestRangeWithoutReplicas(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Masters = []string{"127.0.0.1:1"}
	cfg.RetryTimeout = 300 * time.Millisecond
	r, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	r.install(&pb.PartitionMap{Epoch: 1, Version: 1, Tables: []*pb.Table{{Name: "t", TableId: 1}},
		Ranges: []*pb.RangeDescriptor{{RangeId: 10, TableId: 1, Table: "t", Generation: 1}}})
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"get", func(ctx context.Context) error { _, err := r.Get(ctx, "t", "p", "r"); return err }},
		{"write", func(ctx context.Context) error {
			_, err := r.Write(ctx, "t", "p", []*pb.EntityOp{{PartitionKey: "p", RowKey: "r"}})
			return err
		}},
		{"secondary get", func(ctx context.Context) error { _, err := r.SecondaryGet(ctx, "t", "p", "r"); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := tt.call(ctx)
			if _, ok := status.FromError(err); !ok || status.Code(err) != codes.Unavailable || !rpcerr.Is(err, rpcerr.ReasonUnavailable) {
				t.Fatalf("err %v, want Unavailable with reason UNAVAILABLE", err)
			}
		})
	}
}
