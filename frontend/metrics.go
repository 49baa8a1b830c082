package frontend

import (
	"net/http"
	"strconv"
	"sync"
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
		m := methodSlot(r.Method)
		requestObserver(m).Observe(time.Since(start).Seconds())
		requestCounter(m, code).Inc()
	})
}

// countedMethods are the method labels; any other method is "other".
var countedMethods = [...]string{"other", http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions, "MERGE", http.MethodHead}

func methodSlot(method string) int {
	for i := 1; i < len(countedMethods); i++ {
		if countedMethods[i] == method {
			return i
		}
	}
	return 0
}

// The series of requestSeconds and requestsTotal, looked up once each:
// WithLabelValues hashes its labels and takes the vector's lock, and the
// code's label was a string allocated per request. Series are still
// created on first use, so /metrics lists only those seen.
var (
	requestObservers sync.Map // method slot → prometheus.Observer
	requestCounters  sync.Map // counterKey → prometheus.Counter
)

type counterKey struct{ method, code int }

func requestObserver(method int) prometheus.Observer {
	if o, ok := requestObservers.Load(method); ok {
		return o.(prometheus.Observer)
	}
	o, _ := requestObservers.LoadOrStore(method, requestSeconds.WithLabelValues(countedMethods[method]))
	return o.(prometheus.Observer)
}

func requestCounter(method, code int) prometheus.Counter {
	k := counterKey{method, code}
	if c, ok := requestCounters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c, _ := requestCounters.LoadOrStore(k, requestsTotal.WithLabelValues(countedMethods[method], strconv.Itoa(code)))
	return c.(prometheus.Counter)
}
