package partitionserver

import (
	"tablestore/internal/peertls"
	"tablestore/partitionserver/fsm"

	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Config configures a partition server. Defaults are in DefaultConfig and
// documented in docs/operations.md.
type Config struct {
	// ID names the server in Raft configurations and in the master's
	// registry. Empty: read from (or generated into) DataDir/server-id.
	ID string
	// DataDir holds state.db and one directory per range replica.
	DataDir string
	// GRPCAddr is the listen address of the gRPC service.
	GRPCAddr string
	// RaftAddr is the listen address shared by all Raft groups.
	RaftAddr string
	// AdvertiseGRPC and AdvertiseRaft are the addresses others dial; empty
	// means the listener's address.
	AdvertiseGRPC string
	AdvertiseRaft string
	// MetricsAddr and PprofAddr are where the process serves /metrics (with
	// /healthz, /readyz, /version) and /debug/pprof, "" when off: not flags
	// of the server but of the binary, which sets them once its listeners
	// are bound. Registered with the master (an unspecified host replaced
	// by the advertised gRPC host) for `tablestore ctl debug zip`.
	MetricsAddr string
	PprofAddr   string
	// Masters lists the master gRPC addresses.
	Masters []string
	// TLS is mutual TLS for the partition service, the range groups' Raft
	// traffic and the calls to masters.
	TLS peertls.Config
	// HeartbeatInterval is how often the server reports to the master.
	HeartbeatInterval time.Duration
	// FullReportInterval is how often a heartbeat reports every hosted
	// replica; the others carry only the replicas whose report changed (an
	// idle range costs nothing between full reports). A master without a
	// complete view asks for a full report at once.
	FullReportInterval time.Duration

	// Raft timings of every range group.
	RaftHeartbeatTimeout time.Duration
	// ReadLease is how long a follower's read-lease promise to its leader
	// lasts (package lease): while a quorum's promises hold, the leader
	// answers linearizable reads without a round of heartbeats. At most
	// half of RaftHeartbeatTimeout; 0 turns leases off (every read pays
	// VerifyLeader's round). Every server of a cluster should use the
	// same value.
	ReadLease            time.Duration
	RaftElectionTimeout  time.Duration
	RaftLeaderLease      time.Duration
	RaftCommitTimeout    time.Duration
	RaftMaxAppendEntries int
	SnapshotThreshold    uint64
	SnapshotInterval     time.Duration
	TrailingLogs         uint64

	// StateCommitInterval is how long applied commands wait for the group
	// commit of the state file when no reader waits for them (a reader
	// commits at once). Longer: fewer bbolt commits (page writes and two
	// fdatasyncs each) per entry; follower reads lag by up to this much.
	StateCommitInterval time.Duration
	// StateCompactFree is the share of the state file that must be free
	// (and at least 64 MiB) for a start to compact it: bbolt reuses freed
	// pages but never gives them back to the file system, so the space of
	// deleted tables and departed replicas stays the file's until a
	// compaction copies its live data (fsm.OpenCompacting). Default half:
	// the copy then needs no more room than it gives back. 0: never.
	StateCompactFree float64
	// StateCompactMaxLive bounds the live data a start compacts: the copy
	// delays the start (about a second per 500 MiB from a warm page
	// cache, more from a cold one), and a server silent for the master's
	// --replicate-after (30 s) has its replicas re-created elsewhere. A
	// larger file is compacted by a start with the bound raised (and the
	// master's --replicate-after with it). 0: no bound.
	StateCompactMaxLive uint64

	// ApplyTimeout bounds a proposal's wait for its commit.
	ApplyTimeout time.Duration
	// QueryBudget is the default work budget of one query page (Azure: 5 s).
	QueryBudget time.Duration
	// PartitionThrottle is the most entities per second one PartitionKey
	// may read or write before requests get 503 ServerBusy (Azure's target
	// is 2,000); 0 disables throttling.
	PartitionThrottle float64
	// HotKeys is how many of the busiest PartitionKeys a load report
	// carries.
	HotKeys int
	// ServerCapacity is the entities per second this server serves as
	// leader of its ranges, all together; beyond it requests queue up to
	// ServerQueueWait and then get 503 ServerBusy (package admission). It
	// models separate machines on one host; 0 disables it.
	ServerCapacity  float64
	ServerQueueWait time.Duration

	// QuiesceAfter is how long a range led here must see no request and no
	// new log entry before its leader commits a QUIESCE marker and every
	// member closes its Raft member (the range goes quiet and costs
	// nothing until used). Replicas found at start also stay closed until
	// used. 0 disables both: every replica runs all the time.
	QuiesceAfter time.Duration
	// QuietReadTimeout bounds how long a read of a quiet range this server
	// led waits for another voter to confirm that the range is still where
	// it went quiet (quietread.go) before it wakes the range instead. 0
	// turns quiet reads off: every read of a quiet range wakes it.
	QuietReadTimeout time.Duration
	// ShutdownTimeout bounds Close (SIGTERM): members still closing when
	// it passes are left as a crash would leave them.
	ShutdownTimeout time.Duration
	// DiskReserve is the free space in bytes the data directory's file
	// system keeps for the server's own writes: under it, the ranges led
	// here refuse client writes with 503 ServerBusy (diskreserve.go),
	// while Raft, snapshots and compaction go on; 0 disables it.
	DiskReserve uint64
	// Zone is the server's failure domain (a rack, an availability zone):
	// the master spreads each range's replicas over as many distinct
	// zones as the servers name (docs/operations.md, "Zones"). Empty (the
	// default): none named; the server then shares a zone with no other.
	// Printable, no spaces, at most MaxZoneLen bytes.
	Zone string
	// ClockNow, when set, is the server's wall clock in place of
	// time.Now (and of the ClockOffsetPoint failpoint): a test's shifted
	// clock (tests only). It is the clock the heartbeats report to the
	// master (HeartbeatRequest.sent_unix_nano) and the one the leaders
	// stamp write proposals with (WriteCommand.proposed_unix_nano), as one
	// host clock would be; timers, leases and ages use the monotonic
	// clock and never read it (wallclock.go).
	ClockNow func() time.Time
}

// MaxZoneLen is the longest zone name, in bytes.
const MaxZoneLen = 64

// ErrBadZone is returned by Validate for a zone name that is not
// printable, holds a space or is longer than MaxZoneLen.
var ErrBadZone = errors.New("zone must be printable, without spaces, at most 64 bytes")

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		DataDir:              "./data/ps",
		GRPCAddr:             "127.0.0.1:7200",
		RaftAddr:             "127.0.0.1:7300",
		Masters:              []string{"127.0.0.1:7000"},
		HeartbeatInterval:    500 * time.Millisecond,
		FullReportInterval:   10 * time.Second,
		RaftHeartbeatTimeout: 500 * time.Millisecond,
		ReadLease:            250 * time.Millisecond,
		RaftElectionTimeout:  500 * time.Millisecond,
		// As long as the heartbeat timeout allows: a leader that hears
		// from no follower for this long steps down, and on a loaded
		// machine a stall of 250 - 270 ms took every leader's lease at
		// once, each loss then costing a second or more of elections
		// (chaos seeds 141, 331, 355; docs/reliability.md section 22).
		// Reads do not rely on the lease (VerifyLeader), and a leader
		// really cut off is replaced after the followers' heartbeat
		// timeout whatever it is.
		RaftLeaderLease: 500 * time.Millisecond,
		// Every open range's leader sends each follower an AppendEntries
		// per commit tick (1 – 2 timeouts apart) even when idle, only to
		// carry the commit index; at 10 ms that traffic was most of the CPU
		// of creating tables (each new range stays open QuiesceAfter). A
		// write's own AppendEntries goes out at once whatever the tick;
		// what waits for the tick is a follower learning the last commit
		// of a burst (follower reads, reshaping: see announceCommit).
		RaftCommitTimeout:    50 * time.Millisecond,
		RaftMaxAppendEntries: 256,
		SnapshotThreshold:    16384,
		SnapshotInterval:     30 * time.Second,
		TrailingLogs:         10240,
		StateCommitInterval:  fsm.DefaultCommitInterval,
		StateCompactFree:     0.5,
		StateCompactMaxLive:  2 << 30,
		ApplyTimeout:         10 * time.Second,
		QueryBudget:          5 * time.Second,
		PartitionThrottle:    2000,
		HotKeys:              16,
		ServerQueueWait:      50 * time.Millisecond,
		QuiesceAfter:         5 * time.Second,
		QuietReadTimeout:     100 * time.Millisecond,
		ShutdownTimeout:      8 * time.Second,
		// A new log segment (64 MiB) and a step of the state file's
		// growth (16 MiB) with room to spare.
		DiskReserve: 256 << 20,
	}
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data-dir is empty"))
	}
	if c.GRPCAddr == "" || c.RaftAddr == "" {
		errs = append(errs, errors.New("grpc-addr and raft-addr are required"))
	}
	if len(c.Masters) == 0 {
		errs = append(errs, errors.New("--masters names no master address"))
	}
	if c.HeartbeatInterval <= 0 || c.FullReportInterval <= 0 || c.RaftHeartbeatTimeout <= 0 || c.RaftElectionTimeout <= 0 ||
		c.RaftLeaderLease <= 0 || c.RaftCommitTimeout <= 0 || c.StateCommitInterval <= 0 || c.ApplyTimeout <= 0 || c.QueryBudget <= 0 {
		errs = append(errs, errors.New("durations must be positive"))
	}
	if c.ReadLease < 0 || 2*c.ReadLease > c.RaftHeartbeatTimeout {
		errs = append(errs, errors.New("read-lease must be between 0 and half of raft-heartbeat-timeout"))
	}
	if c.RaftLeaderLease > c.RaftHeartbeatTimeout {
		errs = append(errs, errors.New("raft-leader-lease must not exceed raft-heartbeat-timeout"))
	}
	if c.PartitionThrottle < 0 {
		errs = append(errs, errors.New("partition-throttle must not be negative"))
	}
	if c.ServerCapacity < 0 || c.ServerQueueWait < 0 {
		errs = append(errs, errors.New("server-capacity and server-queue-wait must not be negative"))
	}
	if c.QuiesceAfter < 0 || c.QuietReadTimeout < 0 {
		errs = append(errs, errors.New("quiesce-after and quiet-read-timeout must not be negative"))
	}
	if !(c.StateCompactFree >= 0 && c.StateCompactFree <= 1) {
		errs = append(errs, errors.New("state-compact-free must be between 0 and 1"))
	}
	if c.ShutdownTimeout < time.Second {
		errs = append(errs, errors.New("shutdown-timeout must be at least 1s"))
	}
	if c.HotKeys < 2 {
		errs = append(errs, errors.New("hot-keys must be at least 2"))
	}
	if c.RaftMaxAppendEntries <= 0 || c.RaftMaxAppendEntries > 1024 {
		errs = append(errs, errors.New("raft-max-append-entries must be in 1..1024"))
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := validZone(c.Zone); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("partitionserver: invalid config: %w", err)
	}
	return nil
}

