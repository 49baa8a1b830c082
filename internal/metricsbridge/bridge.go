package metricsbridge

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"tablestore/internal/buildinfo"
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
// serves nothing and returns a nil Listener. With subsystems given, the
// tablestore families of the other roles' subsystems are left out (see
// roleFamilies); with none, every family is served (dev, tests).
func Serve(addr string, subsystems ...string) (*Listener, error) {
	if addr == "" {
		return nil, nil
	}
	mux := http.NewServeMux()
	var g prometheus.Gatherer = prometheus.DefaultGatherer
	if len(subsystems) > 0 {
		g = roleFamilies(g, subsystems)
	}
	// promhttp.Handler's own instrumentation (promhttp_metric_handler_*)
	// is kept: it is registered in the default registry it gathers.
	mux.Handle("/metrics", promhttp.InstrumentMetricHandler(prometheus.DefaultRegisterer, promhttp.HandlerFor(g, promhttp.HandlerOpts{})))
	// The build, for `tablestore ctl debug zip` and a curl: which binary
	// answers here.
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, buildinfo.Line()+"\n")
	})
	bound, err := serveMux(addr, mux)
	if err != nil {
		return nil, err
	}
	return &Listener{mux: mux, addr: bound}, nil
}

// RoleSubsystems are the tablestore_<subsystem>_ prefixes that belong to
// one role. Every role's package registers its families at init, and one
// binary links them all: without this filter a front-end's /metrics listed
// every partition-server and master family at zero, and a histogram
// family of another role added empty buckets to every scrape.
var RoleSubsystems = map[string][]string{
	"master":          {"master", "raft"},
	"partitionserver": {"partitionserver", "raftlog", "raft"},
	"frontend":        {"frontend", "router"},
}

// roleFamilies gathers from g and drops the tablestore families of a
// role subsystem not in keep; other families (go_, process_, promhttp_)
// pass.
func roleFamilies(g prometheus.Gatherer, keep []string) prometheus.Gatherer {
	owned := map[string]bool{}
	for _, subs := range RoleSubsystems {
		for _, s := range subs {
			owned[s] = true
		}
	}
	kept := map[string]bool{}
	for _, s := range keep {
		kept[s] = true
	}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			if sub, ok := subsystem(mf.GetName()); ok && owned[sub] && !kept[sub] {
				continue
			}
			out = append(out, mf)
		}
		return out, err
	})
}

// subsystem is the <subsystem> of a tablestore_<subsystem>_<name> family.
func subsystem(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "tablestore_")
	if !ok {
		return "", false
	}
	sub, _, ok := strings.Cut(rest, "_")
	return sub, ok
}

// ServePprof serves /debug/pprof on its own listener (opt-in: profiles and
// traces expose internals and cost CPU, so they never share the metrics
// port that Prometheus and probes reach) and returns the address it is
// bound to; an empty addr serves nothing and returns "".
func ServePprof(addr string) (string, error) {
	if addr == "" {
		return "", nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return serveMux(addr, mux)
}

// ListenerAddr reports whether addr is a listener's address and nothing
// more: a host (a name or an IP, without path, query, user, fragment or
// escape characters) and a numeric port. The master registers partition
// servers' metrics and pprof addresses from their heartbeats and ctl
// debug zip fetches pages from them: an address carrying a path would
// have ctl fetch another page of that host into a bug report. Pure.
func ListenerAddr(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || strings.ContainsAny(host, "/?#@%\\ ") {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536 && strconv.Itoa(n) == port
}

// Advertised is the address others dial for a listener bound to bound: its
// host when it names one, else (bound to every interface: "", 0.0.0.0,
// ::) the host of peer, an address of the same process others already
// dial (a partition server's advertised gRPC address, a master's Raft
// address), with bound's port. "" stays "" (the listener is off); an
// unparsable address is returned as it is. Pure.
func Advertised(bound, peer string) string {
	host, port, err := net.SplitHostPort(bound)
	if err != nil || bound == "" {
		return bound
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return bound
	}
	phost, _, err := net.SplitHostPort(peer)
	if err != nil || phost == "" {
		return bound
	}
	if ip := net.ParseIP(phost); ip != nil && ip.IsUnspecified() {
		return bound
	}
	return net.JoinHostPort(phost, port)
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
