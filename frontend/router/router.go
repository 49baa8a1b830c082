package router

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/connpool"
	"tablestore/internal/failpoint"
	"tablestore/internal/masterclient"
	"tablestore/internal/peertls"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// Config configures the router.
type Config struct {
	// Masters lists the master gRPC addresses.
	Masters []string
	// RetryTimeout bounds the transparent retries of one request.
	RetryTimeout time.Duration
	// AttemptTimeout bounds one attempt of a request on a server before
	// the next replica is tried (a paused or partitioned leader answers
	// nothing); a write of n entities gets n/50 of it more, a query page
	// its work budget more.
	AttemptTimeout time.Duration
	// TLS is mutual TLS for the calls to masters and partition servers.
	TLS peertls.Config
	// StartTimeout bounds how long a starting front-end waits for a
	// master to hand it the partition map; 0 waits until one does (the
	// front-end alive and not ready meanwhile, instead of exiting into a
	// restart loop while the masters are down).
	StartTimeout time.Duration
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Masters: []string{"127.0.0.1:7000"}, RetryTimeout: 10 * time.Second, AttemptTimeout: 500 * time.Millisecond, StartTimeout: 30 * time.Second}
}

// Validate reports invalid settings.
func (c *Config) Validate() error {
	if len(c.Masters) == 0 {
		return errors.New("router: --masters names no master address")
	}
	if c.RetryTimeout <= 0 || c.AttemptTimeout <= 0 {
		return errors.New("router: --retry-timeout and --attempt-timeout must be positive")
	}
	if c.StartTimeout < 0 {
		return errors.New("router: --start-timeout must not be negative (0: wait for a master)")
	}
	return c.TLS.Validate()
}

// Router routes requests to partition servers.
type Router struct {
	cfg    Config
	logger *slog.Logger
	master *masterclient.Client
	pool   *connpool.Pool
	writes *writeCoalescer
	reads  *readCoalescer
	// sync holds the ranges' confirmed read indexes for the secondary's
	// sync time (syncindex.go).
	sync syncCache

	mu                sync.RWMutex
	version           uint64
	epoch             uint64                           // the master process that numbered version
	index             uint64                           // the Raft index of the whole map and the watch's deltas (0: unknown)
	tables            map[string]*pb.Table             // lower-case name
	sorted            []*pb.Table                      // the tables by name (ordinal), for listing
	ranges            map[uint64][]*pb.RangeDescriptor // table id -> ranges by start
	rangeTable        map[uint64]uint64                // range id -> table id
	servers           map[string]*pb.ServerInfo
	leaders           map[uint64]string // range id -> server id
	hinted            map[uint64]string // leader learned from a partition server
	serviceProperties []byte
	// accountProperties are the other accounts' service properties, by
	// account; perAccountProps says the master keeps them apart (an older
	// master keeps serviceProperties only, for every account).
	accountProperties map[string][]byte
	perAccountProps   bool
	watch             watchState
	accounts          []*pb.StorageAccount

	// refreshing is closed when the shared map read in flight
	// (refreshShared) ends; nil when none is.
	refreshMu  sync.Mutex
	refreshing chan struct{}

	// watchSilence is how long a watch stream whose master sends
	// keepalives may stay silent before it counts as lost
	// (defaultWatchSilence; tests shorten it).
	watchSilence time.Duration
	// keepalives: some master has sent this front-end a keepalive, so a
	// silent stream is a lost one from its start.
	keepalives atomic.Bool
	// ident is who this front-end is, told on each watch (identity.go).
	ident identity

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// defaultWatchSilence is five of the masters' keepalive intervals (1 s):
// a loaded master may miss one or two, a lost link misses them all.
const defaultWatchSilence = 5 * time.Second

// New returns a router; Start begins watching the map.
func New(cfg Config, logger *slog.Logger) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	creds, err := cfg.TLS.Load()
	if err != nil {
		return nil, err
	}
	mc, err := masterclient.New(cfg.Masters, creds.DialOption())
	if err != nil {
		return nil, err
	}
	r := &Router{
		cfg: cfg, logger: logger, master: mc, pool: connpool.New(creds.DialOption()), writes: newCoalescer(), reads: newReadCoalescer(),
		tables: map[string]*pb.Table{}, ranges: map[uint64][]*pb.RangeDescriptor{}, rangeTable: map[uint64]uint64{},
		servers: map[string]*pb.ServerInfo{}, leaders: map[uint64]string{}, hinted: map[uint64]string{},
		watchSilence: defaultWatchSilence, ident: identity{id: newFrontendID()},
	}
	r.writes.logger = logger
	r.reads.logger = logger
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.watch.lostAt.Store(time.Now().UnixNano())
	return r, nil
}

