package master

import (
	"github.com/hashicorp/raft"

	"tablestore/internal/health"
)

// healthFacts is what a master's readiness depends on, gathered from Raft.
type healthFacts struct {
	Started  bool
	Leader   string // the known leader's Raft address ("" if none)
	InConfig bool   // this master is a voter of the group's configuration
}

// readiness is the master's rule: ready when it serves as a voting member
// of a group that has a leader (so the control plane answers).
func readiness(f healthFacts) health.Verdict {
	var v health.Verdict
	if !f.Started {
		v.Notf("not started")
		return v
	}
	if !f.InConfig {
		v.Notf("not a voter in the master group's configuration")
	}
	if f.Leader == "" {
		v.Notf("master group has no known leader")
	}
	return v
}

// Ready reports whether this master is ready to serve (for /readyz).
func (s *Server) Ready() health.Verdict {
	f := healthFacts{Started: s.started.Load()}
	if !f.Started {
		return readiness(f)
	}
	addr, _ := s.raft.LeaderWithID()
	f.Leader = string(addr)
	if cf := s.raft.GetConfiguration(); cf.Error() == nil {
		for _, srv := range cf.Configuration().Servers {
			if srv.ID == raft.ServerID(s.cfg.ID) && srv.Suffrage == raft.Voter {
				f.InConfig = true
			}
		}
	}
	return readiness(f)
}
