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
)

func init() {
	prometheus.MustRegister(retriesTotal, refreshesTotal)
}
