package router

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"tablestore/internal/edm"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// fakeMapMaster answers GetPartitionMap from the map a test sets: whole,
// or (a table named) the table with its ranges or its name removed, as
// master.tableDelta does.
type fakeMapMaster struct {
	pb.UnimplementedMasterServiceServer
	mu sync.Mutex
	m  *pb.PartitionMap
	// whole, when set, is the whole map answered instead of m (one
	// fetched before a table was created, answered late).
	whole *pb.PartitionMap
}

func (f *fakeMapMaster) GetPartitionMap(_ context.Context, req *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetTable() == "" {
		if f.whole != nil {
			return f.whole, nil
		}
		return f.m, nil
	}
	out := &pb.PartitionMap{Delta: true, Version: f.m.GetVersion(), Epoch: f.m.GetEpoch(), Servers: f.m.GetServers(), Leaders: map[uint64]string{}}
	for _, t := range f.m.GetTables() {
		if !strings.EqualFold(t.GetName(), req.GetTable()) {
			continue
		}
		out.Tables = append(out.Tables, t)
		for _, d := range f.m.GetRanges() {
			if d.GetTableId() == t.GetTableId() {
				out.Ranges = append(out.Ranges, d)
				if l, ok := f.m.GetLeaders()[d.GetRangeId()]; ok {
					out.Leaders[d.GetRangeId()] = l
				}
			}
		}
	}
	if len(out.Tables) == 0 {
		out.RemovedTables = []string{strings.ToLower(req.GetTable())}
	}
	return out, nil
}

// rangesPS hosts the ranges in hosted, answering a Get with an entity
// whose RowKey is the range id's and a Write with a timestamp of the
// range id; any other range is RANGE_NOT_FOUND (a deleted table's).
type rangesPS struct {
	pb.UnimplementedPartitionServiceServer
	hosted map[uint64]bool
}

func (p rangesPS) Get(_ context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	if !p.hosted[req.GetRangeId()] {
		return nil, rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "range not hosted", nil)
	}
	e := &edm.Entity{PartitionKey: req.GetPartitionKey(), RowKey: "from-range-" + string(rune('0'+req.GetRangeId()%10))}
	return &pb.GetResponse{Entity: edm.MarshalBinary(e)}, nil
}

func (p rangesPS) Write(_ context.Context, req *pb.WriteRequest) (*pb.WriteResponse, error) {
	if !p.hosted[req.GetRangeId()] {
		return nil, rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "range not hosted", nil)
	}
	return &pb.WriteResponse{TimestampUnixNano: int64(req.GetRangeId())}, nil
}

func (p rangesPS) WriteMany(ctx context.Context, req *pb.WriteManyRequest) (*pb.WriteManyResponse, error) {
	return nil, rpcerr.New(codes.Unimplemented, "", "no WriteMany", nil)
}

