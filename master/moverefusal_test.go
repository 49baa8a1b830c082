package master

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"tablestore/internal/connpool"
	pb "tablestore/proto/tablestorepb"
)

// TestMoveRefusalSaysWhy: a move to a server that already holds a replica
// of the range says so (it said only `bad target server: "ps3"`), and a
// --from server that holds none is named as the source, not the target.
func TestMoveRefusalSaysWhy(t *testing.T) {
	s := &Server{cfg: DefaultConfig(), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: 1,
		pool: connpool.New(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	defer s.pool.Close()
	s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
	apply := applier(t, s.fsm)
	for _, id := range []string{"a", "b", "c", "d"} {
		apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "127.0.0.1:1"}})
	}
	res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}})
	if res.err != nil {
		t.Fatal(res.err)
	}
	id := res.ranges[0].GetRangeId()
	_, err := s.move(context.Background(), id, "", "c", causeOperator, "", nil)
	if !errors.Is(err, ErrBadTarget) || !strings.Contains(err.Error(), "c already holds a replica of range") {
		t.Errorf("move to a replica's server: %v", err)
	}
	if got := opStatus(err); !strings.Contains(got.Error(), "already holds") {
		t.Errorf("status %v", got)
	}
	// The source check runs after every replica was asked whether it
	// answers: a short deadline, nothing listens there.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = s.moveSource(ctx, res.ranges[0], "d")
	if !errors.Is(err, ErrBadSource) || strings.Contains(err.Error(), "target") || !strings.Contains(err.Error(), "d holds no replica of range") {
		t.Errorf("move from a server without a replica: %v", err)
	}
}
