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
	reshapeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "reshape_seconds",
		Help:    "Time a split, freeze, merge, replica change or leader transfer took on the range leader.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	}, []string{"op"})
	rangeEntitiesPerSec = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "range_entities_per_second",
		Help: "Entities read and written per second on ranges this server leads.",
	}, []string{"range", "table"})
)

func init() {
	prometheus.MustRegister(requestsTotal, requestSeconds, throttledTotal, reshapeSeconds, rangeEntitiesPerSec)
}

func observe(op string, start time.Time, err error) {
	requestSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	code := "OK"
	if err != nil {
		code = rpcerr.Parse(err).Code.String()
	}
	requestsTotal.WithLabelValues(op, code).Inc()
}
