package metricsbridge

import (
	"sort"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
)

// family says which Prometheus family a go-metrics key maps onto.
type family struct {
	name   string // full name, tablestore_raft_…
	help   string
	kind   kind
	labels []string // Prometheus label names, in order
	// from maps a go-metrics label name to a Prometheus one (peer_id→peer).
	from map[string]string
	// fixed gives label values fixed by the key (state="leader").
	fixed map[string]string
}

// binding is a family with its registered vector.
type binding struct {
	family
	scale     float64 // multiply samples by this (ms → s)
	counter   *prometheus.CounterVec
	histogram *prometheus.HistogramVec
	// fixedCounter and fixedObserver are the one child of a family whose
	// label values the key alone fixes (no label comes from raft's):
	// resolved once, as raft reports some of them per read or write.
	fixedCounter  prometheus.Counter
	fixedObserver prometheus.Observer
}

type kind int

const (
	counterKind kind = iota
	secondsKind      // go-metrics timer in milliseconds, exported in seconds
	countKind        // sample of a count (entries per batch)
	ratioKind        // sample in 0..1
)

var peerLabel = map[string]string{"peer_id": "peer"}

// raftFamilies maps every go-metrics key tablestore exports (joined with
// ".", service prefix off) to its family. The set is fixed: keys not listed
// (raft's legacy copies with the peer id in the key, per-group gauges that
// many groups in one process would overwrite, and per-RPC network timers)
// are dropped, so a server exports the same families whatever its peers.
var raftFamilies = map[string]family{
	"raft.apply":                           {name: "apply_total", kind: counterKind, help: "Commands submitted to Raft groups this process leads."},
	"raft.barrier":                         {name: "barriers_total", kind: counterKind, help: "Raft barriers issued (a new leader's first read, splits)."},
	"raft.verify_leader":                   {name: "verify_leader_total", kind: counterKind, help: "Leadership verifications (linearizable reads)."},
	"raft.state.candidate":                 {name: "state_changes_total", kind: counterKind, labels: []string{"state"}, fixed: map[string]string{"state": "candidate"}, help: "Raft state changes of this process's groups, by the state entered."},
	"raft.state.follower":                  {name: "state_changes_total", kind: counterKind, labels: []string{"state"}, fixed: map[string]string{"state": "follower"}},
	"raft.state.leader":                    {name: "state_changes_total", kind: counterKind, labels: []string{"state"}, fixed: map[string]string{"state": "leader"}},
	"raft.transition.heartbeat_timeout":    {name: "heartbeat_timeouts_total", kind: counterKind, help: "Followers that lost their leader's heartbeat and started an election."},
	"raft.transition.leader_lease_timeout": {name: "leader_lease_timeouts_total", kind: counterKind, help: "Leaders that stepped down after losing contact with a quorum."},
	"raft.replication.appendEntries.logs":  {name: "replication_append_entries_logs_total", kind: counterKind, labels: []string{"peer"}, from: peerLabel, help: "Log entries replicated to a follower, by peer server id."},
	"raft.replication.appendEntries.rpc":   {name: "replication_append_entries_seconds", kind: secondsKind, labels: []string{"peer"}, from: peerLabel, help: "AppendEntries round trips to a follower, by peer server id (_count counts the RPCs)."},
	"raft.replication.installSnapshot":     {name: "replication_install_snapshot_seconds", kind: secondsKind, labels: []string{"peer"}, from: peerLabel, help: "Snapshots sent to a lagging follower, by peer server id."},
	"raft.commitTime":                      {name: "commit_seconds", kind: secondsKind, help: "Time from a leader dispatching an entry to its commit (quorum replication)."},
	"raft.leader.dispatchLog":              {name: "leader_dispatch_log_seconds", kind: secondsKind, help: "Time a leader takes to write a batch of entries to its own log."},
	"raft.leader.lastContact":              {name: "leader_last_contact_seconds", kind: secondsKind, help: "Time since a leader last heard from its followers, sampled as it checks its lease."},
	"raft.candidate.electSelf":             {name: "election_seconds", kind: secondsKind, help: "Time a candidate takes to request votes."},
	"raft.fsm.apply":                       {name: "fsm_apply_seconds", kind: secondsKind, help: "Time to apply one committed entry to a state machine."},
	"raft.fsm.applyBatch":                  {name: "fsm_apply_batch_seconds", kind: secondsKind, help: "Time to apply one batch of committed entries."},
	"raft.fsm.applyBatchNum":               {name: "fsm_apply_batch_entries", kind: countKind, help: "Entries per applied batch."},
	"raft.fsm.enqueue":                     {name: "fsm_enqueue_seconds", kind: secondsKind, help: "Time committed entries wait to be handed to the state machine."},
	"raft.fsm.snapshot":                    {name: "fsm_snapshot_seconds", kind: secondsKind, help: "Time a state machine takes to start a snapshot."},
	"raft.fsm.restore":                     {name: "fsm_restore_seconds", kind: secondsKind, help: "Time a state machine takes to restore a snapshot."},
	"raft.snapshot.create":                 {name: "snapshot_create_seconds", kind: secondsKind, help: "Time to create a snapshot sink."},
	"raft.snapshot.persist":                {name: "snapshot_persist_seconds", kind: secondsKind, help: "Time to write a snapshot to disk."},
	"raft.snapshot.takeSnapshot":           {name: "snapshot_seconds", kind: secondsKind, help: "Time to take a snapshot end to end."},
	"raft.compactLogs":                     {name: "compact_logs_seconds", kind: secondsKind, help: "Time to drop log entries a snapshot covers."},
	"raft.rpc.appendEntries":               {name: "rpc_append_entries_seconds", kind: secondsKind, help: "Time a follower takes to handle an AppendEntries request."},
	"raft.rpc.appendEntries.storeLogs":     {name: "rpc_append_entries_store_logs_seconds", kind: secondsKind, help: "Time a follower takes to persist the entries of an AppendEntries request."},
	"raft.rpc.appendEntries.processLogs":   {name: "rpc_append_entries_process_logs_seconds", kind: secondsKind, help: "Time a follower takes to process the entries of an AppendEntries request."},
	"raft.rpc.requestVote":                 {name: "rpc_request_vote_seconds", kind: secondsKind, help: "Time to handle a vote request."},
	"raft.rpc.installSnapshot":             {name: "rpc_install_snapshot_seconds", kind: secondsKind, help: "Time a follower takes to install a snapshot from its leader."},
	"raft.thread.main.saturation":          {name: "thread_saturation_ratio", kind: ratioKind, labels: []string{"thread"}, fixed: map[string]string{"thread": "main"}, help: "Share of time a Raft goroutine is busy, by goroutine (main, fsm)."},
	"raft.thread.fsm.saturation":           {name: "thread_saturation_ratio", kind: ratioKind, labels: []string{"thread"}, fixed: map[string]string{"thread": "fsm"}},
	"raft.boltdb.getLog":                   {name: "log_get_seconds", kind: secondsKind, help: "Time to read one entry from a Raft log store."},
	"raft.boltdb.storeLogs":                {name: "log_store_seconds", kind: secondsKind, help: "Time to append a batch of entries to a Raft log store."},
	"raft.boltdb.logsPerBatch":             {name: "log_store_batch_entries", kind: countKind, help: "Entries per batch appended to a Raft log store."},
}

