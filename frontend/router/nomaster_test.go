package router

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "tablestore/proto/tablestorepb"
)

// TestNoMasterIsATimeout: a call to the masters that finds no leader
// before the request's context ends (masterclient.ErrNoMaster, a plain
// error) reaches the front-end as the context's status (DeadlineExceeded
// or Canceled: 500 OperationTimedOut, as --request-timeout promises), not
// as an error without a status (500 InternalError, logged as the
// front-end's own failure).
func TestNoMasterIsATimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Masters = []string{"127.0.0.1:1"} // nothing listens
	r, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	r.install(&pb.PartitionMap{Epoch: 1, Version: 1, Tables: []*pb.Table{{Name: "cached", TableId: 1}}})
	ops := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"lookup of an uncached table", func(ctx context.Context) error { _, err := r.Table(ctx, "uncached"); return err }},
		{"create table", func(ctx context.Context) error { _, err := r.CreateTable(ctx, "newtable"); return err }},
		{"delete table", func(ctx context.Context) error { return r.DeleteTable(ctx, "cached") }},
		{"set table ACL", func(ctx context.Context) error { return r.SetTableACL(ctx, "cached", nil) }},
		{"set service properties", func(ctx context.Context) error { return r.SetServiceProperties(ctx, "", []byte("<x/>")) }},
		{"set accounts", func(ctx context.Context) error { return r.SetAccounts(ctx, nil) }},
	}
	ends := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want codes.Code
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 150*time.Millisecond)
		}, codes.DeadlineExceeded},
		{"client gone", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(150*time.Millisecond, cancel)
			return ctx, cancel
		}, codes.Canceled},
	}
	for _, op := range ops {
		for _, end := range ends {
			t.Run(op.name+"/"+end.name, func(t *testing.T) {
				ctx, cancel := end.ctx()
				defer cancel()
				err := op.call(ctx)
				if _, ok := status.FromError(err); !ok || status.Code(err) != end.want {
					t.Fatalf("err %v (a status: %v, code %v), want code %v", err, ok, status.Code(err), end.want)
				}
			})
		}
	}
}