// TestTableGoneUnderARequest: a request whose table the cached map held
// when it started, and which was deleted since (by another front-end: the
// range's replicas are gone, the refreshed map has no such table), ends
// at once with TABLE_NOT_FOUND (404 TableNotFound), and one whose table
// was deleted and created again goes to the new table's range. Before, the
// key was a stale range for the whole retry budget, then 503 ServerBusy.
func TestTableGoneUnderARequest(t *testing.T) {
	old := &pb.Table{Name: "t", TableId: 1}
	servers := []*pb.ServerInfo{{ServerId: "ps1", GrpcAddr: "fake-ps1"}, {ServerId: "ps2", GrpcAddr: "fake-ps2"}}
	replicas := []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}}
	tests := []struct {
		name string
		// now is the master's map after the change; whole, when set,
		// the whole map it answers.
		now, whole *pb.PartitionMap
		op         string // "get", "write" or "secondary"
		wantErr    string // reason; "" for success
		wantFrom   string // the RowKey the answer carries on success
	}{
		{"deleted get", &pb.PartitionMap{Epoch: 1, Version: 2, Servers: servers}, nil, "get", rpcerr.ReasonTableNotFound, ""},
		{"deleted write", &pb.PartitionMap{Epoch: 1, Version: 2, Servers: servers}, nil, "write", rpcerr.ReasonTableNotFound, ""},
		{"deleted secondary get", &pb.PartitionMap{Epoch: 1, Version: 2, Servers: servers}, nil, "secondary", rpcerr.ReasonTableNotFound, ""},
		{"created again get", &pb.PartitionMap{Epoch: 1, Version: 2, Servers: servers,
			Tables:  []*pb.Table{{Name: "t", TableId: 2}},
			Ranges:  []*pb.RangeDescriptor{{RangeId: 20, TableId: 2, Table: "t", Generation: 1, Replicas: replicas}},
			Leaders: map[uint64]string{20: "ps1"}}, nil, "get", "", "from-range-0"},
		{"created again write", &pb.PartitionMap{Epoch: 1, Version: 2, Servers: servers,
			Tables:  []*pb.Table{{Name: "t", TableId: 2}},
			Ranges:  []*pb.RangeDescriptor{{RangeId: 20, TableId: 2, Table: "t", Generation: 1, Replicas: replicas}},
			Leaders: map[uint64]string{20: "ps1"}}, nil, "write", "", ""},
		// The table split at "m" (the cached map has only its left
		// range) and the whole map the refresh installs predates the
		// table: the name is missing, yet the table is there.
		{"whole map without the table", &pb.PartitionMap{Epoch: 1, Version: 2, Servers: servers, Tables: []*pb.Table{old},
			Ranges: []*pb.RangeDescriptor{{RangeId: 10, TableId: 1, Table: "t", Generation: 2, End: "m", Replicas: replicas},
				{RangeId: 11, TableId: 1, Table: "t", Generation: 1, Start: "m", Replicas: replicas}},
			Leaders: map[uint64]string{10: "ps1", 11: "ps1"}}, &pb.PartitionMap{Epoch: 1, Version: 2, Servers: servers}, "get", "", "from-range-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			pb.RegisterMasterServiceServer(srv, &fakeMapMaster{m: tt.now, whole: tt.whole})
			go srv.Serve(ln)
			t.Cleanup(srv.Stop)

			cfg := DefaultConfig()
			cfg.Masters = []string{ln.Addr().String()}
			cfg.RetryTimeout = 3 * time.Second
			r, err := New(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			// The map as it was when the request looked its table up.
			cachedEnd := ""
			if tt.whole != nil {
				cachedEnd = "m"
			}
			r.install(&pb.PartitionMap{Epoch: 1, Version: 1, Servers: servers, Tables: []*pb.Table{old},
				Ranges:  []*pb.RangeDescriptor{{RangeId: 10, TableId: 1, Table: "t", Generation: 1, End: cachedEnd, Replicas: replicas}},
				Leaders: map[uint64]string{10: "ps1"}})
			ps := rangesPS{hosted: map[uint64]bool{11: true, 20: true}}
			r.RegisterLocal("fake-ps1", ps)
			r.RegisterLocal("fake-ps2", ps)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			var from string
			switch tt.op {
			case "get", "secondary":
				var e *edm.Entity
				if tt.op == "get" {
					e, err = r.Get(ctx, "t", "p", "r")
				} else {
					e, err = r.SecondaryGet(ctx, "t", "p", "r")
				}
				if err == nil {
					from = e.RowKey
				}
			case "write":
				_, err = r.Write(ctx, "t", "p", []*pb.EntityOp{{PartitionKey: "p", RowKey: "r"}})
			}
			took := time.Since(start)
			if got := rpcerr.Parse(err).Reason; got != tt.wantErr || (err == nil) != (tt.wantErr == "") {
				t.Fatalf("%s after %v: err %v (reason %q), want reason %q", tt.op, took.Round(time.Millisecond), err, got, tt.wantErr)
			}
			if from != tt.wantFrom {
				t.Fatalf("answered by %q, want %q", from, tt.wantFrom)
			}
			if took > cfg.RetryTimeout/2 {
				t.Fatalf("took %v, most of the retry budget %v", took.Round(time.Millisecond), cfg.RetryTimeout)
			}
		})
	}
}