// newRaftSink registers the families on reg. Keys sharing a family name
// (state_changes_total) share its vector.
func newRaftSink(reg prometheus.Registerer) (*raftSink, error) {
	help := map[string]string{}
	for _, f := range raftFamilies {
		if f.help != "" {
			help[f.name] = f.help
		}
	}
	s := &raftSink{bound: map[string]*binding{}}
	made := map[string]*binding{}
	for _, key := range sortedKeys(raftFamilies) {
		b := &binding{family: raftFamilies[key], scale: 1}
		if b.kind == secondsKind {
			b.scale = 1.0 / 1000
		}
		s.bound[key] = b
		if m, ok := made[b.name]; ok {
			b.counter, b.histogram = m.counter, m.histogram
			continue
		}
		name := "tablestore_raft_" + b.name
		var c prometheus.Collector
		if b.kind == counterKind {
			b.counter = prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help[b.name]}, b.labels)
			c = b.counter
		} else {
			b.histogram = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help[b.name], Buckets: buckets(b.kind)}, b.labels)
			c = b.histogram
		}
		if err := reg.Register(c); err != nil {
			return nil, err
		}
		made[b.name] = b
	}
	for _, b := range s.bound {
		if len(b.from) > 0 {
			continue
		}
		if b.counter != nil {
			b.fixedCounter = b.counter.WithLabelValues(b.values(nil)...)
		} else {
			b.fixedObserver = b.histogram.WithLabelValues(b.values(nil)...)
		}
	}
	return s, nil
}