// RegisterFlags binds the config to flags with kebab-case names.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ID, "id", c.ID, "server id (default: read from or generated into <data-dir>/server-id)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for state.db and the range replicas' Raft logs")
	fs.Uint64Var(&c.DiskReserve, "disk-reserve", c.DiskReserve, "free bytes kept on the data directory's file system: under it, client writes get 503 ServerBusy while Raft and compaction go on (0 disables)")
	fs.StringVar(&c.Zone, "zone", c.Zone, "failure domain of this server (rack or availability zone, printable, no spaces, at most 64 bytes): the master spreads each range's replicas over distinct zones (default empty: none named, the server shares a zone with no other)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "listen address of the gRPC service")
	fs.StringVar(&c.RaftAddr, "raft-addr", c.RaftAddr, "listen address shared by all Raft groups")
	fs.StringVar(&c.AdvertiseGRPC, "advertise-grpc", c.AdvertiseGRPC, "gRPC address others dial (default: the listener's)")
	fs.StringVar(&c.AdvertiseRaft, "advertise-raft", c.AdvertiseRaft, "Raft address others dial (default: the listener's)")
	fs.Func("masters", "comma-separated master gRPC addresses (default "+strings.Join(c.Masters, ",")+")", func(s string) error {
		c.Masters = splitList(s)
		return nil
	})
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "how often to report to the master")
	fs.DurationVar(&c.FullReportInterval, "full-report-interval", c.FullReportInterval, "how often a heartbeat reports every hosted replica (the others carry only changed ones)")
	fs.DurationVar(&c.RaftHeartbeatTimeout, "raft-heartbeat-timeout", c.RaftHeartbeatTimeout, "Raft follower timeout before an election")
	fs.DurationVar(&c.ReadLease, "read-lease", c.ReadLease, "how long a follower's read-lease promise lasts (at most half of raft-heartbeat-timeout; 0: every linearizable read confirms leadership with a round of heartbeats)")
	fs.DurationVar(&c.RaftElectionTimeout, "raft-election-timeout", c.RaftElectionTimeout, "Raft candidate election timeout")
	fs.DurationVar(&c.RaftLeaderLease, "raft-leader-lease", c.RaftLeaderLease, "Raft leader lease timeout")
	fs.DurationVar(&c.RaftCommitTimeout, "raft-commit-timeout", c.RaftCommitTimeout, "Raft idle commit propagation interval")
	fs.IntVar(&c.RaftMaxAppendEntries, "raft-max-append-entries", c.RaftMaxAppendEntries, "most log entries per AppendEntries and per apply batch")
	fs.Uint64Var(&c.SnapshotThreshold, "snapshot-threshold", c.SnapshotThreshold, "log entries between range snapshots")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", c.SnapshotInterval, "how often to check whether to snapshot")
	fs.Uint64Var(&c.TrailingLogs, "trailing-logs", c.TrailingLogs, "log entries kept after a snapshot for slow followers")
	fs.DurationVar(&c.StateCommitInterval, "state-commit-interval", c.StateCommitInterval, "longest wait of applied writes for the state file's group commit when no reader waits")
	fs.Float64Var(&c.StateCompactFree, "state-compact-free", c.StateCompactFree, "share of the state file that must be free (and at least 64 MiB) for a start to compact it, giving the space back to the file system (0: never)")
	fs.Uint64Var(&c.StateCompactMaxLive, "state-compact-max-live", c.StateCompactMaxLive, "largest live data (bytes) in the state file a start compacts: the copy delays the start, and a server silent past the master's --replicate-after has its replicas re-created elsewhere (0: no bound)")
	fs.DurationVar(&c.ApplyTimeout, "apply-timeout", c.ApplyTimeout, "longest wait for a write to commit")
	fs.DurationVar(&c.QueryBudget, "query-budget", c.QueryBudget, "work budget of one query page (Azure: 5s)")
	fs.Float64Var(&c.PartitionThrottle, "partition-throttle", c.PartitionThrottle, "entities/s one PartitionKey may use before 503 ServerBusy (Azure: 2000; 0 disables)")
	fs.IntVar(&c.HotKeys, "hot-keys", c.HotKeys, "busiest PartitionKeys reported per range")
	c.RegisterLifecycleFlags(fs)
	c.RegisterCapacityFlags(fs)
	c.TLS.RegisterFlags(fs)
}

