package ctl

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"tablestore/internal/masterclient"
	"tablestore/internal/natural"
	"tablestore/internal/rangegroup"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// The record types below are ctl's JSON contract (docs/operations.md lists
// the fields): one object per line, snake_case names, every field always
// present unless marked omitempty, so scripts can rely on them.

// Range is one range of the partition map with its last reported load.
type Range struct {
	RangeID uint64 `json:"range_id"`
	// Group is the Raft group serving the range: its own range id unless
	// it is a span of another range's group (docs/range-groups.md).
	Group uint64 `json:"group"`
	// Anchor: the range is an anchor, the empty range of a reserved table
	// ("_groups/" and its id) that founds a Raft group new tables share
	// (the master's --table-groups); it holds no rows.
	Anchor bool `json:"anchor"`
	// GroupSpans is how many ranges of the map the range's Raft group
	// serves (the anchor included, as --table-group-spans counts them).
	GroupSpans int      `json:"group_spans"`
	Table      string   `json:"table"`
	TableID    uint64   `json:"table_id"`
	Start      string   `json:"start"` // "" is the start of the table
	End        string   `json:"end"`   // "" is the end of the table
	Generation uint64   `json:"generation"`
	Replicas   []string `json:"replicas"`
	Leader     string   `json:"leader"` // "" when no leader was reported
	// State is the leader's lifecycle state of the range (active, quiet:
	// closed until its next request); "" when not reported.
	State string `json:"state"`
	// LoadReported is false when the range's leader has not reported a
	// load yet: the figures are zero because nothing is known, not because
	// the range is idle.
	LoadReported    bool     `json:"load_reported"`
	ReadsPerSec     float64  `json:"reads_per_sec"`
	WritesPerSec    float64  `json:"writes_per_sec"`
	EntitiesPerSec  float64  `json:"entities_per_sec"`
	ThrottledPerSec float64  `json:"throttled_per_sec"`
	EntityCount     uint64   `json:"entity_count"`
	Bytes           uint64   `json:"bytes"`
	DistinctKeys    uint32   `json:"distinct_keys"`
	HotKeys         []HotKey `json:"hot_keys"`
}

// HotKey is one of a range's busiest PartitionKeys.
type HotKey struct {
	PartitionKey   string  `json:"partition_key"`
	EntitiesPerSec float64 `json:"entities_per_sec"`
}

// Server is one registered partition server.
type Server struct {
	ServerID string `json:"server_id"`
	GRPCAddr string `json:"grpc_addr"`
	RaftAddr string `json:"raft_addr"`
	// Zone is the server's failure domain (its --zone), "" when it names
	// none: the master spreads each range's replicas over distinct zones.
	Zone  string `json:"zone"`
	Alive bool   `json:"alive"`
	// Draining is set by `ctl drain`: nothing new is placed there and its
	// replicas and leaderships move away.
	Draining bool `json:"draining"`
	// LastHeartbeat is RFC 3339 (UTC, nanoseconds), "" if never heard from
	// by the current master leader.
	LastHeartbeat         string `json:"last_heartbeat"`
	LastHeartbeatUnixNano int64  `json:"last_heartbeat_unix_nano"`
	// Replicas and Leaders count the ranges the server holds and leads.
	Replicas int `json:"replicas"`
	Leaders  int `json:"leaders"`
	// LeaderEntitiesPerSec sums entities/s over the ranges it leads: the
	// load the server carries, the figure leader balancing evens out.
	LeaderEntitiesPerSec float64 `json:"leader_entities_per_sec"`
	// Disk is what the master makes of the server's free disk space
	// (scheduler.Disk.State): "ok", "low" (no new replicas), "full"
	// (under its reserve: its leaders refuse writes, and its leaderships
	// and replicas move off), "" when the server reports no figures. The
	// figures are its last heartbeat's, 0 without one.
	Disk               string `json:"disk"`
	DiskAvailableBytes uint64 `json:"disk_available_bytes"`
	DiskCapacityBytes  uint64 `json:"disk_capacity_bytes"`
	DiskReserveBytes   uint64 `json:"disk_reserve_bytes"`
	// ClockSkewed: the server's clock is off from the servers' median by
	// more than the master's --max-clock-offset (it gets no leadership
	// and its leaders refuse writes); ClockOffsetSeconds is its offset
	// from that median, 0 when unknown.
	ClockSkewed        bool    `json:"clock_skewed"`
	ClockOffsetSeconds float64 `json:"clock_offset_seconds"`
	// MetricsAddr and PprofAddr are where the server serves /metrics (with
	// /healthz, /readyz, /version) and /debug/pprof as it registered them;
	// "" when off or registered by an older server.
	MetricsAddr string `json:"metrics_addr"`
	PprofAddr   string `json:"pprof_addr"`
}

