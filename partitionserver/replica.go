package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/internal/durable"
	"tablestore/internal/failpoint"
	"tablestore/internal/logging"
	"tablestore/internal/raftsnap"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/grouptransport"
	"tablestore/partitionserver/raftlog"
	pb "tablestore/proto/tablestorepb"
)

// Errors of the replica layer.
var (
	ErrNotLeader      = errors.New("partitionserver: not the range leader")
	ErrUnknownOutcome = errors.New("partitionserver: write outcome unknown")
	ErrShuttingDown   = errors.New("partitionserver: shutting down")
	// ErrBusy: the write was refused before it was proposed (a leadership
	// transfer in progress, a full apply queue); it was not applied and
	// may be retried after a moment.
	ErrBusy = errors.New("partitionserver: range busy, write not applied")
)

// member is a Raft group's member on this server: the group serves one or
// more ranges, its spans (fsm.Group, docs/range-groups.md). Requests name
// a range, and reach it through a replica.
type member struct {
	// id is the group's (the range it is named after).
	id        uint64
	serverID  string
	logger    *slog.Logger
	group     *fsm.Group
	raft      *raft.Raft
	transport *grouptransport.Group
	logStore  *raftlog.Log
	// snaps is the member's snapshot store: the term of a last entry the
	// log no longer holds (lastTerm).
	snaps raft.SnapshotStore
	dir   string
	// snapTerm is the last (index, term) lastTerm found in a snapshot's
	// meta: a committed entry's term never changes, and a leader's reads
	// wait on the same last index until its next entry (lastTerm).
	snapTerm atomic.Pointer[[2]uint64]

	// readyTerm is the last term in which this member, leading, saw an
	// entry of its own term committed (termCommitted).
	readyTerm atomic.Uint64

	// gapFrom..gapTo is the last log span found to hold no state-machine
	// entries.
	gapMu          sync.Mutex
	gapFrom, gapTo uint64

	verify  *verifyCoalescer
	batcher writeBatcher
	// wallNow stamps write proposals: the clock guard's stamp (the
	// server's wall clock, held back from an unconfirmed step ahead), or
	// Config.wallNow for a replica opened without one (tests).
	wallNow func() time.Time
	// meters are the slot's: each range's request meters.
	meters *spanMeters
	// cfgMu serialises temporary changes of the group's reloadable config
	// (compaction).
	cfgMu sync.Mutex
	// membersMu serialises, on the leader, membership changes with the
	// checks of the configuration they rest on (ChangeReplicas' suffrage
	// checks, a split's or merge's check that only the descriptor's
	// voters are members): raft's own prevIndex cannot, as
	// GetConfiguration reports no index. A waiter gives up when its
	// request's context ends (lockMembers): a change queued behind one
	// that waits out an apply timeout must not outlive its caller.
	membersMu chan struct{}
	// watching: a failed leadership transfer is being watched.
	watching atomic.Bool
	// birthPending: compactBirthLog has yet to run; the range does not go
	// quiet before (a reopen would run it again, but never finish it if
	// the range kept going quiet first).
	birthPending atomic.Bool
	// snapshotFirst is the member's snapshot-first check (nil: none),
	// kept to rebuild its gate when its join floor is raised.
	snapshotFirst func(any) (any, error)
}

// replica is one range as served by a member: the span of the member's
// group a request names. Its id is the range's; the member's id (its
// group's) is r.member.id. A range that is its group's only span has the
// group's id.
type replica struct {
	*member
	id  uint64
	fsm *fsm.Range
	rangeMeters
}

// replica returns the member's replica of range id, ErrRangeNotHosted if
// its group does not serve it.
func (r *member) replica(id uint64) (*replica, error) {
	sp, ok := r.group.Span(id)
	if !ok {
		return nil, fmt.Errorf("%w: range %d is not a span of group %d", ErrRangeNotHosted, id, r.id)
	}
	return &replica{member: r, id: id, fsm: sp, rangeMeters: r.meters.get(id)}, nil
}

// descriptor is the descriptor of one of the group's spans: what they
// share (the replicas) is the group's.
func (r *member) descriptor() *pb.RangeDescriptor {
	spans := r.group.Spans()
	if len(spans) == 0 {
		return nil
	}
	return spans[0].Descriptor()
}

