package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/connpool"
	"tablestore/internal/logging"
	"tablestore/internal/termbarrier"
	pb "tablestore/proto/tablestorepb"
)

// Errors of the master service.
var (
	ErrNotLeader        = errors.New("master: not the leader")
	ErrNotEnoughServers = errors.New("master: not enough live partition servers")
)

// Server is a running master.
type Server struct {
	cfg    Config
	logger *slog.Logger

	raft      *raft.Raft
	transport *raft.NetworkTransport
	logStore  *raftboltdb.BoltStore
	fsm       *fsm
	grpcLn    net.Listener
	grpcSrv   *grpc.Server
	pool      *connpool.Pool

	leaderGate termbarrier.Gate

	// Soft state, rebuilt from heartbeats by whichever master leads.
	softMu   sync.Mutex
	lastSeen map[string]time.Time
	leaders  map[uint64]string
	loads    map[uint64]*pb.RangeLoad
	history  map[uint64]*loadHistory
	frozen   map[uint64]bool
	busy     map[uint64]bool
	inflight int
	adopting bool
	// lastBalance is when the policies last started a balancing move.
	lastBalance time.Time
	version     uint64
	changed     chan struct{} // closed and replaced on every map change
	// progress: every replica's last reported applied index.
	progress *progress

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New validates cfg and prepares a master; Start runs it.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, logger: logger.With("master", cfg.ID), pool: connpool.New(),
		lastSeen: map[string]time.Time{}, leaders: map[uint64]string{}, loads: map[uint64]*pb.RangeLoad{},
		history: map[uint64]*loadHistory{}, frozen: map[uint64]bool{}, busy: map[uint64]bool{},
		changed: make(chan struct{}), progress: newProgress(),
	}
	s.fsm = &fsm{st: newState(), onChange: s.bump}
	return s, nil
}

// GRPCAddr is the address of the master service.
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// RaftAddr is the address of the master's Raft listener.
func (s *Server) RaftAddr() string { return string(s.transport.LocalAddr()) }

// Start opens the Raft group (bootstrapping it on first start) and serves.
func (s *Server) Start() (err error) {
	if err := os.MkdirAll(s.cfg.DataDir, 0o755); err != nil {
		return err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.logStore, err = raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(s.cfg.DataDir, "raft.db"),
		BoltOptions: &bolt.Options{Timeout: 5 * time.Second},
	})
	if err != nil {
		return fmt.Errorf("master: raft log: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(s.cfg.DataDir, 2, logging.HCLog(s.logger, "snapshot"))
	if err != nil {
		s.logStore.Close()
		return err
	}
	addr, err := net.ResolveTCPAddr("tcp", s.cfg.RaftAddr)
	if err != nil {
		s.logStore.Close()
		return err
	}
	s.transport, err = raft.NewTCPTransportWithLogger(s.cfg.RaftAddr, addr, 3, 10*time.Second, logging.HCLog(s.logger, "raft-net"))
	if err != nil {
		s.logStore.Close()
		return fmt.Errorf("master: raft listen: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(s.cfg.ID)
	rc.Logger = logging.HCLog(s.logger, "raft")
	rc.HeartbeatTimeout = s.cfg.RaftHeartbeatTimeout
	rc.ElectionTimeout = s.cfg.RaftElectionTimeout
	rc.LeaderLeaseTimeout = s.cfg.RaftLeaderLease
	rc.SnapshotThreshold = 1024

	has, err := raft.HasExistingState(s.logStore, s.logStore, snaps)
	if err != nil {
		return err
	}
	if !has {
		peers := s.cfg.Peers
		if len(peers) == 0 {
			peers = map[string]string{s.cfg.ID: string(s.transport.LocalAddr())}
		}
		var servers []raft.Server
		for id, a := range peers {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(a)})
		}
		sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
		if err := raft.BootstrapCluster(rc, s.logStore, s.logStore, snaps, s.transport, raft.Configuration{Servers: servers}); err != nil {
			return fmt.Errorf("master: bootstrap: %w", err)
		}
	}
	if s.raft, err = raft.NewRaft(rc, s.fsm, s.logStore, s.logStore, snaps, s.transport); err != nil {
		return fmt.Errorf("master: start raft: %w", err)
	}
	if s.grpcLn, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		s.raft.Shutdown()
		return fmt.Errorf("master: grpc listen: %w", err)
	}
	s.grpcSrv = grpc.NewServer()
	pb.RegisterMasterServiceServer(s.grpcSrv, &service{s: s})
	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		s.policyLoop()
	}()
	go func() {
		defer s.wg.Done()
		if err := s.grpcSrv.Serve(s.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.logger.Error("grpc serve failed", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.livenessLoop()
	}()
	s.logger.Info("master started", "grpc", s.GRPCAddr(), "raft", s.RaftAddr())
	return nil
}

// Close stops the master; its Raft state stays on disk.
func (s *Server) Close() error {
	s.cancel()
	stopped := make(chan struct{})
	go func() { s.grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		s.grpcSrv.Stop()
	}
	s.wg.Wait()
	err := s.raft.Shutdown().Error()
	s.transport.Close()
	s.logStore.Close()
	s.pool.Close()
	return err
}

// IsLeader reports whether this master leads the group.
func (s *Server) IsLeader() bool { return s.raft.State() == raft.Leader }

// ready makes sure this leader's state machine holds every committed command
// (a barrier once per term) before it answers from that state.
func (s *Server) ready() error {
	if !s.IsLeader() {
		return ErrNotLeader
	}
	fresh, err := s.leaderGate.Ensure(s.raft, 5*time.Second)
	if err != nil {
		return ErrNotLeader
	}
	if !fresh {
		return nil
	}
	// A new leader learns liveness afresh; give servers a full timeout.
	s.softMu.Lock()
	now := time.Now()
	s.fsm.read(func(st *state) {
		for id := range st.servers {
			if _, ok := s.lastSeen[id]; !ok {
				s.lastSeen[id] = now
			}
		}
	})
	s.softMu.Unlock()
	return nil
}

func (s *Server) apply(kind pb.MasterCommandKind, m proto.Message) (*applyResult, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	data, err := encodeCommand(kind, m)
	if err != nil {
		return nil, err
	}
	f := s.raft.Apply(data, 10*time.Second)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return nil, ErrNotLeader
		}
		return nil, err
	}
	res, _ := f.Response().(*applyResult)
	if res == nil {
		return nil, fmt.Errorf("master: no apply result")
	}
	return res, res.err
}

