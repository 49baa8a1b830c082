package partitionserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"tablestore/internal/masterclient"
	"tablestore/internal/peertls"
	"tablestore/partitionserver/admission"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/grouptransport"
	"tablestore/partitionserver/raftlog"
	pb "tablestore/proto/tablestorepb"
)

// raftRPCTimeout bounds one Raft RPC between servers (and a snapshot per
// 256 KiB), as NetworkTransport's Timeout did.
const raftRPCTimeout = 10 * time.Second

// Server is a running partition server.
type Server struct {
	cfg    Config
	logger *slog.Logger
	id     string

	store   *fsm.Store
	logs    *raftlog.Store
	raftNet *grouptransport.Transport
	grpcLn  net.Listener
	grpcSrv *grpc.Server
	master  *masterclient.Client
	addrs   *addressBook
	creds   *peertls.Creds // nil: plaintext
	// paused is the fault hook of SetPaused, nil when not paused.
	pauseMu sync.Mutex
	// lifeMu serializes creating and deleting replicas: a delete goes on
	// after it takes the replica out of the map (closing it, dropping its
	// state, log group and files), and a create of the same range
	// meanwhile would lose them.
	lifeMu sync.Mutex
	paused  *pauser
	// capacity admits leader work up to cfg.ServerCapacity (nil: off).
	capacity *admission.Bucket

	mu       sync.RWMutex
	replicas map[uint64]*replica
	closed   bool
	started  atomic.Bool // Start succeeded; a failed Start released what it opened
	health   healthState

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New validates cfg and prepares a server; Start runs it.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, logger: logger, replicas: make(map[uint64]*replica), addrs: newAddressBook(),
		capacity: admission.New(cfg.ServerCapacity, cfg.ServerCapacity*capacityBurst.Seconds(), cfg.ServerQueueWait, time.Now())}, nil
}

// ID is the server id (valid after Start).
func (s *Server) ID() string { return s.id }

// GRPCAddr is the address the gRPC service is reachable at.
func (s *Server) GRPCAddr() string {
	if s.cfg.AdvertiseGRPC != "" {
		return s.cfg.AdvertiseGRPC
	}
	return s.grpcLn.Addr().String()
}

// RaftAddr is the address the Raft listener is reachable at.
func (s *Server) RaftAddr() string {
	if s.cfg.AdvertiseRaft != "" {
		return s.cfg.AdvertiseRaft
	}
	return s.raftNet.Addr().String()
}