// RegisterLocal routes calls for a partition server at addr in this process
// directly to it (see connpool.RegisterLocal).
func (r *Router) RegisterLocal(addr string, srv pb.PartitionServiceServer) {
	r.pool.RegisterLocal(addr, srv)
}

// UnregisterLocal undoes RegisterLocal.
func (r *Router) UnregisterLocal(addr string) { r.pool.UnregisterLocal(addr) }

// Start fetches the map (waiting up to ctx for a master) and keeps it fresh.
func (r *Router) Start(ctx context.Context) error {
	if r.cfg.StartTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.StartTimeout)
		defer cancel()
	}
	if err := r.refresh(ctx); err != nil {
		return fmt.Errorf("router: no partition map from --masters %s within --start-timeout %v: %w",
			strings.Join(r.cfg.Masters, ","), r.cfg.StartTimeout, err)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.watchLoop()
	}()
	return nil
}

// Close stops the watch and closes connections.
func (r *Router) Close() {
	r.cancel()
	// A shared map read starting now has added itself to wg (under
	// refreshMu, after checking ctx) or will not start.
	r.refreshMu.Lock()
	r.refreshMu.Unlock()
	r.wg.Wait()
	r.master.Close()
	r.pool.Close()
}

func (r *Router) watchLoop() {
	backoff := 50 * time.Millisecond
	for r.ctx.Err() == nil {
		conn, i := r.master.Conn()
		sctx, cancel := context.WithCancel(r.ctx)
		stream, err := pb.NewMasterServiceClient(conn).WatchPartitionMap(sctx, &pb.WatchPartitionMapRequest{Deltas: true, Frontend: r.ident.open(cancel)})
		resync := false
		// silence ends the stream after watchSilence without a message,
		// armed once a master proved it sends keepalives (an older
		// master is silent while nothing changes): from the stream's
		// start once any stream of this front-end has seen one (a
		// stream on a link that drops packets delivers not even the
		// whole map), else from the stream's first keepalive; disarmed
		// by a whole map that does not announce keepalives (an older
		// master's, in a rolling upgrade).
		var silence *time.Timer
		if err == nil && r.keepalives.Load() {
			silence = time.AfterFunc(r.watchSilence, cancel)
		}
		last := time.Time{} // the stream's last message
		if err == nil {
			for {
				m, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				last = time.Now()
				switch {
				case !m.GetDelta() && !m.GetKeepalives():
					if silence != nil {
						silence.Stop()
						silence = nil
					}
				case silence != nil:
					silence.Reset(r.watchSilence)
				case m.GetKeepalive() || m.GetKeepalives():
					r.keepalives.Store(true)
					silence = time.AfterFunc(r.watchSilence, cancel)
				}
				if ferr := failpoint.Inject("router/watch/before-apply"); ferr != nil {
					// A watch that breaks here starts over; a delay is a
					// slow one (a loaded machine, a stream behind).
					err = ferr
					break
				}
				if m.GetDelta() {
					if !r.applyStreamDelta(m) {
						// The map came from another master since: start
						// over from a whole map of this stream's.
						resync = true
						break
					}
				} else {
					r.installStream(m)
				}
				r.watch.watching.Store(true)
				backoff = 50 * time.Millisecond
			}
		}
		cancel()
		if silence != nil {
			silence.Stop()
		}
		if r.ident.close() && r.ctx.Err() == nil {
			// Ended to tell the master a new identity: not a lost watch.
			resync = true
		}
		if resync {
			continue
		}
		if r.watch.watching.Swap(false) {
			// Stale since the last message, not since the silence
			// was noticed (MapStaleFor bounds stored policies).
			if last.IsZero() {
				last = time.Now()
			}
			r.watch.lostAt.Store(last.UnixNano())
		}
		if r.ctx.Err() != nil {
			return
		}
		r.master.Advance(i)
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// masterCall is r.master.Call with its failure to reach a master leader
// before ctx ended (masterclient.ErrNoMaster, a plain error, which the
// front-end would answer 500 InternalError and log as its own failure)
// given ctx's status: DeadlineExceeded or Canceled, 500 OperationTimedOut
// as --request-timeout promises (and a client that went away is logged
// at debug).
func (r *Router) masterCall(ctx context.Context, fn func(ctx context.Context, mc pb.MasterServiceClient) error) error {
	err := r.master.Call(ctx, fn)
	if errors.Is(err, masterclient.ErrNoMaster) {
		code := codes.Unavailable
		if ctx.Err() != nil {
			code = status.FromContextError(ctx.Err()).Code()
		}
		return status.Error(code, err.Error())
	}
	return err
}

// refresh fetches the map from the master leader now.
func (r *Router) refresh(ctx context.Context) error {
	refreshesTotal.Inc()
	var m *pb.PartitionMap
	err := r.masterCall(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
		var err error
		m, err = mc.GetPartitionMap(ctx, &pb.GetPartitionMapRequest{})
		return err
	})
	if err != nil {
		return err
	}
	// A map older than the one held (a slow answer overtaken by the
	// watch, one from a deposed master) would undo changes the watch
	// already delivered.
	r.installIf(m, true)
	return nil
}

// olderLocked reports whether m, a whole map or a table answer, was read
// from an older state of the master group than the held map: by version
// when the same master process numbered both (it orders the leaders too),
// else by the master group's Raft index when both carry one (every master
// applies the same log, so the index orders states across masters: a
// deposed master's answer, read before the change the new master's watch
// brought, is at a lower index). With no index on either side (a master
// from before PartitionMap.index) another master's map is not older, as
// before. r.mu is held.
func (r *Router) olderLocked(m *pb.PartitionMap) bool {
	if m.GetEpoch() == r.epoch {
		return m.GetVersion() < r.version
	}
	return m.GetIndex() != 0 && r.index != 0 && m.GetIndex() < r.index
}

// refreshShared reads the map from the master leader for a retrying
// request: it joins the read in flight or starts one, and waits for it
// until ctx ends. The read itself runs on the router's lifetime, so a
// request that stops waiting (rangeclient's RefreshWait: the master may be
// electing its leader while the range's replicas already name theirs)
// leaves it to finish for the next round, and the requests of one outage
// ask the master once rather than each on its own.
func (r *Router) refreshShared(ctx context.Context) {
	r.refreshMu.Lock()
	if r.ctx.Err() != nil {
		r.refreshMu.Unlock()
		return
	}
	done := r.refreshing
	if done == nil {
		done = make(chan struct{})
		r.refreshing = done
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			rctx, cancel := context.WithTimeout(r.ctx, r.cfg.RetryTimeout)
			_ = r.refresh(rctx)
			cancel()
			r.refreshMu.Lock()
			r.refreshing = nil
			r.refreshMu.Unlock()
			close(done)
		}()
	}
	r.refreshMu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// refreshTable fetches what the master knows of one table (it, its ranges
// and their leaders, or that it does not exist) and applies it.
func (r *Router) refreshTable(ctx context.Context, name string) error {
	refreshesTotal.Inc()
	var m *pb.PartitionMap
	err := r.masterCall(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
		var err error
		m, err = mc.GetPartitionMap(ctx, &pb.GetPartitionMapRequest{Table: name})
		return err
	})
	if err != nil {
		return err
	}
	if !m.GetDelta() {
		// A master that does not know table lookups sent the whole map.
		r.install(m)
		return nil
	}
	r.applyTableAnswer(m)
	return nil
}