// frozen reports whether any span of the group is frozen (or merged
// away): the group's membership waits for it.
func (r *member) frozen() bool {
	for _, sp := range r.group.Spans() {
		if sp.Frozen() {
			return true
		}
	}
	return false
}

// span is the range id a command for r names in its group's log: 0 for
// the span the group is named after, so that a range that is its group's
// only span proposes the entries it always did (an older server applies
// them).
func (r *replica) span() uint64 {
	if r.id == r.member.id {
		return 0
	}
	return r.id
}

// setFloor puts floor f (the one recorded, raiseFloor's answer) in force on
// the running member's gate; the caller holds the slot's lock.
func (r *member) setFloor(f joinFloor) {
	r.transport.SetGate(memberGate(f, r.snapshotFirst))
}

type replicaDeps struct {
	serverID string
	cfg      *Config
	store    *fsm.Store
	logs     *raftlog.Store
	raftNet  *grouptransport.Transport
	addrs    raft.ServerAddressProvider
	hooks    fsm.Hooks
	logger   *slog.Logger
	// stamp is the time write proposals carry (clockGuard.stamp); nil:
	// the configured wall clock.
	stamp func() time.Time
}

func replicaDir(dataDir string, id uint64) string {
	return filepath.Join(dataDir, "ranges", fmt.Sprintf("%d", id))
}