// Frontend is one front-end whose partition map watch a master serves
// (`ctl frontends`): who it said it is, and what that master sent it.
type Frontend struct {
	// ID is random per front-end process (host name and hex).
	ID string `json:"id"`
	// HTTPAddrs are its Azure Table REST API listeners; MetricsAddr and
	// PprofAddr where it serves /metrics (with /healthz, /readyz,
	// /version) and /debug/pprof, "" when off. Addresses bound to every
	// interface are shown with the host its watch came from.
	HTTPAddrs   []string `json:"http_addrs"`
	MetricsAddr string   `json:"metrics_addr"`
	PprofAddr   string   `json:"pprof_addr"`
	// Version is its build (as `tablestore version` prints it).
	Version string `json:"version"`
	// Started is when the front-end started, Connected when its watch
	// opened: RFC 3339 (UTC, nanoseconds).
	Started           string `json:"started"`
	StartedUnixNano   int64  `json:"started_unix_nano"`
	Connected         string `json:"connected"`
	ConnectedUnixNano int64  `json:"connected_unix_nano"`
	// Master is the id of the master serving its watch, MasterAddr the
	// --master address that answered, MasterLeader whether it leads;
	// PeerAddr is where the watch came from.
	Master       string `json:"master"`
	MasterAddr   string `json:"master_addr"`
	MasterLeader bool   `json:"master_leader"`
	PeerAddr     string `json:"peer_addr"`
	// MapVersionSent is the version of the last map or delta the master
	// sent it, MasterMapVersion the master's current one (both of that
	// master's numbering), MapVersionsBehind the difference: changes not
	// yet sent (a front-end that reads slowly). What the front-end
	// applied is not known to the master.
	MapVersionSent    uint64 `json:"map_version_sent"`
	MasterMapVersion  uint64 `json:"master_map_version"`
	MapVersionsBehind uint64 `json:"map_versions_behind"`
	// LastSendUnixNano is when the master last sent it anything (a
	// keepalive included), 0 before the first.
	LastSendUnixNano int64 `json:"last_send_unix_nano"`
}

// Member is one member of the master group (`ctl master`).
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
}

// Event is one entry of the master's event log.
type Event struct {
	Seq      uint64 `json:"seq"`
	Time     string `json:"time"` // RFC 3339, UTC, nanoseconds
	UnixNano int64  `json:"unix_nano"`
	// Kind is the EventKind name in lower case with dashes (split, merge,
	// move, ..., server-removed; docs/operations.md lists them all).
	Kind            string             `json:"kind"`
	Table           string             `json:"table"`
	RangeIDs        []uint64           `json:"range_ids"`
	Servers         []string           `json:"servers"`
	Figures         map[string]float64 `json:"figures"`
	Message         string             `json:"message"`
	Cause           string             `json:"cause"`
	DurationSeconds float64            `json:"duration_seconds"`
}

// Result is what an operation (split, merge, move, transfer-leader) did.
type Result struct {
	Op           string `json:"op"`
	Table        string `json:"table,omitempty"`
	PartitionKey string `json:"partition_key,omitempty"`
	RangeID      uint64 `json:"range_id,omitempty"`
	To           string `json:"to,omitempty"`
	From         string `json:"from,omitempty"`
	// Server is the partition server of remove-server.
	Server string `json:"server,omitempty"`
	// Ranges are the descriptors the master answered (split: left then
	// right; merge and move: the range); their load fields are unset.
	Ranges []Range `json:"ranges"`
}

