package cluster

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"tablestore/frontend"
	"tablestore/frontend/router"
	"tablestore/master"
	"tablestore/partitionserver"
)

// DevConfig configures `tablestore dev`: one master, three partition servers
// and one front-end in one process on loopback.
type DevConfig struct {
	// DataDir holds every node's data; restarting on it serves the same
	// entities.
	DataDir string
	// FrontendAddr is where the Azure Table endpoint listens.
	FrontendAddr string
	// BasePort places the master (BasePort, +100) and partition servers
	// (+200+i, +300+i); 0 picks free ports at every start (the servers
	// find each other by id, so changing ports across restarts is fine).
	BasePort int
	// Servers is the number of partition servers.
	Servers int
	// LocalCalls lets the front-end call the partition servers in this
	// process directly rather than over loopback gRPC.
	LocalCalls bool
	// Master, Server and Frontend carry the role settings (policies,
	// timings, the account, Azurite's switches) that dev passes through;
	// Keys says where the key comes from besides --account-key.
	Master   master.Config
	Server   partitionserver.Config
	Frontend frontend.Config
	Keys     frontend.KeySource
}

// MaxDevServers bounds -servers: dev places them at BasePort+200+i and
// +300+i, and more than ten on one host show nothing more.
const MaxDevServers = 10

// DefaultDevConfig returns the documented defaults.
func DefaultDevConfig() DevConfig {
	c := DevConfig{
		DataDir: "./data", FrontendAddr: "127.0.0.1:10002", Servers: 3, LocalCalls: true,
		Master: master.DefaultConfig(), Server: partitionserver.DefaultConfig(), Frontend: frontend.DefaultConfig(),
	}
	// Every partition server is in this one process: splits stay in
	// their range's group (scheduler.Config.SharedHost).
	c.Master.Policy.SharedHost = true
	// Tables share Raft groups (docs/range-groups.md, stage 7): one
	// process pays every group's heartbeats and entries, so a dev cluster
	// of many small tables is where sharing pays most (performance.md,
	// sessions 34 and 35). The master's own default since session 36;
	// set here too so that dev keeps it if that default changes back.
	c.Master.TableGroups = true
	return c
}

// Validate reports invalid settings.
func (c *DevConfig) Validate() error {
	if c.DataDir == "" || c.FrontendAddr == "" {
		return fmt.Errorf("dev: --data-dir and --frontend-addr are required")
	}
	if c.Servers < 1 || c.Servers > MaxDevServers {
		return fmt.Errorf("dev: --servers %d: must be in 1..%d", c.Servers, MaxDevServers)
	}
	if c.BasePort < 0 || c.BasePort > 65000-400 {
		return fmt.Errorf("dev: --base-port %d out of range (0 picks free ports)", c.BasePort)
	}
	return nil
}

// RegisterFlags binds the dev settings to flags.
func (c *DevConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for all nodes' data")
	fs.StringVar(&c.FrontendAddr, "frontend-addr", c.FrontendAddr, "listen address of the Azure Table endpoint")
	fs.IntVar(&c.BasePort, "base-port", c.BasePort, "first internal port: master gRPC; +100 master Raft; +200+i / +300+i partition server gRPC / Raft (0: free ports picked at start)")
	fs.StringVar(&c.Frontend.AccountName, "account-name", c.Frontend.AccountName, "storage account name served")
	fs.StringVar(&c.Frontend.AccountKey, "account-key", c.Frontend.AccountKey, "base64 account key (default: Azurite's well-known key; prefer --account-key-file or $"+frontend.AccountKeyEnv+")")
	c.Keys.RegisterFlags(fs)
	fs.IntVar(&c.Servers, "servers", c.Servers, "number of partition servers (1..10; replication factor becomes at most this)")
	fs.BoolVar(&c.LocalCalls, "local-calls", c.LocalCalls, "front-end calls the in-process partition servers directly instead of over loopback gRPC")
	fs.IntVar(&c.Master.ReplicationFactor, "replication-factor", c.Master.ReplicationFactor, "replicas per range (at most -servers)")
	c.Master.Policy.RegisterFlags(fs)
	c.Master.RegisterTableGroupFlags(fs)
	fs.Float64Var(&c.Server.PartitionThrottle, "partition-throttle", c.Server.PartitionThrottle, "entities/s one PartitionKey may use before 503 ServerBusy (Azure: 2000; 0 disables)")
	fs.IntVar(&c.Server.HotKeys, "hot-keys", c.Server.HotKeys, "busiest PartitionKeys reported per range")
	c.Frontend.RegisterEmulatorFlags(fs)
	c.Server.RegisterCapacityFlags(fs)
	c.Server.RegisterLifecycleFlags(fs)
}