// applyTableAnswer applies what the master answered about one table (a
// lookup, CreateTable, DeleteTable), read at the answer's version and Raft
// index, unless the held map is newer (olderLocked): the watch delivers
// every change after the map it started with, so a held map at a later
// version of the same master, or at a later Raft index of any master,
// already holds this table as it was then or since, and the answer would
// undo a change the watch brought while the answer was on its way (a
// table deleted while its create was answered, created again while its
// delete was) — for good, as nothing more comes for that name. The index
// covers answers from another master than the watch's, which may come
// after the next leader's changes: a create's or delete's answer is read
// after the command commits and the range starts, with no check that
// this master still leads, and a lookup's answer by a master that takes
// itself for the leader (a cut-off leader does for up to its Raft leader
// lease) and may be late on its way. Other masters' answers without an
// index (or to a map without one) are applied, as they always were.
//
// An answer at or after the held index is applied even if another answer
// brought a newer state of the table: what changed the table after the
// answer's index is after the held index too, and the watch brings it.
func (r *Router) applyTableAnswer(m *pb.PartitionMap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.olderLocked(m) {
		return
	}
	r.applyLocked(m)
}

// installStream installs the whole map a watch starts with. Every change
// after it reaches the watch as a delta, so it replaces whatever is held.
func (r *Router) installStream(m *pb.PartitionMap) { r.install(m) }

