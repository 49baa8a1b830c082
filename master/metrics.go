package master

import "github.com/prometheus/client_golang/prometheus"

var (
	eventsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "events_total",
		Help: "Events recorded, by kind (split, merge, move, leader transfer, throttle, server down, …).",
	}, []string{"kind"})
	opSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "operation_seconds",
		Help:    "Time a split, merge or move took from decision to completion.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{"op"})
	opFailuresTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "operation_failures_total",
		Help: "Split, merge, move and leader-transfer operations that failed.",
	}, []string{"op"})
	mergePauseSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "merge_pause_seconds",
		Help:    "Time a merged-away range served nothing: from its freeze to its removal from the map.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	rangesGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "ranges",
		Help: "Ranges in the partition map.",
	})
)

func init() {
	prometheus.MustRegister(eventsTotal, opSeconds, opFailuresTotal, mergePauseSeconds, rangesGauge)
}