func loadOrCreateID(dir, configured string) (string, error) {
	path := filepath.Join(dir, "server-id")
	if b, err := os.ReadFile(path); err == nil {
		stored := strings.TrimSpace(string(b))
		if configured != "" && configured != stored {
			return "", fmt.Errorf("partitionserver: data dir belongs to server %q, not %q", stored, configured)
		}
		return stored, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	id := configured
	if id == "" {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		id = "ps-" + hex.EncodeToString(b[:])
	}
	return id, os.WriteFile(path, []byte(id+"\n"), 0o644)
}

// Start opens the data directory, starts every stored replica, serves gRPC
// and begins heartbeating.
func (s *Server) Start() (err error) {
	if err := os.MkdirAll(s.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("partitionserver: --data-dir %s: %w", s.cfg.DataDir, err)
	}
	if s.id, err = loadOrCreateID(s.cfg.DataDir, s.cfg.ID); err != nil {
		return fmt.Errorf("partitionserver: --data-dir %s: %w", s.cfg.DataDir, err)
	}
	s.logger = s.logger.With("server", s.id)
	s.health.startup = map[uint64]bool{}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	cleanup := []func(){}
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	statePath := filepath.Join(s.cfg.DataDir, "state.db")
	if s.store, err = fsm.Open(statePath); err != nil {
		return fmt.Errorf("partitionserver: state file %s: %w", statePath, err)
	}
	cleanup = append(cleanup, func() { s.store.Close() })
	if s.creds, err = s.cfg.TLS.Load(); err != nil {
		return err
	}
	if s.logs, err = raftlog.Open(filepath.Join(s.cfg.DataDir, raftLogDir), raftlog.Options{}); err != nil {
		return fmt.Errorf("partitionserver: raft log in --data-dir %s: %w", s.cfg.DataDir, err)
	}
	cleanup = append(cleanup, func() { s.logs.Close() })
	raftLn, err := net.Listen("tcp", s.cfg.RaftAddr)
	if err != nil {
		return fmt.Errorf("partitionserver: --raft-addr %s: %w", s.cfg.RaftAddr, err)
	}
	advertise := s.cfg.AdvertiseRaft
	if advertise == "" {
		advertise = raftLn.Addr().String()
	}
	// With --tls-*, every Raft connection between servers is mutual TLS.
	var dial grouptransport.DialFunc
	if s.creds != nil {
		dial = s.creds.DialContext
	}
	s.raftNet = grouptransport.New(grouptransport.Config{Listener: s.creds.Listener(raftLn), Dial: dial,
		LocalAddr: advertise, Timeout: raftRPCTimeout, Logger: s.logger})
	cleanup = append(cleanup, func() { s.raftNet.Close() })
	if s.grpcLn, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("partitionserver: --grpc-addr %s: %w", s.cfg.GRPCAddr, err)
	}
	cleanup = append(cleanup, func() { s.grpcLn.Close() })
	if s.master, err = masterclient.New(s.cfg.Masters, s.creds.DialOption()); err != nil {
		return fmt.Errorf("partitionserver: --masters: %w", err)
	}
	cleanup = append(cleanup, func() { s.master.Close() })
	s.addrs.set(s.id, s.RaftAddr())

	states, err := s.store.RangeStates()
	if err != nil {
		return fmt.Errorf("partitionserver: state file %s: %w", statePath, err)
	}
	if err := s.dropOrphanLogs(states); err != nil {
		return fmt.Errorf("partitionserver: raft log in --data-dir %s: %w", s.cfg.DataDir, err)
	}
	cleanup = append(cleanup, func() {
		for _, r := range s.replicas {
			r.close()
		}
	})
	for _, st := range states {
		d := st.GetRange()
		// A replica that was to bootstrap but crashed before its Raft
		// state was written bootstraps now; with state, bootstrap is a no-op.
		rep, err := openReplica(s.deps(), d.GetRangeId(), st.GetBootstrap(), s.voters(d), false)
		if err != nil {
			return fmt.Errorf("partitionserver: range %d in --data-dir %s: %w", d.GetRangeId(), s.cfg.DataDir, err)
		}
		s.replicas[d.GetRangeId()] = rep
		s.health.startup[d.GetRangeId()] = true
	}

	s.grpcSrv = grpc.NewServer(grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20), s.creds.ServerOption())
	pb.RegisterPartitionServiceServer(s.grpcSrv, &service{s: s})
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.grpcSrv.Serve(s.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.logger.Error("grpc serve failed", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.heartbeatLoop()
	}()
	s.started.Store(true)
	s.logger.Info("partition server started", "grpc", s.GRPCAddr(), "raft", s.RaftAddr(), "replicas", len(s.replicas))
	return nil
}

func (s *Server) deps() replicaDeps {
	return replicaDeps{serverID: s.id, cfg: &s.cfg, store: s.store, logs: s.logs, raftNet: s.raftNet, addrs: s.addrs, hooks: s, logger: s.logger}
}

// Close stops serving and shuts every replica down; data stays on disk.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed || !s.started.Load() {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	reps := s.replicas
	s.replicas = map[uint64]*replica{}
	s.mu.Unlock()
	s.cancel()
	stopped := make(chan struct{})
	go func() { s.grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		s.grpcSrv.Stop()
	}
	var wg sync.WaitGroup
	for _, r := range reps {
		wg.Add(1)
		go func(r *replica) { defer wg.Done(); r.close() }(r)
	}
	wg.Wait()
	s.wg.Wait()
	s.raftNet.Close()
	s.master.Close()
	s.forgetGauges()
	err := s.logs.Close()
	if serr := s.store.Close(); err == nil {
		err = serr
	}
	return err
}

// raftLogDir is the shared Raft log of every range replica, under the
// data directory.
const raftLogDir = "raftlog"