// finite keeps JSON encodable: encoding/json refuses NaN and ±Inf, and a
// rate computed over an empty window could be one.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// rangeFromPB converts a descriptor; pm, when not nil, supplies the leader
// and the load.
func rangeFromPB(d *pb.RangeDescriptor, pm *pb.PartitionMap) Range {
	r := Range{
		RangeID: d.GetRangeId(), Group: rangegroup.GroupOf(d), Anchor: rangegroup.IsAnchor(d), Table: d.GetTable(), TableID: d.GetTableId(),
		Start: d.GetStart(), End: d.GetEnd(), Generation: d.GetGeneration(),
		Replicas: []string{}, HotKeys: []HotKey{},
	}
	for _, rep := range d.GetReplicas() {
		r.Replicas = append(r.Replicas, rep.GetServerId())
	}
	if pm == nil {
		return r
	}
	r.Leader = pm.GetLeaders()[d.GetRangeId()]
	if l, ok := pm.GetLoads()[d.GetRangeId()]; ok && l != nil {
		r.LoadReported = true
		r.State = l.GetLifecycle()
		r.ReadsPerSec = finite(l.GetReadsPerSec())
		r.WritesPerSec = finite(l.GetWritesPerSec())
		r.EntitiesPerSec = finite(l.GetEntitiesPerSec())
		r.ThrottledPerSec = finite(l.GetThrottledPerSec())
		r.EntityCount = l.GetEntityCount()
		r.Bytes = l.GetBytes()
		r.DistinctKeys = l.GetDistinctKeys()
		for _, k := range l.GetHotKeys() {
			r.HotKeys = append(r.HotKeys, HotKey{PartitionKey: k.GetPartitionKey(), EntitiesPerSec: finite(k.GetEntitiesPerSec())})
		}
		// Busiest first whatever order the server sent.
		slices.SortStableFunc(r.HotKeys, func(a, b HotKey) int { return cmp.Compare(b.EntitiesPerSec, a.EntitiesPerSec) })
	}
	return r
}

// rangesFromMap lists the ranges of table (all tables if empty; the name
// matches case-insensitively, as table lookups do) in key order.
func rangesFromMap(pm *pb.PartitionMap, table string) []Range {
	out := []Range{}
	spans := rangegroup.GroupSpans(pm.GetRanges())
	for _, d := range pm.GetRanges() {
		if table != "" && !strings.EqualFold(d.GetTable(), table) {
			continue
		}
		r := rangeFromPB(d, pm)
		r.GroupSpans = spans[r.Group]
		out = append(out, r)
	}
	sortRanges(out)
	return out
}

// sortRanges orders by table, then by start key; "" (the table's start)
// sorts first naturally because keys compare ordinally.
func sortRanges(rs []Range) {
	slices.SortFunc(rs, func(a, b Range) int {
		if c := cmp.Compare(a.Table, b.Table); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		return cmp.Compare(a.RangeID, b.RangeID)
	})
}

