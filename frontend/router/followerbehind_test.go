package router

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/frontend"
	"tablestore/internal/edm"
	"tablestore/internal/filter"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// behindPS is a replica whose state has yet to apply the merge the map
// shows (its range still ends at "m"): a read of a key at or after "m"
// is STALE_RANGE there. upToDate replicas serve every key.
type behindPS struct {
	pb.UnimplementedPartitionServiceServer
	name   string
	behind bool
}

func (p behindPS) Get(_ context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	if p.behind && req.GetPartitionKey() >= "m" {
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonStaleRange, "fsm: key outside the range", nil)
	}
	return &pb.GetResponse{Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: req.GetPartitionKey(), RowKey: p.name})}, nil
}

func (p behindPS) Query(_ context.Context, req *pb.QueryRequest) (*pb.QueryResponse, error) {
	if p.behind && req.GetStartPartitionKey() >= "m" {
		return nil, rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonStaleRange, "fsm: start key outside the range", nil)
	}
	end := ""
	if p.behind {
		end = "m"
	}
	e := edm.MarshalBinary(&edm.Entity{PartitionKey: req.GetStartPartitionKey(), RowKey: p.name})
	return &pb.QueryResponse{Entities: [][]byte{e}, Range: &pb.RangeDescriptor{RangeId: 10, TableId: 1, End: end}}, nil
}

// TestSecondaryReadPastAReplicaBehind: on the secondary, a replica that
// answers STALE_RANGE for a key of the range the map shows is, more often
// than the map, behind it (a merge it has yet to apply: its range still
// ends short of the key); the other replicas of the round may serve the
// key and are asked before the map is refreshed. Before, the first such
// answer ended the round, and with the replica listed first every
// secondary read of the key failed (503) after its two rounds.
func TestSecondaryReadPastAReplicaBehind(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Masters = []string{"127.0.0.1:1"}
	cfg.RetryTimeout = 2 * time.Second
	r, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	var servers []*pb.ServerInfo
	for _, id := range []string{"ps1", "ps2", "ps3"} {
		servers = append(servers, &pb.ServerInfo{ServerId: id, GrpcAddr: "fake-" + id})
	}
	// The merged range [-inf, +inf), generation 3; ps1 leads, so the
	// secondary asks ps2 (behind), then ps3, then ps1.
	r.install(&pb.PartitionMap{Epoch: 1, Version: 1, Servers: servers, Tables: []*pb.Table{{Name: "t", TableId: 1}},
		Ranges: []*pb.RangeDescriptor{{RangeId: 10, TableId: 1, Table: "t", Generation: 3,
			Replicas: []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}}},
		Leaders: map[uint64]string{10: "ps1"}})
	r.RegisterLocal("fake-ps1", behindPS{name: "ps1"})
	r.RegisterLocal("fake-ps2", behindPS{name: "ps2", behind: true})
	r.RegisterLocal("fake-ps3", behindPS{name: "ps3"})

	tests := []struct {
		name string
		read func(ctx context.Context) (string, error)
		want string // the replica that answers
	}{
		{"get before the old end", func(ctx context.Context) (string, error) {
			e, err := r.SecondaryGet(ctx, "t", "a", "r")
			if err != nil {
				return "", err
			}
			return e.RowKey, nil
		}, "ps2"},
		{"get past the old end", func(ctx context.Context) (string, error) {
			e, err := r.SecondaryGet(ctx, "t", "p", "r")
			if err != nil {
				return "", err
			}
			return e.RowKey, nil
		}, "ps3"},
		{"query past the old end", func(ctx context.Context) (string, error) {
			f, err := filter.Parse("PartitionKey ge 'p'")
			if err != nil {
				return "", err
			}
			page, err := r.SecondaryQuery(ctx, "t", frontend.Query{Filter: f, FilterText: "PartitionKey ge 'p'", Top: 1})
			if err != nil || len(page.Entities) == 0 {
				return "", err
			}
			return page.Entities[0].RowKey, nil
		}, "ps3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got, err := tt.read(ctx)
			if err != nil || got != tt.want {
				t.Fatalf("answered by %q, err %v; want %q", got, err, tt.want)
			}
		})
	}
}