// bump records a change of the partition map and wakes watchers.
func (s *Server) bump() {
	s.softMu.Lock()
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
	s.softMu.Unlock()
}

// partitionMap builds the current map and the channel closed on its next
// change.
func (s *Server) partitionMap() (*pb.PartitionMap, <-chan struct{}) {
	m := &pb.PartitionMap{Leaders: map[uint64]string{}, Loads: map[uint64]*pb.RangeLoad{}}
	s.softMu.Lock()
	m.Version = s.version
	ch := s.changed
	for id, l := range s.leaders {
		m.Leaders[id] = l
	}
	for id, l := range s.loads {
		m.Loads[id] = l
	}
	now := time.Now()
	seen := make(map[string]time.Time, len(s.lastSeen))
	for id, t := range s.lastSeen {
		seen[id] = t
	}
	s.softMu.Unlock()
	s.fsm.read(func(st *state) {
		snap := st.snapshot()
		m.Tables, m.Ranges = snap.GetTables(), snap.GetRanges()
		m.ServiceProperties = snap.GetServiceProperties()
		for _, sv := range snap.GetServers() {
			c := proto.Clone(sv).(*pb.ServerInfo)
			if t, ok := seen[sv.GetServerId()]; ok {
				c.LastHeartbeatUnixNano = t.UnixNano()
				c.Alive = now.Sub(t) < s.cfg.ServerTimeout
			}
			m.Servers = append(m.Servers, c)
		}
	})
	known := make(map[uint64]bool, len(m.Ranges))
	for _, r := range m.Ranges {
		known[r.GetRangeId()] = true
	}
	for id := range m.Leaders {
		if !known[id] {
			delete(m.Leaders, id)
		}
	}
	for id := range m.Loads {
		if !known[id] {
			delete(m.Loads, id)
		}
	}
	return m, ch
}

// livenessLoop bumps the map version when a server's liveness flips so that
// watchers see it.
func (s *Server) livenessLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	alive := map[string]bool{}
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if !s.IsLeader() {
			continue
		}
		changed := false
		now := time.Now()
		var events []*pb.Event
		s.softMu.Lock()
		for id, at := range s.lastSeen {
			a := now.Sub(at) < s.cfg.ServerTimeout
			if prev, ok := alive[id]; !ok || prev != a {
				if ok {
					changed = true
					kind := pb.EventKind_EVENT_KIND_SERVER_DOWN
					if a {
						kind = pb.EventKind_EVENT_KIND_SERVER_UP
					}
					e := &pb.Event{Kind: kind, Servers: []string{id}, Cause: causePolicy,
						Figures: map[string]float64{"silent_seconds": now.Sub(at).Seconds()},
						Message: fmt.Sprintf("partition server %s is %s", id, map[bool]string{true: "up", false: "down"}[a])}
					events = append(events, e)
				}
				alive[id] = a
			}
		}
		s.softMu.Unlock()
		s.fsm.read(func(st *state) { rangesGauge.Set(float64(len(st.ranges))) })
		for _, e := range events {
			s.event(e)
		}
		if changed {
			s.bump()
		}
	}
}

// LiveServers counts the partition servers heard from within the server
// timeout.
func (s *Server) LiveServers() int {
	s.softMu.Lock()
	defer s.softMu.Unlock()
	n := 0
	for _, t := range s.lastSeen {
		if time.Since(t) < s.cfg.ServerTimeout {
			n++
		}
	}
	return n
}

// PartitionMap returns the current map; only the leader knows leaders and
// liveness.
func (s *Server) PartitionMap() *pb.PartitionMap {
	m, _ := s.partitionMap()
	return m
}
