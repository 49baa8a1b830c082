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
)

func init() {
	prometheus.MustRegister(requestsTotal, requestSeconds)
}

func observe(op string, start time.Time, err error) {
	requestSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	code := "OK"
	if err != nil {
		code = rpcerr.Parse(err).Code.String()
	}
	requestsTotal.WithLabelValues(op, code).Inc()
}