// openReplica starts the Raft group member of a range whose state is in the
// store (sl's state machine). bootstrap, with voters, starts a new group. A
// member that must lead at once is made to campaign by the registry
// (Group.Campaign), with these same timeouts. floor, when set, is the join
// floor a move gave the replica (joinfloor.go): recorded in the group's
// stable keys before raft starts, and in force from the first message.
func openReplica(d replicaDeps, sl *slot, bootstrap bool, voters []raft.Server, floor joinFloor) (*member, error) {
	id := sl.id
	logger := d.logger.With("range", id)
	rfsm := sl.group
	rfsm.SetHooks(d.hooks)
	dir := replicaDir(d.cfg.DataDir, id)
	if err := durable.MkdirAll(dir); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(filepath.Join(dir, "snapshots"))
	// The range's Raft log and stable keys are its group in the server's
	// shared log.
	logStore := d.logs.Log(id)
	if err := importLegacyLog(filepath.Join(dir, legacyLogFile), logStore, logger); err != nil {
		return nil, fmt.Errorf("partitionserver: range %d: %w", id, err)
	}
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, logging.HCLog(logger, "snapshot"))
	if err != nil {
		return nil, fmt.Errorf("partitionserver: range %d snapshots: %w", id, err)
	}
	snaps, err := raftsnap.Wrap(dir, fileSnaps, logger)
	if err != nil {
		return nil, fmt.Errorf("partitionserver: range %d snapshots: %w", id, err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		// raft syncs a snapshot's own directory, not the entry of the
		// snapshots directory it just created here.
		if err := durable.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("partitionserver: range %d snapshots: %w", id, err)
		}
	}
	// A leader's snapshot stored but not restored into the file (a crash
	// between the two): raft, not restoring on start, would take it as
	// applied and never replay the entries before it.
	if restored, err := rfsm.RestoreNewerSnapshot(snaps, dir); err != nil {
		return nil, fmt.Errorf("partitionserver: range %d: %w", id, err)
	} else if restored {
		logger.Warn("state file was behind the range's newest snapshot (installed before a crash); restored it", "applied", rfsm.AppliedIndex())
	}
	// The floor and the snapshot-first rule are decided before the group
	// is registered with the transport, and its gate is installed with
	// it: no raft message reaches the member ungated.
	given := floor
	floor, err = raiseFloor(logStore, floor)
	if err != nil {
		return nil, fmt.Errorf("partitionserver: range %d join floor: %w", id, err)
	}
	first, err := snapshotFirst(sl.generation(), rfsm.AppliedIndex(), bootstrap, logStore, snaps)
	if err != nil {
		return nil, fmt.Errorf("partitionserver: range %d: %w", id, err)
	}
	// The group's view of the server's shared Raft connections.
	transport, err := d.raftNet.GroupWithGate(id, d.addrs, memberGate(floor, first))
	if err != nil {
		return nil, err
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(d.serverID)
	rc.Logger = logging.HCLog(logger, "raft")
	rc.HeartbeatTimeout = d.cfg.RaftHeartbeatTimeout
	rc.ElectionTimeout = d.cfg.RaftElectionTimeout
	rc.LeaderLeaseTimeout = d.cfg.RaftLeaderLease
	rc.CommitTimeout = d.cfg.RaftCommitTimeout
	rc.MaxAppendEntries = d.cfg.RaftMaxAppendEntries
	rc.BatchApplyCh = true
	rc.SnapshotThreshold = d.cfg.SnapshotThreshold
	rc.SnapshotInterval = d.cfg.SnapshotInterval
	rc.TrailingLogs = d.cfg.TrailingLogs
	// The bbolt file already holds everything up to its applied index.
	rc.NoSnapshotRestoreOnStart = true

	if bootstrap {
		has, err := raft.HasExistingState(logStore, logStore, snaps)
		if err != nil {
			transport.Close()
			return nil, err
		}
		if !has {
			if err := raft.BootstrapCluster(rc, logStore, logStore, snaps, transport, raft.Configuration{Servers: voters}); err != nil {
				transport.Close()
				return nil, fmt.Errorf("partitionserver: bootstrap range %d: %w", id, err)
			}
			// After the bootstrap: a crash in between leaves the replica
			// unmarked, which only refuses what the mark would allow.
			if err := markBornHere(logStore); err != nil {
				transport.Close()
				return nil, fmt.Errorf("partitionserver: range %d: %w", id, err)
			}
		}
	}
	if first != nil {
		logger.Info("empty member of a split-born range: log entries refused until a snapshot arrives")
	}
	// Info once, when a move creates the member; its reopens keep the
	// recorded floor quietly.
	if given.set() {
		logger.Info("re-created member: votes for logs behind the join floor and leaders of older terms refused", "floor_term", floor.term, "floor_index", floor.index)
	} else if floor.set() {
		logger.Debug("member reopened with its join floor", "floor_term", floor.term, "floor_index", floor.index)
	}
	// The leader reads back every entry it just wrote to replicate it; the
	// cache answers those reads from memory.
	cached, err := raft.NewLogCache(1024, logStore)
	if err != nil {
		transport.Close()
		return nil, err
	}
	r, err := raft.NewRaft(rc, rfsm, cached, logStore, snaps, boundedTimeoutNow{transport, 2 * rc.ElectionTimeout})
	if err != nil {
		transport.Close()
		return nil, fmt.Errorf("partitionserver: start range %d: %w", id, err)
	}
	// Read-lease promises only from a follower (grouptransport's leases).
	transport.SetFollowing(func(term uint64) bool { return r.State() == raft.Follower && r.CurrentTerm() == term })
	rep := &member{
		id: id, serverID: d.serverID, logger: logger, group: rfsm, raft: r,
		transport: transport, logStore: logStore, snaps: snaps, dir: dir,
		meters:        sl.meters,
		snapshotFirst: first, membersMu: make(chan struct{}, 1),
		wallNow: d.stamp,
	}
	if rep.wallNow == nil {
		rep.wallNow = d.cfg.wallNow
	}
	// A follower stuck on a stale log tail is caught up by a snapshot
	// past it (see Group.SetStuckFollower).
	transport.SetStuckFollower(snapshotPastFollower(r, &rep.cfgMu, logger))
	// The transport's check, not raft's alone: raft counts answers to
	// heartbeats sent before the round began (Group.VerifyLeader).
	rep.verify = newVerifyCoalescer(func() error { return transport.VerifyLeader(r, rc.LocalID) }, verifySpacing)
	if sl.generation() > 1 {
		rep.birthPending.Store(true)
		go rep.compactBirthLog()
	}
	return rep, nil
}

