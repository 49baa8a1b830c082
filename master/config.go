package master

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"tablestore/internal/peertls"
)

// Config configures a master. Defaults are in DefaultConfig and documented
// in docs/operations.md.
type Config struct {
	// ID names this master in the Raft configuration.
	ID string
	// DataDir holds the Raft log and snapshots.
	DataDir string
	// GRPCAddr is the listen address of the master service.
	GRPCAddr string
	// RaftAddr is the listen address of the master Raft group.
	RaftAddr string
	// MetricsAddr and PprofAddr are where this master serves /metrics
	// (with /healthz, /readyz, /version) and /debug/pprof, "" when off:
	// set by the binary once its listeners are bound, not flags of the
	// master. ListMembers names them (an unspecified host replaced by the
	// Raft address's) for `tablestore ctl debug zip`.
	MetricsAddr string
	PprofAddr   string
	// Peers lists every master as id=raftaddr (including this one). Empty
	// means a single-master group of this master alone.
	Peers map[string]string
	// Join starts a master with empty state that does not bootstrap a
	// group: it waits until the group's leader adds it (`tablestore ctl
	// master add`). Ignored once the master has Raft state.
	Join bool
	// ReplicationFactor is the number of replicas of every range.
	ReplicationFactor int
	// ServerTimeout marks a partition server down after this long without
	// a heartbeat.
	ServerTimeout time.Duration
	// CreateTableWait bounds how long CreateTable waits for the new range to
	// elect a leader.
	CreateTableWait time.Duration

	RaftHeartbeatTimeout time.Duration
	RaftElectionTimeout  time.Duration
	RaftLeaderLease      time.Duration

	// Policy holds the split, merge, balance and re-replication thresholds.
	Policy PolicyConfig
	// ReconcileGrace, when positive, replaces reconcileGrace (5 s): how
	// long a range's members must differ from its descriptor before the
	// replica-set check fixes them. Tests shorten it instead of waiting
	// out 5 s; 0 keeps the default (no flag: not an operator's knob).
	ReconcileGrace time.Duration
	// PeerKeepalive, when positive, replaces peerKeepalive's 10 s: how long
	// a connection to the master service may stay silent before the master
	// pings it, and how long the ping may go unanswered before the
	// connection is closed (server.go). Tests shorten it; 0 keeps the
	// default (no flag: not an operator's knob).
	PeerKeepalive time.Duration
	// TableGroups puts new tables' first ranges in shared Raft groups
	// founded by anchors (docs/range-groups.md, stage 7) instead of a
	// group of their own each, when a group has room and every server of
	// it announced table_groups. On by default since session 36 (a
	// release carried steps 5 to 8 first); false is the way back
	// (ctl ungroup-tables refuses while it is on).
	TableGroups bool
	// TableGroupSpans caps the spans of a group new tables join
	// (--table-groups). 1,024 since session 37 (256 before, 64 before
	// session 35): inserts spread over 1,000 tables ran ~1.2x faster on
	// ~20 % less CPU per insert in one group than in four led by one
	// server, the writes of all of them going out in one lane and one
	// entry at a time (docs/performance.md, "Session 37"); the group's
	// bytes stay bounded by --split-bytes, and a hot or large table
	// leaves it (detach-hot, detach-large).
	TableGroupSpans int
	// TLS is mutual TLS for the master service and the masters' Raft
	// traffic (and the master's calls to partition servers).
	TLS peertls.Config
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		ID:                   "m1",
		DataDir:              "./data/master",
		GRPCAddr:             "127.0.0.1:7000",
		RaftAddr:             "127.0.0.1:7100",
		ReplicationFactor:    3,
		ServerTimeout:        5 * time.Second,
		CreateTableWait:      10 * time.Second,
		RaftHeartbeatTimeout: 500 * time.Millisecond,
		RaftElectionTimeout:  500 * time.Millisecond,
		RaftLeaderLease:      250 * time.Millisecond,
		Policy:               DefaultPolicyConfig(),
		TableGroups:          true,
		TableGroupSpans:      1024,
	}
}

