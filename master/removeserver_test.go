package master

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

func TestServerRemovalRefusal(t *testing.T) {
	const timeout = 3 * time.Second
	for _, tc := range []struct {
		name     string
		known    bool
		replicas int
		heard    bool
		silent   time.Duration
		want     error
	}{
		{"unknown", false, 0, false, 0, ErrUnknownServer},
		{"holds replicas", true, 2, true, time.Hour, ErrServerInUse},
		{"heard from recently", true, 0, true, time.Second, ErrServerUp},
		{"silent less than the timeout", true, 0, true, timeout - time.Millisecond, ErrServerUp},
		{"silent for the timeout", true, 0, true, timeout, nil},
		{"never heard in this term", true, 0, false, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := serverRemovalRefusal("ps4", tc.known, tc.replicas, tc.heard, tc.silent, timeout)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestApplyRemoveServer: the command removes a server no range lists and
// refuses, changing nothing, one that a range lists (a move recorded
// after the service's check).
func TestApplyRemoveServer(t *testing.T) {
	f := &fsm{st: newState(), onChange: func(*changeSet) {}}
	apply := applier(t, f)
	for _, id := range []string{"a", "b", "c", "d"} {
		apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id}})
	}
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	if res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "t", Replicas: reps}); res.err != nil {
		t.Fatal(res.err)
	}
	if res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_SERVER, &pb.RemoveServerCommand{ServerId: "a"}); !errors.Is(res.err, ErrServerInUse) {
		t.Fatalf("removing a server a range lists: %v, want ErrServerInUse", res.err)
	}
	if res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_SERVER, &pb.RemoveServerCommand{ServerId: "d"}); res.err != nil {
		t.Fatalf("removing a server no range lists: %v", res.err)
	}
	if res := apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_SERVER, &pb.RemoveServerCommand{ServerId: "d"}); !errors.Is(res.err, ErrUnknownServer) {
		t.Fatalf("removing it again: %v, want ErrUnknownServer", res.err)
	}
	f.read(func(st *state) {
		if _, ok := st.servers["d"]; ok || len(st.servers) != 3 {
			t.Fatalf("servers after the removal: %v", st.servers)
		}
	})
}

// applier returns a function that applies one command to f as the next
// log entry.
func applier(t *testing.T, f *fsm) func(pb.MasterCommandKind, proto.Message) *applyResult {
	var index uint64
	return func(kind pb.MasterCommandKind, m proto.Message) *applyResult {
		t.Helper()
		data, err := encodeCommand(kind, m)
		if err != nil {
			t.Fatal(err)
		}
		index++
		return f.Apply(&raft.Log{Index: index, Data: data}).(*applyResult)
	}
}