// compactBirthLog drops the log of a range that still holds its bootstrap
// entry once this member has applied past it. A range born from a split
// holds data its log never carried, so a member that joins it empty (one
// that was down across the split and caught the parent up by a snapshot)
// must get a snapshot, never that log: with the log starting after index 1
// on every member, any future leader sends one.
func (r *member) compactBirthLog() {
	defer r.birthPending.Store(false)
	// Not in the first seconds: a split's new leader is just settling,
	// and a snapshot's I/O must not cost it its term. A member that needs
	// the snapshot comes much later (after its parent's own log was
	// compacted past the split).
	time.Sleep(birthCompactionDelay)
	deadline := time.Now().Add(2 * time.Minute)
	for r.raft.AppliedIndex() < 2 {
		if time.Now().After(deadline) || r.raft.State() == raft.Shutdown {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Retried until done: a member that joined empty refuses this log
	// (snapshotFirst) and gets nothing else from a leader that keeps it
	// (chaos seed 5001: one try failed on "leadership transfer in
	// progress" as the master moved the new range's leadership, and the
	// joiner on ps4 stayed without a leader for the rest of the run).
	for wait := birthCompactionRetry; ; wait = min(2*wait, 30*time.Second) {
		if first, err := r.logStore.FirstIndex(); err != nil || first != 1 || r.raft.State() == raft.Shutdown {
			return
		}
		err := failpoint.Inject("partitionserver/birth-compaction")
		if err == nil {
			// The last entry stays: the log then still starts after
			// index 1 (a joiner gets the snapshot: the entry before the
			// kept one is gone), but is not empty. An empty log made
			// hashicorp's shouldSnapshot (log's last index minus the
			// snapshot's) underflow, so every member snapshotted the
			// whole range at every SnapshotInterval until its next
			// entry: 717 KB every 5 - 10 s on each of range 10's members
			// in chaos seed 246, for as long as it was read and not
			// written.
			err = snapshotKeeping(r.raft, &r.cfgMu, 1)
		}
		if errors.Is(err, raft.ErrRaftShutdown) {
			return
		}
		if err != nil {
			r.logger.Warn("compacting a split-born range's log failed; retrying", "err", err, "retry_in", wait)
		} else if first, ferr := r.logStore.FirstIndex(); ferr == nil && first != 1 {
			return
		} else {
			// Not done while the log starts at 1: after a snapshot raft
			// took by itself during a wait, "nothing new" to snapshot
			// compacts nothing until an entry comes. The range may go
			// quiet meanwhile (its marker is such an entry, and the next
			// open compacts again); a member joins only through a
			// configuration entry, after which the next try compacts.
			r.birthPending.Store(false)
		}
		time.Sleep(wait)
	}
}

// birthCompactionRetry is the first wait before a failed birth compaction
// is tried again (doubling up to 30 s).
const birthCompactionRetry = 500 * time.Millisecond

// birthCompactionDelay is how long a split-born member waits before
// dropping its bootstrap log.
const birthCompactionDelay = 3 * time.Second

// snapshotAll snapshots the state machine and drops the whole log.
func (r *member) snapshotAll() error { return snapshotAll(r.raft, &r.cfgMu) }

// snapshotAll snapshots r's state machine and drops its whole log; mu
// serialises changes of r's reloadable config.
func snapshotAll(r *raft.Raft, mu *sync.Mutex) error { return snapshotKeeping(r, mu, 0) }

// snapshotKeeping snapshots r's state machine and drops its log up to the
// snapshot but for its last keep entries.
func snapshotKeeping(r *raft.Raft, mu *sync.Mutex, keep uint64) error {
	mu.Lock()
	defer mu.Unlock()
	// Only TrailingLogs changes; the timeouts in force stay as they are.
	cur := r.ReloadableConfig()
	zero := cur
	zero.TrailingLogs = keep
	if err := r.ReloadConfig(zero); err != nil {
		return err
	}
	defer r.ReloadConfig(cur)
	if err := r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return err
	}
	return nil
}

// propose appends a command to the range's log and waits for its result.
func (r *member) propose(ctx context.Context, data []byte, timeout time.Duration) (*fsm.Result, error) {
	if !r.isLeader() {
		return nil, ErrNotLeader
	}
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < timeout {
			timeout = d
		}
	}
	f := r.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader):
			return nil, ErrNotLeader
		case errors.Is(err, raft.ErrRaftShutdown):
			return nil, ErrShuttingDown
		case errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrEnqueueTimeout):
			return nil, fmt.Errorf("%w: %v", ErrBusy, err)
		default:
			// Leadership lost or timed out after dispatch: the entry may
			// still commit.
			return nil, fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
		}
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok || res == nil {
		return nil, fmt.Errorf("%w: no apply result", ErrUnknownOutcome)
	}
	return res, nil
}

