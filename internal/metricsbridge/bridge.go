package metricsbridge

import (
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var once sync.Once

// InstallRaftSink makes raft's go-metrics land in the Prometheus default
// registry. Safe to call more than once (in-process clusters).
func InstallRaftSink() {
	once.Do(func() {
		sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Expiration: time.Minute, Registerer: prometheus.DefaultRegisterer})
		if err != nil {
			return
		}
		cfg := gometrics.DefaultConfig("tablestore")
		cfg.EnableHostname = false
		cfg.EnableRuntimeMetrics = false
		// Per-RPC timers of every group's replication and heartbeats cost
		// more than they tell (each linearizable read sends heartbeats);
		// the apply, commit, FSM, log store and election series remain.
		cfg.BlockedPrefixes = []string{
			"raft.replication.heartbeat", "raft.replication.appendEntries",
			"raft.rpc.appendEntries", "raft.net",
		}
		_, _ = gometrics.NewGlobal(cfg, sink)
	})
}

// Listener is the process's metrics listener; roles mount more pages on it
// (the master's dashboard).
type Listener struct {
	mux *http.ServeMux
}

// Handle mounts h at pattern; a nil Listener (metrics off) ignores it.
func (l *Listener) Handle(pattern string, h http.Handler) {
	if l != nil {
		l.mux.Handle(pattern, h)
	}
}

// Serve serves /metrics and /debug/pprof on addr until the process ends; an
// empty addr serves nothing and returns a nil Listener.
func Serve(addr string) (*Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err
		}
	}()
	return &Listener{mux: mux}, nil
}
