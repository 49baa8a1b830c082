package router

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/frontend"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// refusingPS refuses every query as seed 246's range 10 leader did: not
// the leader, naming nobody.
type refusingPS struct {
	pb.UnimplementedPartitionServiceServer
}

func (refusingPS) Query(context.Context, *pb.QueryRequest) (*pb.QueryResponse, error) {
	return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, "partitionserver: not the range leader", nil)
}

// recordingHandler keeps the records logged at warn or above.
type recordingHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// A request whose client goes away is logged at debug only, so a call that
// retries a refusal for longer than the client waits must say itself what
// it is retrying: seed 246's seven SDK tries of one query page left no
// line in the front-end's log.
func TestSlowCallLogsItsFailure(t *testing.T) {
	// The threshold, not its 5 s, is under test: 1.5 s still leaves the
	// call many refused rounds before it warns, and a second after it.
	old := slowCallWarn
	slowCallWarn = 1500 * time.Millisecond
	t.Cleanup(func() { slowCallWarn = old })
	h := &recordingHandler{}
	cfg := DefaultConfig()
	cfg.Masters = []string{"127.0.0.1:1"}
	r, err := New(cfg, slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	table := &pb.Table{Name: "t", TableId: 1}
	r.mu.Lock()
	r.tables["t"] = table
	r.leaders[10] = "ps1"
	for _, id := range []string{"ps1", "ps2"} {
		r.servers[id] = &pb.ServerInfo{ServerId: id, GrpcAddr: "fake-" + id}
	}
	r.ranges[1] = []*pb.RangeDescriptor{{RangeId: 10, TableId: 1, Table: "t", Generation: 3,
		Replicas: []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}}}}
	r.rangeTable[10] = 1
	r.mu.Unlock()
	r.RegisterLocal("fake-ps1", refusingPS{})
	r.RegisterLocal("fake-ps2", refusingPS{})

	// The client gives up after slowCallWarn and a second, within the
	// retry budget (10 s): the call is still retrying when it goes.
	ctx, cancel := context.WithTimeout(context.Background(), slowCallWarn+time.Second)
	defer cancel()
	if _, err := r.Query(ctx, "t", frontend.Query{Top: 10}); err == nil {
		t.Fatal("query of a range that refuses everything succeeded")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, rec := range h.recs {
		if rec.Message != "range call still failing" {
			continue
		}
		n++
		var rangeID uint64
		var msg string
		rec.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "range":
				rangeID = a.Value.Uint64()
			case "err":
				msg = a.Value.String()
			}
			return true
		})
		if rangeID != 10 || !strings.Contains(msg, "not the range leader") {
			t.Errorf("logged range %d, err %q; want range 10 and the refusal", rangeID, msg)
		}
	}
	if n != 1 {
		t.Fatalf("%d warnings for the slow call, want exactly 1", n)
	}
}
