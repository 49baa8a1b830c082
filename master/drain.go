package master

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// ErrDrainTooFew: draining the server would leave fewer live servers to
// hold replicas than the replication factor, so its replicas could not
// move.
var ErrDrainTooFew = errors.New("master: too few servers left to drain onto")

// serverView is what the operator refusals (drainRefusal,
// moveTargetRefusal, mergeReplicasRefusal) know of a registered server.
type serverView struct {
	// up: heard from within the server timeout (serverUp).
	up       bool
	draining bool
	// disk is the server's last disk space report (nil: none).
	disk *pb.DiskSpace
}

// drainRefusal decides whether server id may be marked draining (nil: it
// may). servers are the registered servers (the target among them when
// known); factor is the replication factor. The target's replicas can
// only move to servers that are up and not draining: a down server
// counted as room made a drain that could never finish, with no refusal
// (it only ever waited). The target's own liveness does not matter
// (draining a down server moves its replicas off it). Clearing the mark
// (undo) is never refused for capacity: it only gives room back. Pure.
func drainRefusal(id string, undo bool, servers map[string]serverView, factor int) error {
	if _, ok := servers[id]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownServer, id)
	}
	if undo {
		return nil
	}
	live, down, draining := 0, 0, 0
	for sid, sv := range servers {
		switch {
		case sid == id:
		case sv.draining:
			draining++
		case sv.up:
			live++
		default:
			down++
		}
	}
	if live >= factor {
		return nil
	}
	return fmt.Errorf("%w: draining %s leaves %d live servers for replication factor %d (other servers: %d down, %d draining); start the down servers or add one first",
		ErrDrainTooFew, id, live, factor, down, draining)
}

// DrainServer sets or clears a partition server's drain mark (replicated).
// The policies then move its replicas and leaderships away and placement
// skips it; `tablestore ctl drain` follows the progress in the partition
// map (the server's replica and leader counts) until it is empty. Setting
// the mark is refused (drainRefusal) while fewer than the replication
// factor of other servers are up and not draining.
func (v *service) DrainServer(_ context.Context, req *pb.DrainServerRequest) (*pb.DrainServerResponse, error) {
	s := v.s
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	id := req.GetServerId()
	if err := drainRefusal(id, req.GetUndo(), s.serverViews(time.Now()), s.cfg.ReplicationFactor); err != nil {
		return nil, toStatus(err)
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVER_DRAINING,
		&pb.SetServerDrainingCommand{ServerId: id, Draining: !req.GetUndo()}); err != nil {
		return nil, toStatus(err)
	}
	verb := "draining"
	if req.GetUndo() {
		verb = "no longer draining"
	}
	s.event(&pb.Event{Kind: pb.EventKind_EVENT_KIND_SERVER_DRAIN, Servers: []string{id}, Cause: causeOperator,
		Message: fmt.Sprintf("partition server %s is %s", id, verb)})
	m, _ := s.partitionMap()
	for _, sv := range m.GetServers() {
		if sv.GetServerId() == id {
			return &pb.DrainServerResponse{Server: sv}, nil
		}
	}
	return &pb.DrainServerResponse{}, nil
}

// serverViews is the operator refusals' view of every registered server
// as of now.
func (s *Server) serverViews(now time.Time) map[string]serverView {
	seen, spaces := s.reports.seen(), s.reports.spaces()
	out := map[string]serverView{}
	s.fsm.read(func(st *state) {
		for id, sv := range st.servers {
			out[id] = serverView{up: s.upAt(seen, id, now), draining: sv.GetDraining(), disk: spaces[id]}
		}
	})
	return out
}