func sortedKeys(m map[string]family) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// RaftFamilies returns the tablestore_raft_* families InstallRaftSink
// registers, by full name, with their label names (for checks of the
// docs: families with a peer label have no series until a Raft group
// replicates).
func RaftFamilies() map[string][]string {
	out := map[string][]string{}
	for _, f := range raftFamilies {
		out["tablestore_raft_"+f.name] = f.labels
	}
	return out
}

func buckets(k kind) []float64 {
	switch k {
	case secondsKind:
		return prometheus.ExponentialBuckets(0.0001, 2, 18) // 100µs .. 13s
	case countKind:
		return prometheus.ExponentialBuckets(1, 2, 10) // 1 .. 512
	default:
		return prometheus.LinearBuckets(0.1, 0.1, 10) // 0.1 .. 1
	}
}

// raftSink is a go-metrics sink that writes into the fixed families.
type raftSink struct {
	bound map[string]*binding // read-only after newRaftSink
}

func (f *family) values(labels []gometrics.Label) []string {
	if len(f.labels) == 0 {
		return nil
	}
	out := make([]string, len(f.labels))
	for i, name := range f.labels {
		out[i] = f.fixed[name]
	}
	for _, l := range labels {
		if to, ok := f.from[l.Name]; ok {
			for i, name := range f.labels {
				if name == to {
					out[i] = l.Value
				}
			}
		}
	}
	return out
}

func (s *raftSink) add(key []string, val float32, labels []gometrics.Label) {
	// Joined on the stack: the lookup of string(bytes) does not allocate,
	// and raft reports a few keys per read and per write.
	var buf [96]byte
	k := buf[:0]
	for i, part := range key {
		if i > 0 {
			k = append(k, '.')
		}
		k = append(k, part...)
	}
	f := s.bound[string(k)]
	if f == nil {
		return
	}
	switch {
	case f.fixedCounter != nil:
		f.fixedCounter.Add(float64(val))
		return
	case f.fixedObserver != nil:
		f.fixedObserver.Observe(float64(val) * f.scale)
		return
	}
	if f.counter != nil {
		f.counter.WithLabelValues(f.values(labels)...).Add(float64(val))
		return
	}
	f.histogram.WithLabelValues(f.values(labels)...).Observe(float64(val) * f.scale)
}

// SetGauge drops gauges: raft's are per group, and many groups in one
// process would overwrite each other's values.
func (s *raftSink) SetGauge([]string, float32)                              {}
func (s *raftSink) SetGaugeWithLabels([]string, float32, []gometrics.Label) {}
func (s *raftSink) EmitKey([]string, float32)                               {}
func (s *raftSink) IncrCounter(key []string, val float32)                   { s.add(key, val, nil) }
func (s *raftSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.add(key, val, labels)
}
func (s *raftSink) AddSample(key []string, val float32) { s.add(key, val, nil) }
func (s *raftSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.add(key, val, labels)
}