// compact snapshots the range and drops its log but for its last entry,
// so a voter added next receives the data as a snapshot: the log starts
// past index 1, and an empty member is sent the snapshot (nothing in the
// log reaches back to its index 1). A range created by a split holds data
// its log never carried; replaying that log would give a new voter an
// empty range. The last entry is kept as by the birth compaction
// (compactBirthLog): an empty log has every member snapshot the whole
// range at every SnapshotInterval until its next entry (hashicorp's
// shouldSnapshot underflows on it), which a move that fails after its
// compaction left behind.
func (r *member) compact() error {
	if err := r.raft.Barrier(10 * time.Second).Error(); err != nil {
		return err
	}
	return snapshotKeeping(r.raft, &r.cfgMu, 1)
}

// close stops the Raft member; its log stays in the shared store.
// close stops the member. Its group transport closes first: raft's
// Shutdown waits for all its goroutines, and a replication or vote
// goroutine blocked in an RPC to a paused or silent peer returns only when
// the RPC times out (10 s) or its group closes. Closed, the group fails
// those RPCs at once (its requests in flight end with ErrClosed, new ones
// are not sent), and requests arriving for it take the quiet path, which
// waits for this close (the slot's lock) before it answers.
// TestQuiesceBesidePausedFollower: 10 s before, under a second after (2.4 s
// since the leader waits markerWait for the paused follower to acknowledge
// the QUIESCE marker's commit).
func (r *member) close() error {
	r.transport.Close()
	return r.raft.Shutdown().Error()
}

func (r *member) isLeader() bool { return r.raft.State() == raft.Leader }

func (r *member) leaderID() string {
	_, id := r.raft.LeaderWithID()
	return string(id)
}

// write proposes a write, alone or coalesced with concurrent ones
// (writebatch.go), and waits for it to be applied.
func (r *replica) write(ctx context.Context, ops []*pb.EntityOp, requestID []byte, timeout time.Duration) (*fsm.Result, error) {
	if !r.isLeader() {
		return nil, ErrNotLeader
	}
	cmd := &pb.WriteCommand{ProposedUnixNano: r.proposalTime(), Ops: ops, RequestId: requestID, RangeId: r.span()}
	return r.batcher.write(ctx, r.member, cmd, timeout)
}

// writeMany proposes several client writes of the group's ranges together
// (one entry when they fit, see writeBatcher.writeMany), reqs[i] to the
// range reps[i]; each keeps its own request id, result and error.
func (r *member) writeMany(ctx context.Context, reps []*replica, reqs []*pb.WriteRequest, timeout time.Duration) ([]*fsm.Result, []error) {
	errs := make([]error, len(reqs))
	if !r.isLeader() {
		for i := range errs {
			errs[i] = ErrNotLeader
		}
		return make([]*fsm.Result, len(reqs)), errs
	}
	now := r.proposalTime()
	cmds := make([]*pb.WriteCommand, len(reqs))
	for i, req := range reqs {
		cmds[i] = &pb.WriteCommand{ProposedUnixNano: now, Ops: req.GetOps(), RequestId: req.GetRequestId(), RangeId: reps[i].span()}
	}
	return r.batcher.writeMany(ctx, r, cmds, timeout)
}

// proposalTime is a write proposal's time: the server's wall clock
// (wallclock.go), which the range's log clock follows forward.
func (r *member) proposalTime() int64 {
	if r.wallNow == nil { // a replica built by a test
		return time.Now().UnixNano()
	}
	return r.wallNow().UnixNano()
}