// Validate reports invalid settings.
func (c *Config) Validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("id is empty"))
	}
	if c.DataDir == "" || c.GRPCAddr == "" || c.RaftAddr == "" {
		errs = append(errs, errors.New("data-dir, grpc-addr and raft-addr are required"))
	}
	if c.Join && len(c.Peers) > 0 {
		errs = append(errs, errors.New("join and peers exclude each other: a joining master learns its peers from the group"))
	}
	if len(c.Peers) > 0 {
		if _, ok := c.Peers[c.ID]; !ok {
			errs = append(errs, fmt.Errorf("peers do not include this master (%s)", c.ID))
		}
	}
	if c.ReplicationFactor < 1 || c.ReplicationFactor > 7 {
		errs = append(errs, errors.New("replication-factor must be in 1..7"))
	}
	if c.ServerTimeout <= 0 || c.CreateTableWait <= 0 || c.RaftHeartbeatTimeout <= 0 || c.RaftElectionTimeout <= 0 || c.RaftLeaderLease <= 0 {
		errs = append(errs, errors.New("durations must be positive"))
	}
	if c.TableGroupSpans < 2 {
		errs = append(errs, errors.New("table-group-spans must be at least 2 (the anchor and a table)"))
	}
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("master: invalid config: %w", err)
	}
	return nil
}

// ParsePeers parses "id=addr,id=addr".
func ParsePeers(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		id, addr, ok := strings.Cut(p, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("master: bad peer %q (want id=raftaddr)", p)
		}
		out[id] = addr
	}
	return out, nil
}

// RegisterFlags binds the config to flags with kebab-case names.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ID, "id", c.ID, "master id in the Raft group")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for the master's Raft log and snapshots")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "listen address of the master service")
	fs.StringVar(&c.RaftAddr, "raft-addr", c.RaftAddr, "listen address of the master Raft group")
	fs.Func("peers", "every master as id=raftaddr, comma-separated (default: this master alone)", func(s string) error {
		p, err := ParsePeers(s)
		c.Peers = p
		return err
	})
	fs.BoolVar(&c.Join, "join", c.Join, "start empty and wait to be added to an existing master group (tablestore ctl master add) instead of bootstrapping one")
	fs.IntVar(&c.ReplicationFactor, "replication-factor", c.ReplicationFactor, "replicas per range")
	fs.DurationVar(&c.ServerTimeout, "server-timeout", c.ServerTimeout, "a partition server without heartbeat for this long is down")
	fs.DurationVar(&c.CreateTableWait, "create-table-wait", c.CreateTableWait, "how long CreateTable waits for the new range's leader")
	fs.DurationVar(&c.RaftHeartbeatTimeout, "raft-heartbeat-timeout", c.RaftHeartbeatTimeout, "Raft follower timeout before an election")
	fs.DurationVar(&c.RaftElectionTimeout, "raft-election-timeout", c.RaftElectionTimeout, "Raft candidate election timeout")
	fs.DurationVar(&c.RaftLeaderLease, "raft-leader-lease", c.RaftLeaderLease, "Raft leader lease timeout")
	c.RegisterTableGroupFlags(fs)
	c.Policy.RegisterFlags(fs)
	c.TLS.RegisterFlags(fs)
}

// RegisterTableGroupFlags adds --table-groups and --table-group-spans to
// fs (the master's flags, and dev's).
func (c *Config) RegisterTableGroupFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.TableGroups, "table-groups", c.TableGroups, "create new tables' first ranges in shared Raft groups (anchor groups) when one has room")
	fs.IntVar(&c.TableGroupSpans, "table-group-spans", c.TableGroupSpans, "with --table-groups: new tables join a group only while it has fewer spans than this")
}
