package router

import "github.com/prometheus/client_golang/prometheus"

var (
	retriesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "router", Name: "retries_total",
		Help: "Range requests retried transparently, by the reason the attempt failed.",
	}, []string{"reason"})
	refreshesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "router", Name: "map_refreshes_total",
		Help: "Partition map fetches from the master outside the watch (stale routes, unknown tables).",
	})
	syncIndexTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "router", Name: "secondary_sync_index_total",
		Help: "Read indexes behind the secondary's LastSyncTime, per range probed: reused (one confirmed within 100 ms, or in flight), confirmed (a ReadIndex of its own), failed (no leader confirmed one in time: an older kept time, or none).",
	}, []string{"outcome"})
)

func init() {
	prometheus.MustRegister(retriesTotal, refreshesTotal, syncIndexTotal)
}
