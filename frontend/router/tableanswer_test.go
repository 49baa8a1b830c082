package router

import (
	"context"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// answerMaster answers CreateTable, DeleteTable and table lookups with the
// map a test sets, as read by the master at some version.
type answerMaster struct {
	pb.UnimplementedMasterServiceServer
	m *pb.PartitionMap
}

func (f *answerMaster) CreateTable(_ context.Context, req *pb.CreateTableRequest) (*pb.CreateTableResponse, error) {
	var tb *pb.Table
	if len(f.m.GetTables()) > 0 {
		tb = f.m.GetTables()[0]
	}
	return &pb.CreateTableResponse{Table: tb, Ranges: f.m.GetRanges(), Map: f.m}, nil
}

func (f *answerMaster) DeleteTable(context.Context, *pb.DeleteTableRequest) (*pb.DeleteTableResponse, error) {
	return &pb.DeleteTableResponse{Map: f.m}, nil
}

func (f *answerMaster) GetPartitionMap(context.Context, *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	return f.m, nil
}

// TestTableAnswerOlderThanHeldMap: what the master answers about one table
// (CreateTable, DeleteTable, a lookup) was read at a map version; a
// front-end whose watch already brought a later version holds that table
// as new or newer and must keep it. Before, a create's answer arriving
// after the watch's delivery of the table's deletion put the deleted table
// back for good (listed, found by GET /Tables('t')), and a delete's answer
// arriving after the watch brought the table's re-creation dropped the new
// table from the listing.
func TestTableAnswerOlderThanHeldMap(t *testing.T) {
	servers := []*pb.ServerInfo{{ServerId: "ps1", GrpcAddr: "fake-ps1"}}
	replicas := []*pb.Replica{{ServerId: "ps1"}}
	first := &pb.Table{Name: "T", TableId: 1}
	second := &pb.Table{Name: "T", TableId: 2}
	present := func(epoch, version uint64, tb *pb.Table) *pb.PartitionMap {
		return &pb.PartitionMap{Delta: true, Epoch: epoch, Version: version, Servers: servers, Tables: []*pb.Table{tb},
			Ranges: []*pb.RangeDescriptor{{RangeId: tb.GetTableId() * 10, TableId: tb.GetTableId(), Table: "T", Generation: 1, Replicas: replicas}}}
	}
	removed := func(epoch, version uint64) *pb.PartitionMap {
		return &pb.PartitionMap{Delta: true, Epoch: epoch, Version: version, Servers: servers, RemovedTables: []string{"t"}}
	}
	tests := []struct {
		name   string
		held   *pb.Table // the table the held map (epoch 1, version 5) has, nil none
		op     string    // create, delete or lookup
		answer *pb.PartitionMap
		want   uint64 // the table id held after, 0 none
	}{
		{"create answered before the watch's delete", nil, "create", present(1, 4, first), 0},
		{"create answered after the watch's delete", nil, "create", present(1, 6, first), 1},
		{"create answered at the watch's version", nil, "create", present(1, 5, first), 1},
		{"create answered by another master", nil, "create", present(2, 1, first), 1},
		{"delete answered before the watch's re-create", second, "delete", removed(1, 4), 2},
		{"delete answered after", second, "delete", removed(1, 6), 0},
		{"lookup answered before the watch's delete", nil, "lookup", present(1, 4, first), 0},
		{"lookup answered after", nil, "lookup", present(1, 6, first), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := routerAnswering(t, tt.answer)
			held := &pb.PartitionMap{Epoch: 1, Version: 5, Servers: servers}
			if tt.held != nil {
				held = present(1, 5, tt.held)
				held.Delta = false
			}
			r.install(held)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			switch tt.op {
			case "create":
				_, err = r.CreateTable(ctx, "T")
			case "delete":
				err = r.DeleteTable(ctx, "T")
			case "lookup":
				_, err = r.Table(ctx, "T")
				if tt.want == 0 && err != nil {
					err = nil // TableNotFound is the right answer
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			tables, _ := r.Tables(ctx)
			var got uint64
			for _, tb := range tables {
				if tb.GetName() == "T" {
					got = tb.GetTableId()
				}
			}
			if got != tt.want {
				t.Fatalf("holds table id %d (0: none) after the %s, want %d; listed %v", got, tt.op, tt.want, tables)
			}
		})
	}
}

// TestTableAnswerFromDeposedMaster: a front-end's watch moved to the new
// master leader (epoch 2) while an answer about table T was on its way
// from the old one (epoch 1): a CreateTable or DeleteTable it committed
// before it lost the leadership, or a lookup it answered from its state
// machine while it still took itself for the leader. Versions of two
// masters do not compare; the master group's Raft index does (every
// master applies the same log). An answer read at a lower index than the
// held map's is older than what the map holds of T and must not replace
// it: before, it was applied because it came from another master, and the
// front-end listed (and routed to the dropped ranges of) a table deleted
// under the new master, or lost a table the new master created again,
// until a whole map happened to replace it.
func TestTableAnswerFromDeposedMaster(t *testing.T) {
	servers := []*pb.ServerInfo{{ServerId: "ps1", GrpcAddr: "fake-ps1"}}
	replicas := []*pb.Replica{{ServerId: "ps1"}}
	first := &pb.Table{Name: "T", TableId: 1}
	second := &pb.Table{Name: "T", TableId: 2}
	present := func(epoch, version, index uint64, tb *pb.Table) *pb.PartitionMap {
		return &pb.PartitionMap{Delta: true, Epoch: epoch, Version: version, Index: index, Servers: servers, Tables: []*pb.Table{tb},
			Ranges: []*pb.RangeDescriptor{{RangeId: tb.GetTableId() * 10, TableId: tb.GetTableId(), Table: "T", Generation: 1, Replicas: replicas}}}
	}
	removed := func(epoch, version, index uint64) *pb.PartitionMap {
		return &pb.PartitionMap{Delta: true, Epoch: epoch, Version: version, Index: index, Servers: servers, RemovedTables: []string{"t"}}
	}
	// The held map: the new master's (epoch 2) whole map at version 5,
	// Raft index heldIndex, then perhaps one delta of its watch at
	// version 6, Raft index streamIndex.
	tests := []struct {
		name        string
		held        *pb.Table // the table the held map has, nil none
		heldIndex   uint64
		streamIndex uint64 // 0: no delta after the whole map
		op          string // create, delete, lookup or refresh (a whole map)
		answer      *pb.PartitionMap
		want        uint64 // the table id held after, 0 none
	}{
		{"create answered by the old master, read before the new one deleted it", nil, 100, 0, "create", present(1, 40, 90, first), 0},
		{"create answered by the old master, read after the held map", nil, 100, 0, "create", present(1, 40, 110, first), 1},
		{"create answered by the old master, read at the held map's index", nil, 100, 0, "create", present(1, 40, 100, first), 1},
		{"delete answered by the old master, read before the new one created it again", second, 100, 0, "delete", removed(1, 40, 90), 2},
		{"delete answered by the old master, read after the held map", second, 100, 0, "delete", removed(1, 40, 110), 0},
		{"lookup answered by the old master, read before the new one deleted it", nil, 100, 0, "lookup", present(1, 40, 90, first), 0},
		{"lookup answered by another master, read after the held map", nil, 100, 0, "lookup", present(1, 40, 110, first), 1},
		{"the watch's delta moves the held index past the answer", nil, 100, 120, "create", present(1, 40, 110, first), 0},
		{"whole map from the old master, read before the held map", nil, 100, 0, "refresh", wholeOf(present(1, 40, 90, first)), 0},
		{"whole map from another master, read after the held map", nil, 100, 0, "refresh", wholeOf(present(1, 40, 110, first)), 1},
		// Masters from before the index: as before, another master's
		// answer is applied.
		{"held map without an index", nil, 0, 0, "create", present(1, 40, 90, first), 1},
		{"answer without an index", nil, 100, 0, "create", present(1, 40, 0, first), 1},
		// The same master: its versions decide (they also order the
		// leaders, which the index does not).
		{"same master, older version at the same index", nil, 100, 0, "create", present(2, 4, 100, first), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := routerAnswering(t, tt.answer)
			held := &pb.PartitionMap{Epoch: 2, Version: 5, Index: tt.heldIndex, Servers: servers}
			if tt.held != nil {
				held = wholeOf(present(2, 5, tt.heldIndex, tt.held))
			}
			r.installStream(held)
			if tt.streamIndex != 0 {
				if !r.applyStreamDelta(&pb.PartitionMap{Delta: true, Epoch: 2, Version: 6, Index: tt.streamIndex, Servers: servers}) {
					t.Fatal("the watch's delta was refused")
				}
			}

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			switch tt.op {
			case "create":
				_, err = r.CreateTable(ctx, "T")
			case "delete":
				err = r.DeleteTable(ctx, "T")
			case "lookup":
				_, err = r.Table(ctx, "T")
				if tt.want == 0 && err != nil {
					err = nil // TableNotFound is the right answer
				}
			case "refresh":
				err = r.refresh(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			tables, _ := r.Tables(ctx)
			var got uint64
			for _, tb := range tables {
				if tb.GetName() == "T" {
					got = tb.GetTableId()
				}
			}
			if got != tt.want {
				t.Fatalf("holds table id %d (0: none) after the %s, want %d; listed %v", got, tt.op, tt.want, tables)
			}
		})
	}
}

// wholeOf is m as a whole map rather than a delta.
func wholeOf(m *pb.PartitionMap) *pb.PartitionMap {
	m.Delta = false
	return m
}

// routerAnswering is a router whose only master answers every table
// request and map fetch with m.
func routerAnswering(t *testing.T, m *pb.PartitionMap) *Router {
	t.Helper()
	return routerWithMaster(t, &answerMaster{m: m})
}