// serversFromMap lists the servers with the replicas and leaderships the map
// gives them, in natural id order (ps2 before ps10).
func serversFromMap(pm *pb.PartitionMap) []Server {
	replicas := map[string]int{}
	for _, d := range pm.GetRanges() {
		for _, rep := range d.GetReplicas() {
			replicas[rep.GetServerId()]++
		}
	}
	leaders := map[string]int{}
	load := map[string]float64{}
	for id, s := range pm.GetLeaders() {
		leaders[s]++
		if l, ok := pm.GetLoads()[id]; ok {
			load[s] += finite(l.GetEntitiesPerSec())
		}
	}
	out := []Server{}
	for _, s := range pm.GetServers() {
		sv := Server{
			ServerID: s.GetServerId(), GRPCAddr: s.GetGrpcAddr(), RaftAddr: s.GetRaftAddr(), Zone: s.GetZone(),
			Alive: s.GetAlive(), Draining: s.GetDraining(), LastHeartbeatUnixNano: s.GetLastHeartbeatUnixNano(),
			Replicas: replicas[s.GetServerId()], Leaders: leaders[s.GetServerId()],
			LeaderEntitiesPerSec: load[s.GetServerId()],
			ClockSkewed:          s.GetClockSkewed(), ClockOffsetSeconds: time.Duration(s.GetClockOffsetNanos()).Seconds(),
			MetricsAddr: s.GetMetricsAddr(), PprofAddr: s.GetPprofAddr(),
		}
		if d := s.GetDiskSpace(); d != nil {
			sv.DiskAvailableBytes, sv.DiskCapacityBytes, sv.DiskReserveBytes = d.GetAvailableBytes(), d.GetCapacityBytes(), d.GetReserveBytes()
			sv.Disk = scheduler.Disk{Available: sv.DiskAvailableBytes, Capacity: sv.DiskCapacityBytes, Reserve: sv.DiskReserveBytes}.State().String()
		}
		if sv.LastHeartbeatUnixNano != 0 {
			sv.LastHeartbeat = time.Unix(0, sv.LastHeartbeatUnixNano).UTC().Format(time.RFC3339Nano)
		}
		out = append(out, sv)
	}
	slices.SortFunc(out, func(a, b Server) int { return natural.Compare(a.ServerID, b.ServerID) })
	return out
}

func eventFromPB(e *pb.Event) Event {
	ev := Event{
		Seq: e.GetSeq(), UnixNano: e.GetUnixNano(), Kind: e.GetKind().Name(),
		Table: e.GetTable(), RangeIDs: append([]uint64{}, e.GetRangeIds()...),
		Servers: append([]string{}, e.GetServers()...), Figures: map[string]float64{},
		Message: e.GetMessage(), Cause: e.GetCause(), DurationSeconds: finite(e.GetDurationSeconds()),
	}
	if ev.UnixNano != 0 {
		ev.Time = time.Unix(0, ev.UnixNano).UTC().Format(time.RFC3339Nano)
	}
	for k, v := range e.GetFigures() {
		ev.Figures[k] = finite(v)
	}
	return ev
}

// ErrorRecord is how a failed command reports itself with --json: one
// object on stderr (after any usage text), the exit status still 1.
type ErrorRecord struct {
	// Error is the message ctl prints without --json.
	Error string `json:"error"`
	// Kind is usage (the command line is wrong; nothing was sent),
	// no_master (no master leader answered within --timeout), master (a
	// master refused: code and reason say how), table_not_found (ranges
	// --table), or other.
	Kind string `json:"kind"`
	// Code and Reason are the master's gRPC code (NotFound, Aborted, ...)
	// and tablestore reason (RANGE_NOT_FOUND, ...); "" unless Kind is
	// master (Reason "" when the master gave none).
	Code   string `json:"code"`
	Reason string `json:"reason"`
	// Metadata is the master's error metadata (a leader hint, a retry
	// delay); {} when none.
	Metadata map[string]string `json:"metadata"`
}

// errorRecord describes err for --json.
func errorRecord(err error) ErrorRecord {
	rec := ErrorRecord{Error: err.Error(), Kind: "other", Metadata: map[string]string{}}
	var me *MasterError
	switch {
	case errors.Is(err, ErrUsage), errors.Is(err, ErrUnknownCommand):
		rec.Kind = "usage"
	case errors.Is(err, masterclient.ErrNoMaster):
		rec.Kind = "no_master"
	case errors.Is(err, ErrTableNotFound):
		rec.Kind = "table_not_found"
	case errors.As(err, &me):
		rec.Kind, rec.Code, rec.Reason = "master", me.Info.Code.String(), me.Info.Reason
		for k, v := range me.Info.Metadata {
			rec.Metadata[k] = v
		}
	}
	return rec
}

// ReportedError is a failure run already wrote to stderr as an
// ErrorRecord (--json): the caller exits non-zero without printing it
// again. Unwrap gives the failure.
type ReportedError struct{ err error }

func (e *ReportedError) Error() string { return e.err.Error() }

// Unwrap returns the failure reported.
func (e *ReportedError) Unwrap() error { return e.err }
