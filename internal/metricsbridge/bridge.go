package metricsbridge

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var once sync.Once

// InstallRaftSink makes hashicorp/raft's go-metrics land in the Prometheus
// default registry as the fixed tablestore_raft_* families (see
// raftFamilies). Safe to call more than once (in-process clusters).
func InstallRaftSink() {
	once.Do(func() {
		sink, err := newRaftSink(prometheus.DefaultRegisterer)
		if err != nil {
			slog.Error("raft metrics off", "err", err)
			return
		}
		cfg := gometrics.DefaultConfig("")
		cfg.EnableHostname = false
		cfg.EnableRuntimeMetrics = false
		// No prefix filter: go-metrics would join every key and walk a
		// radix tree per report; the sink drops the keys it does not map
		// (raft's per-RPC heartbeat and network timers among them) with
		// one map lookup.
		_, _ = gometrics.NewGlobal(cfg, sink)
	})
}

// Listener is the process's metrics listener; roles mount more pages on it
// (the master's dashboard, /healthz and /readyz).
type Listener struct {
	mux  *http.ServeMux
	addr string
}

// Handle mounts h at pattern; a nil Listener (metrics off) ignores it.
func (l *Listener) Handle(pattern string, h http.Handler) {
	if l != nil {
		l.mux.Handle(pattern, h)
	}
}

// Addr is the address the listener is bound to ("" when off).
func (l *Listener) Addr() string {
	if l == nil {
		return ""
	}
	return l.addr
}

// Serve serves /metrics on addr until the process ends; an empty addr
// serves nothing and returns a nil Listener.
func Serve(addr string) (*Listener, error) {
	if addr == "" {
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	bound, err := serveMux(addr, mux)
	if err != nil {
		return nil, err
	}
	return &Listener{mux: mux, addr: bound}, nil
}

// ServePprof serves /debug/pprof on its own listener (opt-in: profiles and
// traces expose internals and cost CPU, so they never share the metrics
// port that Prometheus and probes reach); an empty addr serves nothing.
func ServePprof(addr string) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	_, err := serveMux(addr, mux)
	return err
}

func serveMux(addr string, mux *http.ServeMux) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		// Serve only returns when the process exits or the listener fails;
		// there is no one to report to but the log.
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics listener stopped", "addr", addr, "err", err)
		}
	}()
	return ln.Addr().String(), nil
}
