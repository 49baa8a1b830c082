package master

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestCommandDuringHandOffIsNotLeader: a leader handing its lead off
// (Close, StepDown) refuses commands, uncommitted, until the hand-off ends;
// the refusal is answered Unavailable NotLeader, so a front-end tries the
// next master under the same request id. It was Internal ("leadership
// transfer in progress"): the front-end answered 500, and the SDK's retry
// of a create or delete whose first attempt had committed, sent under a
// new id, got 409 or 404 (TestTableRequestsAcrossMasterFailover, 1 run in
// 4 on a loaded machine; reliability.md 56). The hand-off goes to a
// stopped master that is behind, so it lasts its whole timeout (the
// election timeout) and the refusals are there to see.
func TestCommandDuringHandOffIsNotLeader(t *testing.T) {
	g := startGroup(t, 3)
	l := g.leader()
	target := g.others(l)[0]
	g.stop(target)
	v := &service{s: l.s}
	acl := func(i int) error {
		_, err := v.SetTableACL(context.Background(), &pb.SetTableACLRequest{Name: fmt.Sprintf("missing%d", i)})
		return err
	}
	// A command the stopped target lacks: the hand-off waits to catch it
	// up instead of failing at once on its TimeoutNow.
	if err := acl(0); codeOf(err) != codes.NotFound {
		t.Fatalf("command before the hand-off: %v, want NotFound (the table is missing)", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- l.s.raft.LeadershipTransferToServer(raft.ServerID(target.cfg.ID), raft.ServerAddress(target.cfg.RaftAddr)).Error()
	}()
	refused := 0
	deadline := time.After(10 * time.Second)
	for i := 1; ; i++ {
		select {
		case err := <-done:
			if refused == 0 {
				t.Fatalf("the hand-off ended (%v) before any command was refused", err)
			}
			return
		case <-deadline:
			t.Fatal("the hand-off to a stopped master did not end")
		default:
		}
		err := acl(i)
		if codeOf(err) == codes.NotFound {
			continue // before the hand-off began, or after it ended
		}
		if info := rpcerr.Parse(err); info.Code != codes.Unavailable || info.Reason != rpcerr.ReasonNotLeader {
			t.Fatalf("command during the hand-off: %v, want Unavailable %s", err, rpcerr.ReasonNotLeader)
		}
		refused++
	}
}

// codeOf is err's gRPC code.
func codeOf(err error) codes.Code { return rpcerr.Parse(err).Code }
