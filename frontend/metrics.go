package frontend

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "frontend", Name: "requests_total",
		Help: "Azure Table API requests answered, by HTTP method and status code.",
	}, []string{"method", "code"})
	requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "frontend", Name: "request_seconds",
		Help:    "Time to answer an Azure Table API request, by HTTP method.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"method"})
)

func init() {
	prometheus.MustRegister(requestsTotal, requestSeconds)
}

// statusRecorder remembers the status a handler answered with.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush passes flushes through (streamed responses).
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// instrument counts and times every request.
func instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		method := r.Method
		switch method {
		case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions, "MERGE", http.MethodHead:
		default:
			method = "other"
		}
		requestSeconds.WithLabelValues(method).Observe(time.Since(start).Seconds())
		requestsTotal.WithLabelValues(method, strconv.Itoa(code)).Inc()
	})
}
