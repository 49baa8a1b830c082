package master

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// Errors of RemoveServer.
var (
	// ErrServerInUse: ranges still list the server (drain it first).
	ErrServerInUse = errors.New("master: ranges still list the server")
	// ErrServerUp: the server is heard from, or has not been silent for
	// the server timeout yet: removed, its next heartbeat would register
	// it again.
	ErrServerUp = errors.New("master: the server is up")
)

// serverRemovalRefusal decides whether a partition server may leave the
// registry (nil: it may). known: the registry has it; replicas: how many
// descriptors list it; silent: how long since this master last heard from
// it (heard: ever, in this term). Pure.
func serverRemovalRefusal(id string, known bool, replicas int, heard bool, silent, timeout time.Duration) error {
	switch {
	case !known:
		return fmt.Errorf("%w: %q", ErrUnknownServer, id)
	case replicas > 0:
		return fmt.Errorf("%w: %d replicas on %s; drain it first (ctl drain %s)", ErrServerInUse, replicas, id, id)
	case serverUp(heard, silent, timeout):
		return fmt.Errorf("%w: %s was heard from %s ago (down after %s); stop it first", ErrServerUp, id, silent.Round(time.Millisecond), timeout)
	}
	return nil
}

// RemoveServer forgets a partition server that is down and holds no
// replica in the map: a drained server after a scale-in stays in the
// registry (ctl servers, the dashboard, the map's servers) as down for
// ever otherwise. The registry's record is the only thing removed; a
// server started again under the same id registers anew, and any replica
// it still stores is stale (a later generation does not list it) and
// collected (replicagc.go). CockroachDB's node decommission and PD's store
// delete are the models; as in them, the replicas must be gone first.
func (v *service) RemoveServer(_ context.Context, req *pb.RemoveServerRequest) (*pb.RemoveServerResponse, error) {
	s := v.s
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	id := req.GetServerId()
	var known bool
	var replicas int
	s.fsm.read(func(st *state) {
		_, known = st.servers[id]
		replicas = st.replicaCount[id]
	})
	at, heard := s.reports.seen()[id]
	if err := serverRemovalRefusal(id, known, replicas, heard, time.Since(at), s.cfg.ServerTimeout); err != nil {
		return nil, toStatus(err)
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_SERVER, &pb.RemoveServerCommand{ServerId: id}); err != nil {
		return nil, toStatus(err)
	}
	s.reports.forgetServer(id)
	s.event(&pb.Event{Kind: pb.EventKind_EVENT_KIND_SERVER_REMOVED, Servers: []string{id}, Cause: causeOperator,
		Message: fmt.Sprintf("partition server %s removed from the registry", id)})
	s.bump()
	return &pb.RemoveServerResponse{}, nil
}

// applyRemoveServer deletes a server's registry record. It checks again
// that no range lists the server: a move recorded between the service's
// check and this command must not leave a range on an unknown server.
func applyRemoveServer(s *state, payload []byte) *applyResult {
	var c pb.RemoveServerCommand
	if err := proto.Unmarshal(payload, &c); err != nil || c.GetServerId() == "" {
		return &applyResult{err: ErrBadCommand}
	}
	id := c.GetServerId()
	if _, ok := s.servers[id]; !ok {
		return &applyResult{err: fmt.Errorf("%w: %q", ErrUnknownServer, id)}
	}
	if n := s.replicaCount[id]; n > 0 {
		return &applyResult{err: fmt.Errorf("%w: %d replicas on %s", ErrServerInUse, n, id)}
	}
	delete(s.servers, id)
	s.changedOther()
	return &applyResult{}
}
