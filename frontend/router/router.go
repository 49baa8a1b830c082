package router

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/connpool"
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
	// master to hand it the partition map.
	StartTimeout time.Duration
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Masters: []string{"127.0.0.1:7000"}, RetryTimeout: 10 * time.Second, AttemptTimeout: 500 * time.Millisecond, StartTimeout: 30 * time.Second}
}

// Validate reports invalid settings.
func (c *Config) Validate() error {
	if len(c.Masters) == 0 {
		return errors.New("router: at least one master address is required")
	}
	if c.RetryTimeout <= 0 || c.StartTimeout <= 0 || c.AttemptTimeout <= 0 {
		return errors.New("router: retry-timeout, attempt-timeout and start-timeout must be positive")
	}
	return c.TLS.Validate()
}

// Router routes requests to partition servers.
type Router struct {
	cfg    Config
	logger *slog.Logger
	master *masterclient.Client
	pool   *connpool.Pool

	mu                sync.RWMutex
	version           uint64
	tables            map[string]*pb.Table             // lower-case name
	ranges            map[uint64][]*pb.RangeDescriptor // table id -> ranges by start
	servers           map[string]*pb.ServerInfo
	leaders           map[uint64]string // range id -> server id
	hinted            map[uint64]string // leader learned from a partition server
	serviceProperties []byte
	watch             watchState
	accounts          []*pb.StorageAccount

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

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
		cfg: cfg, logger: logger, master: mc, pool: connpool.New(creds.DialOption()),
		tables: map[string]*pb.Table{}, ranges: map[uint64][]*pb.RangeDescriptor{},
		servers: map[string]*pb.ServerInfo{}, leaders: map[uint64]string{}, hinted: map[uint64]string{},
	}
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
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
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
	r.wg.Wait()
	r.master.Close()
	r.pool.Close()
}

func (r *Router) watchLoop() {
	backoff := 50 * time.Millisecond
	for r.ctx.Err() == nil {
		conn, i := r.master.Conn()
		stream, err := pb.NewMasterServiceClient(conn).WatchPartitionMap(r.ctx, &pb.WatchPartitionMapRequest{})
		if err == nil {
			for {
				m, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				r.install(m)
				r.watch.watching.Store(true)
				backoff = 50 * time.Millisecond
			}
		}
		if r.watch.watching.Swap(false) {
			r.watch.lostAt.Store(time.Now().UnixNano())
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

// refresh fetches the map from the master leader now.
func (r *Router) refresh(ctx context.Context) error {
	refreshesTotal.Inc()
	var m *pb.PartitionMap
	err := r.master.Call(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
		var err error
		m, err = mc.GetPartitionMap(ctx, &pb.GetPartitionMapRequest{})
		return err
	})
	if err != nil {
		return err
	}
	r.install(m)
	return nil
}

func (r *Router) install(m *pb.PartitionMap) {
	tables := make(map[string]*pb.Table, len(m.GetTables()))
	for _, t := range m.GetTables() {
		tables[strings.ToLower(t.GetName())] = t
	}
	ranges := map[uint64][]*pb.RangeDescriptor{}
	for _, d := range m.GetRanges() {
		ranges[d.GetTableId()] = append(ranges[d.GetTableId()], d)
	}
	for _, rs := range ranges {
		sort.Slice(rs, func(i, j int) bool { return rs[i].GetStart() < rs[j].GetStart() })
	}
	servers := make(map[string]*pb.ServerInfo, len(m.GetServers()))
	for _, s := range m.GetServers() {
		servers[s.GetServerId()] = s
	}
	r.mu.Lock()
	r.version = m.GetVersion()
	r.tables, r.ranges, r.servers = tables, ranges, servers
	r.serviceProperties = m.GetServiceProperties()
	r.accounts = m.GetAccounts()
	r.leaders = m.GetLeaders()
	if r.leaders == nil {
		r.leaders = map[uint64]string{}
	}
	// A hint from a partition server is fresher than the map only until the
	// map reports a leader itself.
	for id := range r.hinted {
		if _, ok := r.leaders[id]; ok {
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
	if err := r.refresh(ctx); err != nil {
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
	fs.DurationVar(&c.StartTimeout, "start-timeout", c.StartTimeout, "how long a starting front-end waits for a master's partition map before it gives up")
	c.TLS.RegisterFlags(fs)
}
