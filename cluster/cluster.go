package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"tablestore/frontend"
	"tablestore/frontend/router"
	"tablestore/internal/buildinfo"
	"tablestore/internal/health"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// Options shape a cluster.
type Options struct {
	Masters   int
	Servers   int
	Frontends int
	// DataDir holds one subdirectory per node.
	DataDir string
	// Ports: 0 picks free ports. Otherwise masters use BasePort+i (gRPC)
	// and BasePort+100+i (Raft), partition servers BasePort+200+i and
	// BasePort+300+i.
	BasePort int
	// FrontendAddrs fixes the front-ends' listen addresses (else free ports).
	FrontendAddrs []string
	Logger        *slog.Logger
	// LocalCalls lets front-ends call the partition servers of this process
	// directly instead of over loopback gRPC (dev mode; see
	// connpool.RegisterLocal).
	LocalCalls bool
	// Tune adjusts the role configs before start.
	TuneMaster   func(*master.Config)
	TuneServer   func(*partitionserver.Config)
	TuneFrontend func(*frontend.Config)
	TuneRouter   func(*router.Config)
	// AwaitHomeGroup makes Start return only once the leading master
	// would put a new table in an anchor group (when the masters run
	// with --table-groups and a --merge-load above 0, under which no
	// group is cold enough), so that the first table created is a span
	// of one, as every later one, instead of a group of its own
	// depending on how soon the anchor group started.
	AwaitHomeGroup bool
}

// Cluster is a running in-process cluster.
type Cluster struct {
	opts      Options
	mu        sync.Mutex
	Masters   []*MasterNode
	Servers   []*ServerNode
	Frontends []*FrontendNode
	// masterGRPC are the masters' service addresses servers report to.
	masterGRPC []string
}

// MasterNode is one master and the config it restarts with.
type MasterNode struct {
	Config master.Config
	Server *master.Server
}

// ServerNode is one partition server.
type ServerNode struct {
	Config partitionserver.Config
	Server *partitionserver.Server
}

// FrontendNode is one front-end and its router.
type FrontendNode struct {
	Config frontend.Config
	Router *router.Router
	Server *frontend.Server
	Addr   string
	done   chan struct{}
}

// freePort picks a free port below the kernel's ephemeral range
// (32768–60999 on Linux): a port the kernel handed out for a listener on :0
// and that was closed again can be taken meanwhile as the source port of an
// outgoing connection, so restarting a node on it could fail.
func freePort() (int, error) {
	handedMu.Lock()
	defer handedMu.Unlock()
	for try := 0; try < 200; try++ {
		p := 20000 + rand.IntN(12000)
		if handed[p] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		handed[p] = true
		return p, nil
	}
	return 0, errors.New("cluster: no free port")
}

// handed remembers the ports given out in this process, so two nodes never
// get the same one while neither listens yet.
var (
	handedMu sync.Mutex
	handed   = map[int]bool{}
)

// FreeBasePort returns a port p to use as o.BasePort: every port of o's
// layout above p (see BasePort) is free right now and was never handed out
// before in this process, by FreeBasePort or to a cluster started on free
// ports. The kernel's "free" says nothing of a port whose node is down for
// a restart, or not listening yet; tests that restart a cluster on fixed
// ports take them from here so no other cluster of the binary gets them.
func FreeBasePort(o Options) (int, error) {
	offsets := o.portOffsets()
	handedMu.Lock()
	defer handedMu.Unlock()
	// Every block in random order, not a number of random tries: the
	// ports handed out earlier in the process (never given again) grow
	// with every cluster started, and leave few blocks whole.
	for _, b := range rand.Perm(120) {
		// Below the ephemeral range (32768 and up on Linux), where the
		// cluster's own outgoing connections could take a port between this
		// check and the restart's listen.
		base := 20000 + b*100
		ok := true
		for _, off := range offsets {
			if handed[base+off] {
				ok = false
				break
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+off))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			for _, off := range offsets {
				handed[base+off] = true
			}
			return base, nil
		}
	}
	return 0, errors.New("cluster: no free port block")
}

// portOffsets are the ports, from BasePort, that the cluster o shapes
// listens on (the layout addr gives).
func (o *Options) portOffsets() []int {
	var out []int
	for _, role := range []struct{ base, n int }{
		{0, o.Masters}, {100, o.Masters}, {200, o.Servers}, {300, o.Servers}, {400, o.Frontends},
	} {
		for i := 0; i < role.n; i++ {
			out = append(out, role.base+i)
		}
	}
	return out
}