// dropOrphanLogs deletes the logs of groups whose range state is gone (a
// crash between deleting a range and dropping its log).
func (s *Server) dropOrphanLogs(states []*pb.RangeState) error {
	known := make(map[uint64]bool, len(states))
	for _, st := range states {
		known[st.GetRange().GetRangeId()] = true
	}
	for _, id := range s.logs.Groups() {
		if !known[id] {
			if err := s.logs.Drop(id); err != nil {
				return err
			}
			s.logger.Info("dropped the raft log of a deleted range", "range", id)
		}
	}
	return nil
}

// Service returns the server's gRPC service implementation, for callers in
// the same process (see connpool.RegisterLocal).
func (s *Server) Service() pb.PartitionServiceServer { return &service{s: s} }

// Crash stops the server as a kill -9 or power loss would leave its disk
// (fault injection): Raft writes not yet durable fail and never land, then
// the server shuts down.
func (s *Server) Crash() error {
	if s.logs != nil {
		s.logs.Fail()
	}
	return s.Close()
}

// SetIsolated cuts (true) or restores (false) this server's Raft traffic,
// as a network partition would (fault injection).
func (s *Server) SetIsolated(v bool) { s.raftNet.SetIsolated(v) }

// SetRaftFault installs (nil removes) a hook that may drop or delay this
// server's Raft traffic per peer (chaos tests).
func (s *Server) SetRaftFault(f grouptransport.Fault) { s.raftNet.SetFault(f) }

// SetPaused stalls (true) or resumes (false) this server's Raft traffic
// with its connections left open, as a stopped process would (fault
// injection).
func (s *Server) SetPaused(v bool) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	switch {
	case v && s.paused == nil:
		p := &pauser{resume: make(chan struct{}), closing: s.ctx.Done()}
		s.paused = p
		s.raftNet.SetFault(p)
	case !v && s.paused != nil:
		s.raftNet.SetFault(nil)
		close(s.paused.resume)
		s.paused = nil
	}
}

// pauser is the fault hook of a paused server: every Raft request in or
// out waits until the pause ends (or the server closes), connections open.
type pauser struct {
	resume  chan struct{}
	closing <-chan struct{}
}

func (p *pauser) Outgoing(string) (time.Duration, bool) {
	select {
	case <-p.resume:
		return 0, false
	case <-p.closing:
		return 0, true
	}
}

func (s *Server) replica(id uint64) (*replica, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.replicas[id]
	return r, ok
}

// createReplica stores the range and starts its Raft member; it is a no-op
// when the replica already runs here.
func (s *Server) createReplica(desc *pb.RangeDescriptor, bootstrap, campaign bool, raftAddrs map[string]string) error {
	for id, a := range raftAddrs {
		s.addrs.set(id, a)
	}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrShuttingDown
	}
	if _, ok := s.replicas[desc.GetRangeId()]; ok {
		return nil
	}
	if err := s.store.CreateRange(desc, bootstrap); err != nil && !errors.Is(err, fsm.ErrRangeExists) {
		return err
	}
	rep, err := openReplica(s.deps(), desc.GetRangeId(), bootstrap, s.voters(desc), bootstrap && campaign)
	if err != nil {
		return err
	}
	s.replicas[desc.GetRangeId()] = rep
	s.logger.Info("replica created", "range", desc.GetRangeId(), "table", desc.GetTable(), "bootstrap", bootstrap)
	return nil
}