// proposeWrite proposes one write as its own entry.
func (r *member) proposeWrite(ctx context.Context, cmd *pb.WriteCommand, timeout time.Duration) (*fsm.Result, error) {
	data, err := fsm.EncodeWrite(cmd)
	if err != nil {
		return nil, err
	}
	return r.propose(ctx, data, timeout)
}

// linearizable waits until a read on this replica sees every write committed
// before the call: it is the leader, has committed in its term, confirms its
// leadership with a quorum, and has applied up to the commit index it saw.
func (r *member) linearizable(ctx context.Context) error {
	idx, err := r.readIndex(ctx)
	if err != nil {
		return err
	}
	return r.waitApplied(ctx, idx)
}

// joinFloor returns a committed log position every later leader holds:
// this leader's term and commit index, once an entry of its term is
// committed (so the entry at the index is of that term), the commit index
// has reached the last index this leader had appended when asked, and a
// quorum has confirmed the leadership after the index was read (a deposed
// leader, one a stale configuration elected, cannot). The term is read
// again after the confirmation: a term change in between fails the call.
//
// The wait for the last index: the replica being re-created may have
// acknowledged entries whose acknowledgement the leader has not processed
// yet; they commit, counting that acknowledgement, after a commit index
// read at once, and the floor would lie below writes a client saw
// acknowledged. Every entry the lost replica holds was appended here
// first, so once the commit index passes the last index read after the
// call began, the floor covers them.
func (r *member) joinFloor(ctx context.Context) (joinFloor, error) {
	if !r.isLeader() {
		return joinFloor{}, ErrNotLeader
	}
	if err := r.termCommitted(ctx); err != nil {
		return joinFloor{}, err
	}
	term := r.raft.CurrentTerm()
	if r.readyTerm.Load() != term {
		// A new term since termCommitted: the commit index may precede
		// its first entry.
		return joinFloor{}, ErrNotLeader
	}
	if err := r.commitReaches(ctx, term, r.raft.LastIndex()); err != nil {
		return joinFloor{}, err
	}
	idx := r.raft.CommitIndex()
	if err := r.transport.VerifyLeader(r.raft, raft.ServerID(r.serverID)); err != nil {
		return joinFloor{}, ErrNotLeader
	}
	if r.raft.CurrentTerm() != term || !r.isLeader() {
		return joinFloor{}, ErrNotLeader
	}
	return joinFloor{term: term, index: idx}, nil
}

