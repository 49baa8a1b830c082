package master

import (
	"context"
	"errors"
	"fmt"

	pb "tablestore/proto/tablestorepb"
)

// ErrDrainTooFew: draining the server would leave fewer servers to hold
// replicas than the replication factor, so its replicas could not move.
var ErrDrainTooFew = errors.New("master: too few servers left to drain onto")

// DrainServer sets or clears a partition server's drain mark (replicated).
// The policies then move its replicas and leaderships away and placement
// skips it; `tablestore ctl drain` follows the progress in the partition
// map (the server's replica and leader counts) until it is empty.
func (v *service) DrainServer(_ context.Context, req *pb.DrainServerRequest) (*pb.DrainServerResponse, error) {
	s := v.s
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	id := req.GetServerId()
	var known bool
	var others int
	s.fsm.read(func(st *state) {
		for sid, sv := range st.servers {
			if sid == id {
				known = true
			} else if !sv.GetDraining() {
				others++
			}
		}
	})
	if !known {
		return nil, toStatus(fmt.Errorf("%w: %q", ErrUnknownServer, id))
	}
	if !req.GetUndo() && others < s.cfg.ReplicationFactor {
		return nil, toStatus(fmt.Errorf("%w: draining %s leaves %d servers for replication factor %d; add a server first",
			ErrDrainTooFew, id, others, s.cfg.ReplicationFactor))
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
