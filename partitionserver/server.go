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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"tablestore/internal/connpool"
	"tablestore/internal/durable"
	"tablestore/internal/masterclient"
	"tablestore/internal/peertls"
	"tablestore/internal/rangegroup"
	"tablestore/partitionserver/admission"
	"tablestore/partitionserver/disklatency"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/grouptransport"
	"tablestore/partitionserver/raftlog"
	pb "tablestore/proto/tablestorepb"
)

// raftRPCTimeout bounds one Raft RPC between servers (and a snapshot per
// 256 KiB), as NetworkTransport's Timeout did.
const raftRPCTimeout = 10 * time.Second

// grpcStreamWorkers is how many goroutines serve gRPC calls and stay for
// the next one. Without them gRPC starts a goroutine per call, and every
// call's handler (Write waiting for its commit, Get for its leadership
// round) grew a fresh stack: 8-9 % of a range leader's CPU under point
// reads went to runtime.newstack. A worker keeps its grown stack; calls
// beyond this many in flight still get their own goroutine.
const grpcStreamWorkers = 128

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
	// crashing: Crash is stopping the server (no graceful drain).
	crashing atomic.Bool
	// noHandOff: Close skips the leadership hand-off (SkipHandOff).
	noHandOff atomic.Bool
	// paused is the fault hook of SetPaused, nil when not paused.
	pauseMu sync.Mutex
	paused  *pauser
	// capacity admits leader work up to cfg.ServerCapacity (nil: off).
	capacity *admission.Bucket
	// disk refuses client writes while the data directory's free space
	// is under cfg.DiskReserve.
	disk *diskGuard
	// clock refuses client writes while the master's last answer said
	// this server's clock is off (clockguard.go).
	clock *clockGuard

	// mu guards slots and closed; each slot's own lock guards its
	// transitions (registry.go).
	mu    sync.RWMutex
	slots map[uint64]*slot
	// spanGroup maps each hosted range to the group (its slot's key) that
	// serves it.
	spanGroup map[uint64]uint64
	// rangeLocks serialise createReplica and deleteReplica of one range
	// id: a delete that fetched a slot, or found none, must not run its
	// by-id DeleteState and DropLog while a create of the same id stores
	// and opens a new replica (reliability.md 19, review fixes). One lock
	// per id, held only while used (not striped: a create holds its lock
	// through its member's first campaign, and CreateTable bursts must not
	// queue behind unrelated ranges).
	rangeLocksMu sync.Mutex
	rangeLocks   map[uint64]*rangeLock
	closed       bool
	started      atomic.Bool // Start succeeded; a failed Start released what it opened
	// startedAt is when Start opened the Raft transport: no vote is
	// admitted for a read lease after it (grouptransport's leases).
	startedAt time.Time
	health    healthState
	// report is the heartbeat loop's own state (heartbeat.go).
	report reportState
	// stateCommits and logSyncs time the state file's commits and the
	// Raft log's syncs for the heartbeat's slow-disk report (disk.go).
	stateCommits, logSyncs *disklatency.Window

	// joins: the Join placements waiting for a join floor
	// (joinassigned.go), one call each. removedAt: per range, the highest
	// generation a delete said removed this server (joinassigned.go).
	joins     joinTracker
	removedAt sync.Map
	// births: per range, a split this server's replica of the parent
	// never applied, that a snapshot carried it past, when missedsplit.go
	// judged that this server never hosted the new range (in memory: lost
	// on a restart, after which the range waits for its join floor).
	births sync.Map
	// detaching: per group, a detach of a dropped table's span (or a
	// wake for one) running in the background (droppedspan.go).
	detaching sync.Map

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New validates cfg and prepares a server; Start runs it.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, logger: logger, slots: make(map[uint64]*slot), spanGroup: make(map[uint64]uint64), addrs: newAddressBook(),
		stateCommits: disklatency.New(disklatency.DefaultSpan), logSyncs: disklatency.New(disklatency.DefaultSpan),
		capacity: admission.New(cfg.ServerCapacity, cfg.ServerCapacity*capacityBurst.Seconds(), cfg.ServerQueueWait, time.Now()),
		disk:     newDiskGuard(cfg.DataDir, cfg.DiskReserve, logger), clock: newClockGuard(logger, cfg.wallNow)}, nil
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
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
		// (An empty file is one an older build's crash left mid-write:
		// no id was ever used from it.)
		stored := strings.TrimSpace(string(b))
		if configured != "" && configured != stored {
			return "", fmt.Errorf("partitionserver: data dir belongs to server %q, not %q", stored, configured)
		}
		return stored, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
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
	return id, durable.WriteFile(path, []byte(id+"\n"), 0o644)
}