// StartDev starts the dev cluster.
func StartDev(cfg DevConfig, logger *slog.Logger) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Frontend.CheckTLS(); err != nil {
		// Before any role starts: a bad --cert used to be found after
		// the master and partition servers had started (and created their
		// data directories), then stopped again.
		return nil, fmt.Errorf("dev: %w", err)
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("dev: --data-dir %s: %w", cfg.DataDir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("dev: --data-dir %s: %w", cfg.DataDir, err)
	}
	c, err := Start(Options{
		Masters: 1, Servers: cfg.Servers, Frontends: 1, DataDir: abs, BasePort: cfg.BasePort,
		FrontendAddrs: []string{cfg.FrontendAddr}, Logger: logger, LocalCalls: cfg.LocalCalls,
		TuneMaster: func(m *master.Config) {
			id, dir, g, r, peers := m.ID, m.DataDir, m.GRPCAddr, m.RaftAddr, m.Peers
			*m = cfg.Master
			m.ID, m.DataDir, m.GRPCAddr, m.RaftAddr, m.Peers = id, dir, g, r, peers
			if m.ReplicationFactor > cfg.Servers {
				m.ReplicationFactor = cfg.Servers
			}
		},
		TuneFrontend: func(f *frontend.Config) {
			addr := f.HTTPAddr
			*f = cfg.Frontend
			f.HTTPAddr = addr
		},
		TuneServer: func(s *partitionserver.Config) {
			id, dir, g, r, ms := s.ID, s.DataDir, s.GRPCAddr, s.RaftAddr, s.Masters
			*s = cfg.Server
			s.ID, s.DataDir, s.GRPCAddr, s.RaftAddr, s.Masters = id, dir, g, r, ms
		},
	})
	if err != nil {
		return nil, devError(err, cfg)
	}
	// ctl without --master finds this cluster's master here (the port is
	// picked at start unless --base-port is given).
	if err := os.WriteFile(filepath.Join(abs, MasterAddrFile), []byte(strings.Join(c.MasterAddrs(), ",")+"\n"), 0o644); err != nil {
		c.Close()
		return nil, fmt.Errorf("dev: --data-dir %s: %w", cfg.DataDir, err)
	}
	return c, nil
}

// MasterAddrFile, in dev's data directory, holds the master's gRPC
// address for `tablestore ctl`.
const MasterAddrFile = "master-addr"

// devError names the dev flag behind a port a role could not listen on:
// the roles' own messages name their flags (--grpc-addr, --http-addr),
// which dev sets from --base-port and --frontend-addr.
func devError(err error, cfg DevConfig) error {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "listen" || op.Addr == nil {
		return fmt.Errorf("dev: %w", err)
	}
	addr := op.Addr.String()
	if addr == cfg.FrontendAddr {
		return fmt.Errorf("dev: --frontend-addr %s: port in use (%v)", addr, op.Err)
	}
	if cfg.BasePort != 0 {
		return fmt.Errorf("dev: internal port %s (from --base-port %d) in use: %v; omit --base-port to pick free ports", addr, cfg.BasePort, op.Err)
	}
	return fmt.Errorf("dev: internal port %s: %v", addr, op.Err)
}

// StartFrontend runs one front-end process role: a router on the masters and
// the HTTP server on fcfg.Addr.
func StartFrontend(fcfg frontend.Config, rcfg router.Config, logger *slog.Logger) (*FrontendNode, error) {
	c := &Cluster{opts: Options{Logger: logger}}
	n := &FrontendNode{Config: fcfg}
	if err := c.startFrontend(n, rcfg); err != nil {
		return nil, err
	}
	return n, nil
}

// Close stops a front-end started by StartFrontend.
func (n *FrontendNode) Close() {
	c := &Cluster{Frontends: []*FrontendNode{n}}
	c.Close()
}