// applyStreamDelta applies a delta of the watch. A delta numbered at or
// below the held map's version is already in it (a whole map fetched
// since). It reports false when the held map came from another master than
// the delta (its versions do not compare): the watch must start over.
func (r *Router) applyStreamDelta(m *pb.PartitionMap) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.GetEpoch() != r.epoch {
		return false
	}
	if m.GetVersion() <= r.version {
		return true
	}
	r.applyLocked(m)
	r.version = m.GetVersion()
	// The delta was read from the state at its index; changes at or below
	// it not in the delta yet are pending in the master's watcher and
	// come next (so an answer refused meanwhile loses nothing).
	r.index = max(r.index, m.GetIndex())
	return true
}

// applyLocked applies a delta (upserts and removals of tables, ranges and
// leaders; servers, properties and accounts whole). r.mu is held.
func (r *Router) applyLocked(m *pb.PartitionMap) {
	for _, key := range m.GetRemovedTables() {
		r.dropTableLocked(strings.ToLower(key))
	}
	for _, t := range m.GetTables() {
		key := strings.ToLower(t.GetName())
		if old, ok := r.tables[key]; ok && old.GetTableId() != t.GetTableId() {
			r.dropTableLocked(key)
		}
		r.putTableLocked(key, t)
	}
	for _, id := range m.GetRemovedRanges() {
		r.dropRangeLocked(id)
		delete(r.hinted, id)
	}
	for _, d := range m.GetRanges() {
		r.putRangeLocked(d)
	}
	for _, id := range m.GetRemovedLeaders() {
		delete(r.leaders, id)
	}
	for id, l := range m.GetLeaders() {
		r.leaders[id] = l
		delete(r.hinted, id)
	}
	if len(m.GetServers()) > 0 {
		servers := make(map[string]*pb.ServerInfo, len(m.GetServers()))
		for _, s := range m.GetServers() {
			servers[s.GetServerId()] = s
		}
		r.servers = servers
	}
	if m.GetEpoch() != 0 || len(m.GetServers()) > 0 {
		// A master's delta carries the service properties and accounts
		// whole; a local one (CreateTable's answer) carries no servers.
		r.setServiceProperties(m)
		r.accounts = m.GetAccounts()
	}
}

// setServiceProperties takes every account's service properties from a
// master's map or delta (they travel whole: the primary account's in
// every message, the other accounts' in whole maps and in the deltas that
// say they carry them).
func (r *Router) setServiceProperties(m *pb.PartitionMap) {
	r.serviceProperties = m.GetServiceProperties()
	r.perAccountProps = m.GetPerAccountServiceProperties()
	if !m.GetDelta() || m.GetAccountServicePropertiesCarried() || !m.GetPerAccountServiceProperties() {
		r.accountProperties = m.GetAccountServiceProperties()
	}
}