// Start opens the data directory, starts every stored replica, serves gRPC
// and begins heartbeating.
func (s *Server) Start() (err error) {
	if err := durable.MkdirAll(s.cfg.DataDir); err != nil {
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
	if err := s.openState(statePath); err != nil {
		return err
	}
	// The state file's entry (and the identity file's) in the data
	// directory: bbolt syncs the file, not the directory holding it.
	if err := durable.SyncDir(s.cfg.DataDir); err != nil {
		return fmt.Errorf("partitionserver: --data-dir %s: %w", s.cfg.DataDir, err)
	}
	if s.store.IndexRebuilt() {
		s.logger.Info("rebuilt the request records' time index: the state file had commits by a binary that does not keep it", "path", statePath)
	}
	commitSeconds, waitSeconds := stateCommitSeconds.WithLabelValues(s.id), stateApplyWaitSeconds.WithLabelValues(s.id)
	s.store.ObserveCommits(func(at time.Time, d time.Duration) {
		s.stateCommits.Observe(at, d)
		commitSeconds.Add(d.Seconds())
	})
	s.store.ObserveApplyWaits(func(d time.Duration) { waitSeconds.Add(d.Seconds()) })
	cleanup = append(cleanup, func() { s.store.Close() })
	if s.creds, err = s.cfg.TLS.Load(); err != nil {
		return err
	}
	if s.logs, err = raftlog.Open(filepath.Join(s.cfg.DataDir, raftLogDir), raftlog.Options{ObserveSync: s.logSyncs.Observe}); err != nil {
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
	s.startedAt = time.Now()
	s.raftNet = grouptransport.New(grouptransport.Config{Listener: s.creds.Listener(raftLn), Dial: dial,
		LocalAddr: advertise, Timeout: raftRPCTimeout, Logger: s.logger, Dormant: s,
		LeaseDuration: s.cfg.ReadLease, Started: s.startedAt})
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
	cleanup = append(cleanup, func() { s.closeAll(s.slotList(), shutdownReplicasWithin) })
	logged := make(map[uint64]bool)
	for _, id := range s.logs.Groups() {
		logged[id] = true
	}
	for _, st := range states {
		id := st.GetRange().GetRangeId()
		// The Raft state is the group's, named by its namesake, which may
		// be another range (or one merged away by an older master).
		g := rangegroup.GroupOf(st.GetRange())
		if splitLeftover(st, s.id, logged[g] || exists(replicaDir(s.cfg.DataDir, g))) {
			unlock := s.lockRange(id)
			err := s.deleteReplicaLocked(id, 0, 0)
			unlock()
			if err == nil {
				s.logger.Warn("split range lists no replica on this server: its state, left by a crash, deleted", "range", id)
				continue
			}
			// Then it opens, as before this rule: a member outside its
			// group's configuration, idle.
			s.logger.Warn("deleting a split range's state that lists no replica here failed", "range", id, "err", err)
		}
		// Quiet until used, unless it must run now; a replica that was to
		// bootstrap but crashed before its Raft state was written
		// bootstraps now.
		if err := s.found(st); err != nil {
			return fmt.Errorf("partitionserver: range %d in --data-dir %s: %w", st.GetRange().GetRangeId(), s.cfg.DataDir, err)
		}
		s.health.startup[st.GetRange().GetRangeId()] = true
	}

	s.grpcSrv = grpc.NewServer(append(connpool.ServerOptions(), grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20),
		grpc.NumStreamWorkers(grpcStreamWorkers), s.creds.ServerOption())...)
	pb.RegisterPartitionServiceServer(s.grpcSrv, &service{s: s})
	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		if s.cfg.QuiesceAfter > 0 {
			s.quiesceLoop()
		}
	}()
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
	s.publishStateFile()
	s.started.Store(true)
	s.logger.Info("partition server started", "grpc", s.GRPCAddr(), "raft", s.RaftAddr(), "replicas", len(s.slots))
	return nil
}

func (s *Server) deps() replicaDeps {
	return replicaDeps{serverID: s.id, cfg: &s.cfg, store: s.store, logs: s.logs, raftNet: s.raftNet, addrs: s.addrs, hooks: s, logger: s.logger, stamp: s.clock.stamp}
}