// voters is the initial Raft configuration of a range: its replicas, with
// the addresses known now (the address provider resolves ids later; an
// unknown address is a placeholder, never dialed while the provider knows).
func (s *Server) voters(d *pb.RangeDescriptor) []raft.Server {
	var out []raft.Server
	for _, r := range d.GetReplicas() {
		addr, ok := s.addrs.get(r.GetServerId())
		if !ok {
			addr = r.GetServerId()
		}
		out = append(out, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(r.GetServerId()), Address: raft.ServerAddress(addr)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// RangeCreated starts the Raft group of a split's right-hand range. Every
// replica of the left range applies the split and bootstraps the same
// voters; the preferred leader (else the left range's leader) campaigns at
// once.
//
// It runs inside the state store's commit (an after-commit hook), which a
// caller holding s.mu can trigger (createReplica's CreateRange commits the
// pending batch), so it must not take s.mu itself: everything happens in
// the goroutine.
func (s *Server) RangeCreated(parent uint64, desc *pb.RangeDescriptor, preferredLeader string) {
	go func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return
		}
		fast := preferredLeader == s.id
		if p, ok := s.replicas[parent]; preferredLeader == "" && ok && p.isLeader() {
			fast = true
		}
		if _, ok := s.replicas[desc.GetRangeId()]; ok {
			return
		}
		rep, err := openReplica(s.deps(), desc.GetRangeId(), true, s.voters(desc), fast)
		if err != nil {
			s.logger.Error("starting split range failed", "range", desc.GetRangeId(), "err", err)
			return
		}
		s.replicas[desc.GetRangeId()] = rep
		s.logger.Info("split range started", "range", desc.GetRangeId(), "parent", parent, "start", desc.GetStart(), "end", desc.GetEnd())
	}()
}

// RangeMerged stops the group of a range its left neighbour took over here
// (the merge already deleted its state) and removes its Raft files.
func (s *Server) RangeMerged(into, right uint64) {
	go func() {
		s.mu.Lock()
		rep, ok := s.replicas[right]
		delete(s.replicas, right)
		closed := s.closed
		s.mu.Unlock()
		if ok {
			rep.close()
		}
		if closed {
			return
		}
		if err := s.logs.Drop(right); err != nil {
			s.logger.Warn("dropping a merged range's raft log failed", "range", right, "err", err)
		}
		if err := os.RemoveAll(replicaDir(s.cfg.DataDir, right)); err != nil {
			s.logger.Warn("removing a merged range's files failed", "range", right, "err", err)
		}
		s.logger.Info("range merged into its left neighbour here", "range", right, "into", into)
	}()
}

// deleteReplica stops a replica and removes its data, its group of the
// shared Raft log and its snapshots. A
// frozen replica whose left neighbour here has yet to apply the merge stays
// (fsm.ErrMergePending): the merge takes it over.
func (s *Server) deleteReplica(id uint64) error { return s.deleteReplicaBefore(id, 0) }

// ErrLateDelete refuses to delete a replica created after the delete was
// decided.
var ErrLateDelete = errors.New("partitionserver: replica re-created since the delete was decided")

// deleteReplicaBefore is deleteReplica of a replica whose generation is
// below before (0: any), ErrLateDelete otherwise: a replica created since
// the delete was decided (a later move added this server back) is a voter.
func (s *Server) deleteReplicaBefore(id, before uint64) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if before > 0 {
		if gen, ok := s.replicaGeneration(id); ok && gen >= before {
			return fmt.Errorf("%w: range %d is at generation %d, the delete was for below %d", ErrLateDelete, id, gen, before)
		}
	}
	if err := s.store.CheckDelete(id); err != nil {
		return err
	}
	s.mu.Lock()
	rep, ok := s.replicas[id]
	delete(s.replicas, id)
	s.mu.Unlock()
	if ok {
		rep.close()
	}
	if err := s.store.DeleteRange(id); err != nil {
		return err
	}
	if err := s.logs.Drop(id); err != nil {
		return err
	}
	if err := os.RemoveAll(replicaDir(s.cfg.DataDir, id)); err != nil {
		return err
	}
	if ok {
		s.logger.Info("replica deleted", "range", id)
	}
	return nil
}

// addressBook maps server ids to Raft addresses for every group's transport.
type addressBook struct {
	mu sync.RWMutex
	m  map[string]string
}

func newAddressBook() *addressBook { return &addressBook{m: map[string]string{}} }

func (b *addressBook) set(id, addr string) {
	if id == "" || addr == "" {
		return
	}
	b.mu.Lock()
	b.m[id] = addr
	b.mu.Unlock()
}

func (b *addressBook) get(id string) (string, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	a, ok := b.m[id]
	return a, ok
}

// ServerAddr implements raft.ServerAddressProvider.
func (b *addressBook) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if a, ok := b.get(string(id)); ok {
		return raft.ServerAddress(a), nil
	}
	return "", fmt.Errorf("partitionserver: no address for server %s", id)
}