func (o *Options) addr(base, i int) (string, error) {
	if o.BasePort != 0 {
		return "127.0.0.1:" + strconv.Itoa(o.BasePort+base+i), nil
	}
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// Start launches the cluster and waits until every partition server has
// registered, the front-ends have a map, and the servers' ranges can elect
// leaders.
func Start(opts Options) (_ *Cluster, err error) {
	if opts.Masters <= 0 || opts.Servers <= 0 || opts.Frontends < 0 {
		return nil, errors.New("cluster: need at least one master and one partition server")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Cluster{opts: opts}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	peers := map[string]string{}
	var masterGRPC []string
	for i := 0; i < opts.Masters; i++ {
		cfg := master.DefaultConfig()
		cfg.ID = "m" + strconv.Itoa(i+1)
		cfg.DataDir = filepath.Join(opts.DataDir, cfg.ID)
		if cfg.GRPCAddr, err = opts.addr(0, i); err != nil {
			return nil, err
		}
		if cfg.RaftAddr, err = opts.addr(100, i); err != nil {
			return nil, err
		}
		peers[cfg.ID] = cfg.RaftAddr
		masterGRPC = append(masterGRPC, cfg.GRPCAddr)
		if opts.Servers < cfg.ReplicationFactor {
			cfg.ReplicationFactor = opts.Servers
		}
		c.Masters = append(c.Masters, &MasterNode{Config: cfg})
	}
	for _, m := range c.Masters {
		m.Config.Peers = peers
		if opts.TuneMaster != nil {
			opts.TuneMaster(&m.Config)
		}
		if m.Server, err = master.New(m.Config, opts.Logger); err != nil {
			return nil, err
		}
		if err = m.Server.Start(); err != nil {
			return nil, err
		}
	}
	c.masterGRPC = masterGRPC
	// The servers start once a master leads: a server that heartbeats
	// before then is told there is no leader and backs off (its master
	// client's retries wait up to 640 ms), so it would register that
	// much after the election rather than at once.
	if err = c.waitMasterLeader(30 * time.Second); err != nil {
		return nil, err
	}
	for i := 0; i < opts.Servers; i++ {
		if err := c.startServer(i); err != nil {
			return nil, err
		}
	}
	// A server refuses every election of its ranges for a read lease
	// after it starts (it may have promised a leader before it stopped):
	// a table created before then waits for Raft's election timeout
	// instead of its replicas' campaign, so Start returns after it.
	var lease time.Duration
	for _, n := range c.Servers {
		lease = max(lease, n.Config.ReadLease)
	}
	electable := time.Now().Add(lease)
	if err = c.WaitServersRegistered(30 * time.Second); err != nil {
		return nil, err
	}
	for i := 0; i < opts.Frontends; i++ {
		n := &FrontendNode{Config: frontend.DefaultConfig()}
		if i < len(opts.FrontendAddrs) {
			n.Config.HTTPAddr = opts.FrontendAddrs[i]
		} else if n.Config.HTTPAddr, err = opts.addr(400, i); err != nil {
			return nil, err
		}
		if opts.TuneFrontend != nil {
			opts.TuneFrontend(&n.Config)
		}
		rcfg := router.DefaultConfig()
		rcfg.Masters = masterGRPC
		if opts.TuneRouter != nil {
			opts.TuneRouter(&rcfg)
		}
		if err = c.startFrontend(n, rcfg); err != nil {
			return nil, err
		}
		c.Frontends = append(c.Frontends, n)
	}
	time.Sleep(time.Until(electable))
	if err = c.waitHomeGroup(30 * time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// waitHomeGroup polls, with opts.AwaitHomeGroup and masters that would
// put tables in shared groups, until the leading master has a home group
// for a new table.
func (c *Cluster) waitHomeGroup(timeout time.Duration) error {
	m := c.Masters[0].Config
	if !c.opts.AwaitHomeGroup || !m.TableGroups || m.Policy.MergeLoad <= 0 {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, m := range c.Masters {
			if m.Server != nil && m.Server.HomeGroup() != 0 {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("cluster: no anchor group taking tables within %v (--table-groups)", timeout)
}

// startServer starts partition server number i (ps<i+1>) and appends it.
func (c *Cluster) startServer(i int) (err error) {
	cfg := partitionserver.DefaultConfig()
	cfg.ID = "ps" + strconv.Itoa(i+1)
	cfg.DataDir = filepath.Join(c.opts.DataDir, cfg.ID)
	cfg.Masters = c.masterGRPC
	if cfg.GRPCAddr, err = c.opts.addr(200, i); err != nil {
		return err
	}
	if cfg.RaftAddr, err = c.opts.addr(300, i); err != nil {
		return err
	}
	if c.opts.TuneServer != nil {
		c.opts.TuneServer(&cfg)
	}
	n := &ServerNode{Config: cfg}
	if n.Server, err = partitionserver.New(cfg, c.opts.Logger); err != nil {
		return err
	}
	if err = n.Server.Start(); err != nil {
		return err
	}
	c.Servers = append(c.Servers, n)
	return nil
}

// AddServer starts one more partition server (scale-out) and returns its
// index; the front-ends learn it from the map like any other.
func (c *Cluster) AddServer() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := len(c.Servers)
	if err := c.startServer(i); err != nil {
		return 0, err
	}
	if c.opts.LocalCalls {
		s := c.Servers[i].Server
		for _, f := range c.Frontends {
			f.Router.RegisterLocal(s.GRPCAddr(), s.Service())
		}
	}
	return i, nil
}

func (c *Cluster) startFrontend(n *FrontendNode, rcfg router.Config) (err error) {
	started := time.Now()
	if n.Router, err = router.New(rcfg, c.opts.Logger); err != nil {
		return err
	}
	if ident := frontendIdentity(n.Config, "", started); len(ident.GetHttpAddrs()) > 0 {
		n.Router.SetIdentity(ident) // on its first watch already
	}
	if err = n.Router.Start(context.Background()); err != nil {
		n.Router.Close()
		return err
	}
	if c.opts.LocalCalls {
		for _, s := range c.Servers {
			if s.Server != nil {
				n.Router.RegisterLocal(s.Server.GRPCAddr(), s.Server.Service())
			}
		}
	}
	if n.Server, err = frontend.NewServer(n.Config, n.Router, c.opts.Logger); err != nil {
		n.Router.Close()
		return err
	}
	// A front-end started with AZURITE_ACCOUNTS publishes the list to the
	// master, which hands it to every front-end.
	pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err = n.Server.PublishAccounts(pctx); err != nil {
		n.Router.Close()
		return err
	}
	ln, err := net.Listen("tcp", n.Config.HTTPAddr)
	if err != nil {
		n.Router.Close()
		return fmt.Errorf("frontend: --http-addr %s: %w", n.Config.HTTPAddr, err)
	}
	n.Addr = ln.Addr().String()
	// Unchanged (no new watch) unless the port was 0.
	n.Router.SetIdentity(frontendIdentity(n.Config, n.Addr, started))
	c.opts.Logger.Info("front-end listening", "id", n.Router.ID(), "http", n.Addr, "metrics", n.Config.MetricsAddr)
	n.done = make(chan struct{})
	go func() {
		defer close(n.done)
		n.Server.Serve(ln)
	}()
	return nil
}

// frontendIdentity is who a front-end is, on its partition map watch: the
// masters list it for `tablestore ctl frontends` and `ctl debug zip`. Its
// HTTP address is the configured one, or with port 0 the one bound (none
// before it is): a front-end on a fixed port says it on its first watch,
// which then need not start over to tell it (router.SetIdentity).
func frontendIdentity(cfg frontend.Config, bound string, started time.Time) *pb.FrontendInfo {
	info := &pb.FrontendInfo{MetricsAddr: cfg.MetricsAddr, PprofAddr: cfg.PprofAddr,
		Version: buildinfo.Line(), StartUnixNano: started.UnixNano()}
	addr := cfg.HTTPAddr
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		addr = bound
	}
	if addr != "" {
		info.HttpAddrs = []string{addr}
	}
	return info
}

// MasterAddrs lists the masters' gRPC addresses.
func (c *Cluster) MasterAddrs() []string {
	var out []string
	for _, m := range c.Masters {
		out = append(out, m.Config.GRPCAddr)
	}
	return out
}

// waitMasterLeader polls until a master leads.
func (c *Cluster) waitMasterLeader(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, m := range c.Masters {
			if m.Server != nil && m.Server.IsLeader() {
				return nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("cluster: no master leader within %v", timeout)
}

// WaitServersRegistered polls until a master leader reports every
// running partition server alive. A stopped one is not waited for: the
// leader counts it down after the server timeout, so counting every server
// (as before) passed only while a stopped one had not yet timed out.
func (c *Cluster) WaitServersRegistered(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, m := range c.Masters {
			if m.Server != nil && m.Server.IsLeader() && c.runningUpAt(m.Server) {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("cluster: partition servers not registered within %v", timeout)
}

// runningUpAt reports whether master m hears from every running partition
// server.
func (c *Cluster) runningUpAt(m *master.Server) bool {
	for _, n := range c.Servers {
		if n.Server != nil && !m.ServerUp(n.Config.ID) {
			return false
		}
	}
	return true
}

// Endpoint is the front-end i's Azure Table endpoint (path-style, https
// when it serves TLS) for its first account.
func (c *Cluster) Endpoint(i int) string {
	n := c.Frontends[i]
	name, _ := n.Config.Endpoint()
	return n.Config.Scheme() + "://" + n.Addr + "/" + name
}

// ConnectionString is an Azure storage connection string for front-end i.
func (c *Cluster) ConnectionString(i int) string {
	n := c.Frontends[i]
	name, key := n.Config.Endpoint()
	return fmt.Sprintf("DefaultEndpointsProtocol=%s;AccountName=%s;AccountKey=%s;TableEndpoint=%s;",
		n.Config.Scheme(), name, key, c.Endpoint(i))
}

// StopServer stops partition server i (its data stays).
func (c *Cluster) StopServer(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.Servers[i]
	if n.Server == nil {
		return nil
	}
	for _, f := range c.Frontends {
		f.Router.UnregisterLocal(n.Server.GRPCAddr())
	}
	err := n.Server.Close()
	n.Server = nil
	return err
}

// CrashServer stops partition server i as a kill -9 would: its Raft log
// writes in flight fail and never reach disk (see partitionserver.Crash).
func (c *Cluster) CrashServer(i int) error {
	c.mu.Lock()
	n := c.Servers[i]
	s := n.Server
	n.Server = nil
	if s != nil {
		for _, f := range c.Frontends {
			f.Router.UnregisterLocal(s.GRPCAddr())
		}
	}
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Crash()
}

// RestartServer starts partition server i again on its data and ports.
func (c *Cluster) RestartServer(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.Servers[i]
	if n.Server != nil {
		return nil
	}
	s, err := partitionserver.New(n.Config, c.opts.Logger)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	n.Server = s
	if c.opts.LocalCalls {
		for _, f := range c.Frontends {
			f.Router.RegisterLocal(s.GRPCAddr(), s.Service())
		}
	}
	return nil
}

// IsolateServer cuts (true) or restores (false) server i's Raft traffic.
func (c *Cluster) IsolateServer(i int, v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.Servers[i].Server; s != nil {
		s.SetIsolated(v)
	}
}

// SlowServerDisk makes every state-file commit of server i take d longer
// (0: no longer), as a slow disk would.
func (c *Cluster) SlowServerDisk(i int, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.Servers[i].Server; s != nil {
		s.SetSlowDisk(d)
	}
}

// PauseServer stalls (true) or resumes (false) server i's Raft traffic
// with its connections left open, as SIGSTOP and SIGCONT would.
func (c *Cluster) PauseServer(i int, v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.Servers[i].Server; s != nil {
		s.SetPaused(v)
	}
}

// StopMaster stops master i.
func (c *Cluster) StopMaster(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.Masters[i]
	if n.Server == nil {
		return nil
	}
	err := n.Server.Close()
	n.Server = nil
	return err
}

// RestartMaster starts master i again.
func (c *Cluster) RestartMaster(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.Masters[i]
	if n.Server != nil {
		return nil
	}
	s, err := master.New(n.Config, c.opts.Logger)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	n.Server = s
	return nil
}

// ServerIndex returns the index of the partition server with id.
func (c *Cluster) ServerIndex(id string) int {
	for i, n := range c.Servers {
		if n.Config.ID == id {
			return i
		}
	}
	return -1
}

// Ready is the readiness of every node of the cluster (dev serves it as
// /readyz): ready when each master, partition server and front-end is.
func (c *Cluster) Ready() health.Verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	named := map[string]health.Verdict{}
	for _, m := range c.Masters {
		if m.Server != nil {
			named["master "+m.Config.ID] = m.Server.Ready()
		}
	}
	for _, n := range c.Servers {
		if n.Server != nil {
			named["partitionserver "+n.Config.ID] = n.Server.Ready()
		}
	}
	for i, f := range c.Frontends {
		if f.Router != nil {
			named["frontend "+strconv.Itoa(i)] = f.Router.Ready()
		}
	}
	return health.Join(named)
}

// Close stops everything.
func (c *Cluster) Close() {
	for _, f := range c.Frontends {
		if f.Server != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			f.Server.Shutdown(ctx)
			cancel()
			<-f.done
		}
		if f.Router != nil {
			f.Router.Close()
		}
	}
	c.Frontends = nil
	// The whole cluster stops: no member would keep a handed-off
	// leadership.
	for _, s := range c.Servers {
		if s.Server != nil {
			s.Server.SkipHandOff()
		}
	}
	for _, m := range c.Masters {
		if m.Server != nil {
			m.Server.SkipHandOff()
		}
	}
	var wg sync.WaitGroup
	for i := range c.Servers {
		wg.Add(1)
		go func(i int) { defer wg.Done(); c.StopServer(i) }(i)
	}
	wg.Wait()
	for i := range c.Masters {
		c.StopMaster(i)
	}
}
