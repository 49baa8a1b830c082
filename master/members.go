package master

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/internal/metricsbridge"
	pb "tablestore/proto/tablestorepb"
)

// Errors of master membership changes.
var (
	// ErrUnknownMember: the id is not in the master group's configuration.
	ErrUnknownMember = errors.New("master: no such member")
	// ErrMemberExists: the id or address is already a member.
	ErrMemberExists = errors.New("master: member already exists")
	// ErrLastMember: removing it would leave the group without a voter.
	ErrLastMember = errors.New("master: cannot remove the last voter")
	// ErrBadMember: an empty id or address.
	ErrBadMember = errors.New("master: member needs an id and a raft address")
	// ErrQuorumLoss: the configuration the change makes would need
	// masters that are down (or, for an add, the new one) for its quorum.
	ErrQuorumLoss = errors.New("master: the change would leave the master group without a live quorum")
	// ErrMemberUnreachable: nothing answers at the new member's Raft
	// address.
	ErrMemberUnreachable = errors.New("master: no master answers at the new member's raft address")
)

// membershipTimeout bounds one configuration change.
const membershipTimeout = 10 * time.Second

// memberProbeTimeout bounds the connection AddMember opens to the new
// member first.
const memberProbeTimeout = 3 * time.Second

// Members returns the master group's current Raft configuration, as this
// master knows it. Its index is always 0: hashicorp/raft (v1.7.3)'s
// GetConfiguration does not fill it in.
func (s *Server) Members() (*pb.ListMembersResponse, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	_, leaderID := s.raft.LeaderWithID()
	resp := &pb.ListMembersResponse{Index: f.Index(), SelfId: s.cfg.ID,
		SelfMetricsAddr: metricsbridge.Advertised(s.cfg.MetricsAddr, s.cfg.RaftAddr),
		SelfPprofAddr:   metricsbridge.Advertised(s.cfg.PprofAddr, s.cfg.RaftAddr)}
	for _, sv := range f.Configuration().Servers {
		resp.Members = append(resp.Members, &pb.MasterMember{
			Id: string(sv.ID), RaftAddr: string(sv.Address),
			Voter: sv.Suffrage == raft.Voter, Leader: sv.ID == leaderID,
		})
	}
	sort.Slice(resp.Members, func(i, j int) bool { return resp.Members[i].Id < resp.Members[j].Id })
	return resp, nil
}

// AddMember adds a master as a voter. The new master must be running with
// --join (an empty Raft state that waits to be added): the leader then sends
// it a snapshot and the log, as to any lagging follower. Like etcd's
// `member add`, the group's quorum grows at once, so a lost master is
// removed first (the add is refused while the group with the new member
// would need it for its quorum: quorumRefusal), and members are added one
// at a time.
func (s *Server) AddMember(id, addr string) (*pb.ListMembersResponse, error) {
	if id == "" || addr == "" {
		return nil, ErrBadMember
	}
	if err := s.ready(); err != nil {
		return nil, err
	}
	s.membersMu.Lock()
	defer s.membersMu.Unlock()
	cur, err := s.Members()
	if err != nil {
		return nil, err
	}
	for _, m := range cur.GetMembers() {
		if m.GetId() == id && m.GetRaftAddr() == addr && m.GetVoter() {
			// Done already: ctl asks the next master again when the
			// leader lost the lead after the change went out, and the
			// change may have committed under the next one.
			return cur, nil
		}
		if m.GetId() == id || m.GetRaftAddr() == addr {
			return nil, fmt.Errorf("%w: %s at %s", ErrMemberExists, m.GetId(), m.GetRaftAddr())
		}
	}
	// The new voter counts as down: it has none of the log until the
	// leader's snapshot reaches it. Except beside a lone master: two
	// voters need both whatever is added, so counting it would forbid
	// ever growing a group of one (etcd's strict reconfiguration check
	// makes the same exception); the dial below still requires it to
	// answer, and the group waits for its catch-up, as it must. (Its
	// health is this rule's, not peerSilentSince's: it never answered yet.)
	voters := voterIDs(cur.GetMembers(), "")
	after := append(voters, id)
	newDown := len(voters) > 1
	down := func(m string, asked time.Time) bool {
		return (m == id && newDown) || (m != id && s.peerSilentSince(m, asked))
	}
	if err := s.refuseWithoutQuorum("adding "+id, after, down); err != nil {
		return nil, err
	}
	if err := s.probeMember(id, addr); err != nil {
		return nil, err
	}
	// No prevIndex: raft's GetConfiguration gives no index (Members'
	// index is always 0), so membersMu, not raft, keeps two changes from
	// both passing their checks against the same configuration.
	f := s.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, membershipTimeout)
	if err := membershipError(f.Error()); err != nil {
		return nil, err
	}
	s.logger.Info("master member added", "member", id, "raft", addr)
	s.event(&pb.Event{Kind: pb.EventKind_EVENT_KIND_MASTER_MEMBER, Cause: causeOperator,
		Message: fmt.Sprintf("master %s (%s) added to the master group", id, addr)})
	return s.Members()
}