// validZone checks a --zone value: it travels in every heartbeat and is
// shown in tables (ctl servers, the dashboard), so no spaces, control
// characters or invalid UTF-8, and a bounded length.
func validZone(z string) error {
	if len(z) > MaxZoneLen || !utf8.ValidString(z) {
		return fmt.Errorf("%w: %q", ErrBadZone, z)
	}
	for _, r := range z {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%w: %q", ErrBadZone, z)
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// RegisterCapacityFlags binds the capacity model's settings; dev shares
// them.
func (c *Config) RegisterCapacityFlags(fs *flag.FlagSet) {
	fs.Float64Var(&c.ServerCapacity, "server-capacity", c.ServerCapacity, "entities/s this server serves as leader before requests queue and then get 503 ServerBusy (models a separate machine; 0 disables)")
	fs.DurationVar(&c.ServerQueueWait, "server-queue-wait", c.ServerQueueWait, "longest queueing of a request over -server-capacity before 503 ServerBusy")
}

// RegisterLifecycleFlags binds the replica lifecycle settings; dev shares
// them.
func (c *Config) RegisterLifecycleFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.QuiesceAfter, "quiesce-after", c.QuiesceAfter, "idle time after which a range closes its Raft members until used (0: never; replicas then also open at start)")
	fs.DurationVar(&c.QuietReadTimeout, "quiet-read-timeout", c.QuietReadTimeout, "longest a read of a quiet range waits for another voter's confirmation before it wakes the range (0: every read wakes it)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "longest a shutdown waits for the ranges' Raft members to close")
}