// sortedIndex is where a table named name is or would be in r.sorted.
func (r *Router) sortedIndex(name string) (int, bool) {
	return sort.Find(len(r.sorted), func(i int) int { return strings.Compare(name, r.sorted[i].GetName()) })
}

func (r *Router) putTableLocked(key string, t *pb.Table) {
	if old, ok := r.tables[key]; ok {
		if i, found := r.sortedIndex(old.GetName()); found {
			r.sorted = slices.Delete(r.sorted, i, i+1)
		}
	}
	r.tables[key] = t
	i, found := r.sortedIndex(t.GetName())
	if found {
		r.sorted[i] = t
	} else {
		r.sorted = slices.Insert(r.sorted, i, t)
	}
}

func (r *Router) dropTableLocked(key string) {
	t, ok := r.tables[key]
	if !ok {
		return
	}
	delete(r.tables, key)
	if i, found := r.sortedIndex(t.GetName()); found {
		r.sorted = slices.Delete(r.sorted, i, i+1)
	}
	for _, d := range r.ranges[t.GetTableId()] {
		delete(r.rangeTable, d.GetRangeId())
		delete(r.leaders, d.GetRangeId())
		delete(r.hinted, d.GetRangeId())
	}
	delete(r.ranges, t.GetTableId())
}

func (r *Router) dropRangeLocked(id uint64) {
	tid, ok := r.rangeTable[id]
	if !ok {
		return
	}
	delete(r.rangeTable, id)
	rs := r.ranges[tid]
	if i := slices.IndexFunc(rs, func(d *pb.RangeDescriptor) bool { return d.GetRangeId() == id }); i >= 0 {
		// Copy: readers may hold the old slice.
		r.ranges[tid] = slices.Delete(slices.Clone(rs), i, i+1)
	}
}

func (r *Router) putRangeLocked(d *pb.RangeDescriptor) {
	r.dropRangeLocked(d.GetRangeId())
	rs := slices.Clone(r.ranges[d.GetTableId()])
	i := sort.Search(len(rs), func(i int) bool { return rs[i].GetStart() >= d.GetStart() })
	r.ranges[d.GetTableId()] = slices.Insert(rs, i, d)
	r.rangeTable[d.GetRangeId()] = d.GetTableId()
}

// install replaces the held map with a whole one.
func (r *Router) install(m *pb.PartitionMap) { r.installIf(m, false) }

// installIf installs m whole; with ifNotOlder, not if it is older than the
// held map (olderLocked), judged under the same lock as the install: a
// fetched map judged apart from it could be installed over a watch delta
// applied in between, undoing that delta's change until the next whole map.
func (r *Router) installIf(m *pb.PartitionMap, ifNotOlder bool) {
	tables := make(map[string]*pb.Table, len(m.GetTables()))
	sorted := make([]*pb.Table, 0, len(m.GetTables()))
	for _, t := range m.GetTables() {
		tables[strings.ToLower(t.GetName())] = t
		sorted = append(sorted, t)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].GetName() < sorted[j].GetName() })
	ranges := map[uint64][]*pb.RangeDescriptor{}
	rangeTable := make(map[uint64]uint64, len(m.GetRanges()))
	for _, d := range m.GetRanges() {
		ranges[d.GetTableId()] = append(ranges[d.GetTableId()], d)
		rangeTable[d.GetRangeId()] = d.GetTableId()
	}
	for _, rs := range ranges {
		sort.Slice(rs, func(i, j int) bool { return rs[i].GetStart() < rs[j].GetStart() })
	}
	servers := make(map[string]*pb.ServerInfo, len(m.GetServers()))
	for _, s := range m.GetServers() {
		servers[s.GetServerId()] = s
	}
	r.mu.Lock()
	if ifNotOlder && r.olderLocked(m) {
		r.mu.Unlock()
		return
	}
	r.version, r.epoch, r.index = m.GetVersion(), m.GetEpoch(), m.GetIndex()
	r.tables, r.sorted, r.ranges, r.rangeTable, r.servers = tables, sorted, ranges, rangeTable, servers
	r.setServiceProperties(m)
	r.accounts = m.GetAccounts()
	r.leaders = m.GetLeaders()
	if r.leaders == nil {
		r.leaders = map[uint64]string{}
	}
	// A hint from a partition server is fresher than the map only until the
	// map reports a leader itself; one for a range the map no longer has
	// (range ids are never reused) is only memory.
	for id := range r.hinted {
		_, led := r.leaders[id]
		_, held := r.rangeTable[id]
		if led || !held {
			delete(r.hinted, id)
		}
	}
	r.mu.Unlock()
	r.watch.installed.Store(true)
}