// probeMember checks that a master to add answers at addr, on this
// version. Added, a master nothing answers at (a typo, one not started
// yet) would count in every quorum from then on without ever voting: a
// group of three healthy masters would stop at the next failure. Raft's
// own connection (TLS, the version hello and its answer) is the check.
func (s *Server) probeMember(id, addr string) error {
	conn, err := s.raftStream.Dial(raft.ServerAddress(addr), memberProbeTimeout)
	if err == nil {
		// Accepted by a master of this version: one of another version
		// closes without answering the hello.
		err = awaitHello(conn, memberProbeTimeout)
		conn.Close()
	}
	if err != nil {
		return fmt.Errorf("%w: %s at %s: %v; start it with --join first, on this build", ErrMemberUnreachable, id, addr, err)
	}
	return nil
}

// RemoveMember removes a master from the group. Removing the leader itself
// is allowed: it steps down once the change commits and another member
// leads.
func (s *Server) RemoveMember(id string) (*pb.ListMembersResponse, error) {
	if id == "" {
		return nil, ErrBadMember
	}
	if err := s.ready(); err != nil {
		return nil, err
	}
	s.membersMu.Lock()
	defer s.membersMu.Unlock()
	cur, err := s.Members()
	if err != nil {
		return nil, err
	}
	if err := memberRemovalRefusal(cur.GetMembers(), id); err != nil {
		return nil, err
	}
	if isVoter(cur.GetMembers(), id) {
		if err := s.refuseWithoutQuorum("removing "+id, voterIDs(cur.GetMembers(), id), s.peerSilentSince); err != nil {
			return nil, err
		}
	}
	s.event(&pb.Event{Kind: pb.EventKind_EVENT_KIND_MASTER_MEMBER, Cause: causeOperator,
		Message: fmt.Sprintf("master %s removed from the master group", id)})
	f := s.raft.RemoveServer(raft.ServerID(id), 0, membershipTimeout)
	if err := membershipError(f.Error()); err != nil {
		return nil, err
	}
	s.logger.Info("master member removed", "member", id)
	// Also when this master removed itself: its Raft runs on outside the
	// group (ShutdownOnRemove off) and holds the configuration it just
	// committed; the one read before the change still listed it.
	return s.Members()
}

// memberRemovalRefusal decides whether master id may leave the group of
// members (nil: it may): it must be a member, and the last voter may not
// go. A non-voter may always go (before, one was refused whenever a single
// voter remained: the count was the group's, not the target's). Pure.
func memberRemovalRefusal(members []*pb.MasterMember, id string) error {
	var target *pb.MasterMember
	voters := 0
	for _, m := range members {
		if m.GetVoter() {
			voters++
		}
		if m.GetId() == id {
			target = m
		}
	}
	if target == nil {
		return fmt.Errorf("%w: %q", ErrUnknownMember, id)
	}
	if target.GetVoter() && voters <= 1 {
		return ErrLastMember
	}
	return nil
}

// voterIDs returns the voters' ids but except's.
func voterIDs(members []*pb.MasterMember, except string) []string {
	var out []string
	for _, m := range members {
		if m.GetVoter() && m.GetId() != except {
			out = append(out, m.GetId())
		}
	}
	return out
}

func isVoter(members []*pb.MasterMember, id string) bool {
	for _, m := range members {
		if m.GetId() == id {
			return m.GetVoter()
		}
	}
	return false
}

func membershipError(err error) error {
	if err == nil {
		return nil
	}
	return notLeading(err)
}

// ListMembers answers from any master, not only the leader, so an operator
// can see the group from a member that lost it.
func (v *service) ListMembers(_ context.Context, _ *pb.ListMembersRequest) (*pb.ListMembersResponse, error) {
	resp, err := v.s.Members()
	return resp, toStatus(err)
}

// AddMember adds a master started with --join.
func (v *service) AddMember(_ context.Context, req *pb.AddMemberRequest) (*pb.ListMembersResponse, error) {
	resp, err := v.s.AddMember(req.GetId(), req.GetRaftAddr())
	return resp, toStatus(err)
}

// RemoveMember removes a master from the group.
func (v *service) RemoveMember(_ context.Context, req *pb.RemoveMemberRequest) (*pb.ListMembersResponse, error) {
	resp, err := v.s.RemoveMember(req.GetId())
	return resp, toStatus(err)
}
