package partitionserver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tablestore/internal/rpcerr"
)

var (
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "requests_total",
		Help: "Range requests served, by operation and gRPC code.",
	}, []string{"op", "code"})
	requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "request_seconds",
		Help:    "Time to serve a range request, by operation.",
		Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
	}, []string{"op"})

	throttledTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "throttled_total",
		Help: "Requests refused with ServerBusy by the per-partition throttle.",
	})
	capacityRefusedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "capacity_refused_total",
		Help: "Requests refused with ServerBusy because the server was over its -server-capacity.",
	})
	reshapeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "reshape_seconds",
		Help:    "Time a split, freeze, merge, replica change or leader transfer took on the range leader.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	}, []string{"op"})
	readIndexTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "read_index_total",
		Help: "Linearizable read checks of range leaders, by how leadership was confirmed: lease (a quorum's promises held) or verify (a round of heartbeats).",
	}, []string{"path"})
	// The read-index paths, resolved once (one per linearizable read).
	leaseReads            = readIndexTotal.WithLabelValues("lease")
	verifiedReads         = readIndexTotal.WithLabelValues("verify")
	transferRestartsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "transfer_restarts_total",
		Help: "Range Raft members restarted because a failed leadership transfer kept refusing writes.",
	})
	rangeEntitiesPerSec = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "range_entities_per_second",
		Help: "Entities read and written per second on the busiest ranges (at most 10) this server leads.",
	}, []string{"server", "table", "range"})
	replicasGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "replicas",
		Help: "Range replicas this server hosts.",
	}, []string{"server"})
	brokenReplicasGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "broken_replicas",
		Help: "Hosted replicas whose open found their files damaged: not opened, reported broken for the master to replace.",
	}, []string{"server"})
	leadersGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "leaders",
		Help: "Ranges this server leads.",
	}, []string{"server"})
	diskAvailableBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "data_dir_available_bytes",
		Help: "Free bytes available to this server on the file system of its data directory.",
	}, []string{"server"})
	batchedWrites = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "write_batch_writes",
		Help:    "Client writes coalesced into one Raft entry by a range leader (entries of two or more writes).",
		Buckets: prometheus.ExponentialBuckets(2, 2, 8),
	})
	diskCapacityBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "data_dir_capacity_bytes",
		Help: "Size in bytes of the file system of this server's data directory.",
	}, []string{"server"})
)

func init() {
	prometheus.MustRegister(readIndexTotal, batchedWrites, requestsTotal, requestSeconds, throttledTotal, capacityRefusedTotal, reshapeSeconds, rangeEntitiesPerSec,
		replicasGauge, brokenReplicasGauge, leadersGauge, diskAvailableBytes, diskCapacityBytes, transferRestartsTotal)
}

func observe(op string, start time.Time, err error) {
	d := time.Since(start).Seconds()
	// Every write and read of a leader ends here: the common children
	// are resolved once instead of hashing their labels per request.
	if m := okMetrics[op]; m != nil && err == nil {
		m.seconds.Observe(d)
		m.total.Inc()
		return
	}
	requestSeconds.WithLabelValues(op).Observe(d)
	code := "OK"
	if err != nil {
		code = rpcerr.Parse(err).Code.String()
	}
	requestsTotal.WithLabelValues(op, code).Inc()
}

// opMetrics are one operation's request metrics for a success.
type opMetrics struct {
	seconds prometheus.Observer
	total   prometheus.Counter
}

// okMetrics are the request metrics of a successful get, query and write.
var okMetrics = func() map[string]*opMetrics {
	m := map[string]*opMetrics{}
	for _, op := range []string{"get", "query", "write"} {
		m[op] = &opMetrics{requestSeconds.WithLabelValues(op), requestsTotal.WithLabelValues(op, "OK")}
	}
	return m
}()

// Replica lifecycle metrics (registry.go).
var (
	lifecycleTransitionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "replica_transitions_total",
		Help: "Replica lifecycle transitions, by the state entered.",
	}, []string{"to"})
	quiescedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "quiesced_total",
		Help: "Range Raft members closed after applying a QUIESCE marker as their last entry.",
	})
	joinFloorRefusalsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "join_floor_refusals_total",
		Help: "Raft votes, pre-votes, appends and snapshots a re-created replica refused below its join floor (a member that missed a removal, or a stale leader).",
	})
	joinWithoutFloorTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "join_without_floor_total",
		Help: "Replicas created empty from the map's assignments without a join floor (an older master, or a range leader on an older server).",
	})
	joinAtBirthTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "join_at_birth_total",
		Help: "Replicas of a split's new range created at the range's birth floor without its leader: a snapshot carried this server's replica of the parent past the split (missedsplit.go).",
	})
	bootstrapUncheckedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "bootstrap_unchecked_total",
		Help: "Generation-1 replicas bootstrapped from the map's assignments under a master that records no range starts (older version): unprotected if the range had started and this server lost its replica.",
	})
	strandedOpenedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "stranded_ranges_opened_total",
		Help: "Assigned ranges the state file held and no replica here served (a split applied here whose start failed), opened by the heartbeat's reconcile as a restart would.",
	})
	quietAnswersTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "quiet_answers_total",
		Help: "Raft AppendEntries, pre-votes and votes answered for a quiet range without opening it.",
	})
	quietVotesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "quiet_votes_total",
		Help: "Votes a quiet range's replica granted without opening (the campaign of a member a request woke).",
	})
	quietStoredTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "quiet_stored_entries_total",
		Help: "Raft entries a quiet range's replica appended to its log without opening.",
	})
	quietReadsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "quiet_reads_total",
		Help: "Reads of a quiet range: served without opening it (outcome served), or why they woke it instead.",
	}, []string{"outcome"})
	quietReadSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "quiet_read_seconds",
		Help:    "Time to serve a read of a quiet range without opening it (state read and confirmations).",
		Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14),
	})
	quietConfirmsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "quiet_confirms_total",
		Help: "Quiet-read confirmations this server answered for other servers, by answer.",
	}, []string{"answer"})
	wakeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "wake_seconds",
		Help:    "Time from a request to a quiet range until it was open with a known leader.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
)

func init() {
	prometheus.MustRegister(lifecycleTransitionsTotal, quiescedTotal, joinFloorRefusalsTotal, joinWithoutFloorTotal, joinAtBirthTotal, bootstrapUncheckedTotal, strandedOpenedTotal, quietAnswersTotal, quietVotesTotal, quietStoredTotal, wakeSeconds, quietReadsTotal, quietReadSeconds, quietConfirmsTotal)
}