// Close stops serving and shuts every replica down; data stays on disk.
// It returns within about ShutdownTimeout whatever the groups are doing.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed || !s.started.Load() {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	start := time.Now()
	if !s.crashing.Load() && !s.noHandOff.Load() {
		// Before the members stop: each range led here elects its next
		// leader now, by a transfer, instead of an election timeout after
		// this server goes silent (a rolling restart cost every range it
		// led a write gap of 0.5 – 1 s).
		s.handOffLeaderships(min(2*time.Second, s.cfg.ShutdownTimeout/4))
	}
	s.cancel()
	// No Raft traffic from here on: a request delivered to a member while
	// the shared log closes under it would fail to save a newer term, and
	// hashicorp/raft panics then. Cutting the connections also ends RPCs
	// that members are stuck in on silent peers.
	s.raftNet.SetIsolated(true)
	if s.crashing.Load() {
		// A crash does not drain requests; its members close at once,
		// before their election timers can fire against the failed log.
		s.grpcSrv.Stop()
	} else {
		stopped := make(chan struct{})
		go func() { s.grpcSrv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(min(2*time.Second, s.cfg.ShutdownTimeout/4)):
			s.grpcSrv.Stop()
		}
	}
	s.closeAll(s.slotList(), max(s.cfg.ShutdownTimeout-time.Since(start), time.Second)/2)
	s.mu.Lock()
	s.slots = map[uint64]*slot{}
	s.spanGroup = map[uint64]uint64{}
	s.mu.Unlock()
	s.wg.Wait()
	// Closing the transport ends RPCs that members still open are stuck
	// in, so those finish closing now.
	s.raftNet.Close()
	s.master.Close()
	s.forgetGauges()
	err := s.logs.Close()
	if serr := s.store.Close(); err == nil {
		err = serr
	}
	s.logger.Info("partition server stopped", "took", time.Since(start))
	return err
}

// SkipHandOff makes Close stop without handing the leaderships off: every
// member of the groups stops at once (a whole dev cluster, a test
// harness), so a hand-off would only delay it.
func (s *Server) SkipHandOff() { s.noHandOff.Store(true) }

// handOffLeaderships transfers the leadership of every range this server
// leads to another voter (replica.handOff picks it), all at once,
// waiting at most within. A transfer still running then is cut by the
// shutdown, as before.
func (s *Server) handOffLeaderships(within time.Duration) {
	var wg sync.WaitGroup
	n := 0
	for _, sl := range s.slotList() {
		rep := sl.open()
		if rep == nil || !rep.isLeader() {
			continue
		}
		n++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rep.handOff(); err != nil {
				rep.logger.Debug("leadership not handed off before shutdown", "err", err)
			}
		}()
	}
	if n == 0 {
		return
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		s.logger.Info("leaderships handed off before shutdown", "ranges", n)
	case <-time.After(within):
		s.logger.Warn("leadership hand-offs still running at their deadline; shutting down", "ranges", n, "deadline", within)
	}
}

// shutdownReplicasWithin bounds closing the replicas of a failed start.
const shutdownReplicasWithin = 5 * time.Second

// raftLogDir is the shared Raft log of every range replica, under the
// data directory.
const raftLogDir = "raftlog"

// dropOrphanLogs deletes the logs of groups that serve no stored range (a
// crash between deleting a range and dropping its log). A log is its
// group's, which a range's record names: a group whose namesake was
// merged away (an older master's cross-group merge) still serves its
// other ranges under that id, and its log holds their terms, votes and
// entries.
//
// The directories (snapshots) of such groups go too: a group's id can name
// a group again later (a range attached to another group,
// docs/range-groups.md stage 8, and detached again starts a group of its
// own under its id), which would restore its old group's newest snapshot
// over its state (RestoreNewerSnapshot). The lifecycle's DropLog removes
// both; a crash part-way, or before an attached range's own group was
// stopped (RangeAttached), leaves them.
func (s *Server) dropOrphanLogs(states []*pb.RangeState) error {
	known := make(map[uint64]bool, len(states))
	for _, st := range states {
		known[rangegroup.GroupOf(st.GetRange())] = true
	}
	for _, id := range s.logs.Groups() {
		if !known[id] {
			if err := s.logs.Drop(id); err != nil {
				return err
			}
			s.logger.Info("dropped the raft log of a deleted range", "range", id)
		}
	}
	entries, err := os.ReadDir(filepath.Join(s.cfg.DataDir, "ranges"))
	if err != nil {
		// Absent, or unreadable: the replicas' opens then say why
		// (each reads its own directory), not this clean-up.
		return nil
	}
	for _, e := range entries {
		id, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil || !e.IsDir() || known[id] {
			continue
		}
		if err := durable.RemoveAll(replicaDir(s.cfg.DataDir, id)); err != nil {
			return err
		}
		s.logger.Info("removed the directory of a group no range names", "group", id)
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
	// Cut Raft traffic first: a member that took a newer term from a
	// peer after the log failed would find its term unsaveable, and
	// hashicorp/raft panics then; a dead process hears nothing.
	if s.raftNet != nil {
		s.raftNet.SetIsolated(true)
	}
	s.crashing.Store(true)
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

// SetSlowDisk makes every commit of the state file take d longer (0: no
// longer), as a slow disk would (fault injection for in-process clusters,
// where the failpoint would slow every server).
func (s *Server) SetSlowDisk(d time.Duration) { s.store.SetCommitDelay(d) }

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