// commitReaches waits, bounded by ctx and by commitWait, until this
// leader's commit index is at or past last while it still leads in term.
// The own bound: a leader that keeps its lease but cannot commit (a
// follower's disk stalled, its heartbeats still answered) would otherwise
// hold the move that asked until the move's own deadline.
func (r *member) commitReaches(ctx context.Context, term, last uint64) error {
	ctx, cancel := context.WithTimeout(ctx, commitWait)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for r.raft.CommitIndex() < last {
		if r.raft.CurrentTerm() != term || !r.isLeader() {
			return ErrNotLeader
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	if r.raft.CurrentTerm() != term {
		return ErrNotLeader
	}
	return nil
}

// commitWait bounds commitReaches, as termCommitted's own 5 s bounds it.
const commitWait = 5 * time.Second

// termCommitted returns once this leader has committed an entry of its
// current term, so its commit index covers everything earlier leaders
// committed. Raft appends a no-op when a member takes the lead; waiting for
// that entry's commit rather than proposing a barrier of our own (what
// termbarrier does) saves a woken range's first read one more append and
// its fsyncs on a quorum. The read's leadership check (VerifyLeader) still
// follows: the no-op's acknowledgements may predate the read.
func (r *member) termCommitted(ctx context.Context) error {
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	var target, targetTerm uint64
	for {
		term := r.raft.CurrentTerm()
		if r.readyTerm.Load() == term {
			return nil
		}
		if !r.isLeader() {
			return ErrNotLeader
		}
		if targetTerm != term {
			// Only this term's leader appends entries of this term, and
			// its commit index reaches none before the first of its term
			// committed. The target is fixed once found: under a stream
			// of writes the last index keeps moving ahead of the commit.
			last := r.raft.LastIndex()
			if t, ok := r.lastTerm(last); ok && t == term {
				target, targetTerm = last, term
			}
		}
		if targetTerm == term && r.raft.CommitIndex() >= target && r.raft.CurrentTerm() == term {
			r.readyTerm.Store(term)
			return nil
		}
		select {
		case <-ctx.Done():
			// The caller's deadline, not a lost leadership: answered as
			// a timeout, not a redirect.
			return ctx.Err()
		case <-deadline.C:
			return ErrNotLeader
		case <-time.After(200 * time.Microsecond):
		}
	}
}

// lastTerm is the term of entry index, the member's last: from the log,
// or, when a snapshot compacted the whole log (a move's compact, a stuck
// follower's snapshot: TrailingLogs 0; a split-born range's birth
// compaction did too before it kept its last entry), from the snapshot
// that ends at it. Without the second, a leader whose log was emptied
// after its last write never found an entry of its term and refused every
// linearizable read (chaos seed 246). ok is false when neither tells.
func (r *member) lastTerm(index uint64) (term uint64, ok bool) {
	var l raft.Log
	err := r.logStore.GetLog(index, &l)
	if err == nil || !errors.Is(err, raft.ErrLogNotFound) || r.snaps == nil {
		return entryTerm(index, l.Term, err, nil)
	}
	// Remembered: every waiting read asks again each 200 µs, and List
	// scans the snapshot directory and decodes each meta.json.
	if st := r.snapTerm.Load(); st != nil && st[0] == index {
		return st[1], true
	}
	metas, lerr := r.snaps.List()
	if lerr != nil {
		return 0, false
	}
	term, ok = entryTerm(index, 0, err, metas)
	if ok {
		r.snapTerm.Store(&[2]uint64{index, term})
	}
	return term, ok
}

// entryTerm decides the term of entry index from the log's answer (its
// term, or logErr) and the stored snapshots: an entry the log does not
// hold is known only as the last entry of a snapshot, whose meta records
// its term. Pure.
func entryTerm(index, logTerm uint64, logErr error, snaps []*raft.SnapshotMeta) (uint64, bool) {
	if logErr == nil {
		return logTerm, true
	}
	if !errors.Is(logErr, raft.ErrLogNotFound) {
		return 0, false
	}
	for _, m := range snaps {
		if m.Index == index {
			return m.Term, true
		}
	}
	return 0, false
}

// waitApplied waits until the state machine reflects every entry up to
// target. Barrier and no-op entries never reach the state machine, so when
// raft has dispatched target but the state machine's index is lower, the
// entries in between are read from the log: if none is for the state
// machine, it is up to date.
func (r *member) waitApplied(ctx context.Context, target uint64) error {
	for {
		fa := r.group.AppliedIndex()
		if fa >= target {
			return nil
		}
		if r.raft.AppliedIndex() >= target && !r.fsmEntriesBetween(fa+1, target) {
			return nil
		}
		// The entries may be applied but waiting for their group commit.
		r.group.Urge()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
		_ = r.group.WaitApplied(wctx, fa+1)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// fsmEntriesBetween reports whether any log entry in [from, to] is one the
// state machine applies (a command or a configuration).
func (r *member) fsmEntriesBetween(from, to uint64) bool {
	// Reads in a quiet range ask about the same gap (the barrier after the
	// last write) again and again; remember the last answer.
	r.gapMu.Lock()
	if r.gapFrom == from && to <= r.gapTo {
		r.gapMu.Unlock()
		return false
	}
	r.gapMu.Unlock()
	var l raft.Log
	for i := from; i <= to; i++ {
		if err := r.logStore.GetLog(i, &l); err != nil {
			// Compacted away: it was applied before the snapshot that
			// compacted it.
			continue
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return true
		}
	}
	r.gapMu.Lock()
	r.gapFrom, r.gapTo = from, to
	r.gapMu.Unlock()
	return false
}

// verifyCoalescer shares one VerifyLeader round among all reads that arrive
// while no round has started yet.
type verifyCoalescer struct {
	round   func() error // one leadership round (grouptransport.Group.VerifyLeader)
	spacing time.Duration
	mu      sync.Mutex
	waiting []chan error
	running bool
	arrived chan struct{} // a read queued (capacity 1)
	// Used by loop alone (one runs at a time: running hands over under mu).
	last   time.Time    // start of the last round
	lastN  int          // reads the last round served
	spaced atomic.Int32 // rounds that waited for reads to join (for tests)
}

func newVerifyCoalescer(round func() error, spacing time.Duration) *verifyCoalescer {
	return &verifyCoalescer{round: round, spacing: spacing, arrived: make(chan struct{}, 1)}
}

func (v *verifyCoalescer) verify(ctx context.Context) error {
	ch := make(chan error, 1)
	v.mu.Lock()
	v.waiting = append(v.waiting, ch)
	if !v.running {
		v.running = true
		go v.loop()
	}
	v.mu.Unlock()
	select {
	case v.arrived <- struct{}{}:
	default:
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (v *verifyCoalescer) queued() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.waiting)
}

// verifySpacing bounds how long a round waits for reads to join it. Each
// round costs both followers a heartbeat through the transport and the
// leader their answers, about 18 % of dev's CPU at 4,000 reads/s with
// 0.66 - 0.92 rounds per read. When the last round served several reads, the
// next one waits, at most until verifySpacing after the last one's start,
// until as many reads are queued as that round served: readers that come
// back together (a closed loop of clients) then share one round each time
// instead of one starting a round alone and the others queueing behind it.
// Reads that queued while the last round ran (they come faster than rounds
// finish) wait for at least one more. A read after a round that served only
// itself, with none queued meanwhile, starts its round at once, so a lone
// reader's latency is unchanged.
const verifySpacing = 2 * time.Millisecond

func (v *verifyCoalescer) loop() {
	// continued: reads queued while the last round ran, so they come
	// faster than rounds finish.
	continued := false
	for {
		v.mu.Lock()
		n := len(v.waiting)
		if n == 0 {
			v.running = false
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		want := v.lastN
		if continued {
			want = max(want, 2)
		}
		if n < want {
			v.awaitReads(want)
		}
		v.mu.Lock()
		batch := v.waiting
		v.waiting = nil
		v.mu.Unlock()
		v.last, v.lastN = time.Now(), len(batch)
		// Every waiter in batch enqueued before this round started.
		err := v.round()
		for _, ch := range batch {
			ch <- err
		}
		continued = true
	}
}

// awaitReads waits until want reads are queued, or until verifySpacing after
// the last round's start.
func (v *verifyCoalescer) awaitReads(want int) {
	d := v.spacing - time.Since(v.last)
	if d <= 0 {
		return
	}
	v.spaced.Add(1)
	t := time.NewTimer(d)
	defer t.Stop()
	for v.queued() < want {
		select {
		case <-v.arrived:
		case <-t.C:
			return
		}
	}
}

// loadMeter counts operations for the load report.
type loadMeter struct {
	reads, writes, entities atomic.Uint64
	mu                      sync.Mutex
	lastAt                  time.Time
	lastR, lastW, lastE     uint64
}

// active reports whether anything was counted since the last rates().
func (m *loadMeter) active() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads.Load() != m.lastR || m.writes.Load() != m.lastW || m.entities.Load() != m.lastE
}

func (m *loadMeter) rates() (r, w, e float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	cr, cw, ce := m.reads.Load(), m.writes.Load(), m.entities.Load()
	if !m.lastAt.IsZero() {
		d := now.Sub(m.lastAt).Seconds()
		if d > 0 {
			r, w, e = float64(cr-m.lastR)/d, float64(cw-m.lastW)/d, float64(ce-m.lastE)/d
		}
	}
	m.lastAt, m.lastR, m.lastW, m.lastE = now, cr, cw, ce
	return r, w, e
}

// lockMembers takes membersMu, or gives up with ErrBusy (nothing done)
// when ctx ends first.
func (r *member) lockMembers(ctx context.Context) error {
	select {
	case r.membersMu <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: another membership change of the range is in progress: %v", ErrBusy, ctx.Err())
	}
}

// unlockMembers releases membersMu.
func (r *member) unlockMembers() { <-r.membersMu }
