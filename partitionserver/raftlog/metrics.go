package raftlog

import "github.com/prometheus/client_golang/prometheus"

var (
	syncSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "raftlog", Name: "sync_seconds",
		Help:    "Time of one group commit of the shared Raft log: write and fdatasync.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	recordsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "raftlog", Name: "records_total",
		Help: "Records (appends, truncations, stable keys) written to the shared Raft log.",
	})
	bytesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "raftlog", Name: "written_bytes_total",
		Help: "Record bytes written to the shared Raft log.",
	})
)

func init() {
	prometheus.MustRegister(syncSeconds, recordsTotal, bytesTotal)
}