// tableErr is the error for an unknown table.
func tableErr(name string) error {
	return rpcerr.New(codes.NotFound, rpcerr.ReasonTableNotFound, fmt.Sprintf("table %q not found", name), nil)
}

// lookupTable finds a table, refreshing the map once if it is not cached
// (another front-end may have just created it).
func (r *Router) lookupTable(ctx context.Context, name string) (*pb.Table, error) {
	key := strings.ToLower(name)
	r.mu.RLock()
	t, ok := r.tables[key]
	r.mu.RUnlock()
	if ok {
		return t, nil
	}
	if err := r.refreshTable(ctx, name); err != nil {
		return nil, err
	}
	r.mu.RLock()
	t, ok = r.tables[key]
	r.mu.RUnlock()
	if !ok {
		return nil, tableErr(name)
	}
	return t, nil
}

// locate returns the range of table holding PartitionKey pk.
func (r *Router) locate(t *pb.Table, pk string) (*pb.RangeDescriptor, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rs := r.ranges[t.GetTableId()]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].GetStart() > pk }) - 1
	if i < 0 {
		return nil, false
	}
	d := rs[i]
	if d.GetEnd() != "" && pk >= d.GetEnd() {
		return nil, false
	}
	return d, true
}

// candidates lists the servers to try for a range, by id: the hinted or
// reported leader first, then the replicas in the descriptor's order.
func (r *Router) candidates(d *pb.RangeDescriptor) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(d.GetReplicas())+2)
	if id, ok := r.hinted[d.GetRangeId()]; ok {
		out = append(out, id)
	}
	if id, ok := r.leaders[d.GetRangeId()]; ok {
		out = append(out, id)
	}
	for _, rep := range d.GetReplicas() {
		out = append(out, rep.GetServerId())
	}
	return out
}

// addrOf is the gRPC address of a server in the cached map.
func (r *Router) addrOf(server string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.servers[server]
	return s.GetGrpcAddr(), ok
}

// hint records the leader of a range learned from a partition server
// (called on every success: the common case, no change, takes no write
// lock).
func (r *Router) hint(rangeID uint64, server string) {
	r.mu.RLock()
	same := r.hinted[rangeID] == server || (r.leaders[rangeID] == server && r.hinted[rangeID] == "")
	r.mu.RUnlock()
	if same {
		return
	}
	r.mu.Lock()
	r.hinted[rangeID] = server
	r.mu.Unlock()
}

// unhint drops the hint for a range if it names server (which just failed
// without naming another leader).
func (r *Router) unhint(rangeID uint64, server string) {
	r.mu.Lock()
	if r.hinted[rangeID] == server {
		delete(r.hinted, rangeID)
	}
	r.mu.Unlock()
}

// RegisterFlags binds the router settings to flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("masters", "comma-separated master gRPC addresses (default "+strings.Join(c.Masters, ",")+")", func(s string) error {
		c.Masters = masterclient.ParseAddrs(s)
		return nil
	})
	fs.DurationVar(&c.RetryTimeout, "retry-timeout", c.RetryTimeout, "how long to retry a request across leader changes and stale maps")
	fs.DurationVar(&c.AttemptTimeout, "attempt-timeout", c.AttemptTimeout, "how long one attempt of a request waits for a partition server before trying the next replica (writes get more per entity, queries their work budget more)")
	fs.DurationVar(&c.StartTimeout, "start-timeout", c.StartTimeout, "how long a starting front-end waits for a master's partition map before it gives up (0: until a master answers; the front-end is alive and not ready meanwhile)")
	c.TLS.RegisterFlags(fs)
}
