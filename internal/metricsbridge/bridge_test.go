package metricsbridge

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRoleFamilies(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, name := range []string{
		"tablestore_frontend_requests_total",
		"tablestore_router_retries_total",
		"tablestore_partitionserver_requests_total",
		"tablestore_raftlog_records_total",
		"tablestore_raft_apply_total",
		"tablestore_master_is_leader",
		"go_threads_total",
		"tablestore_future_thing_total", // a subsystem no role claims
	} {
		reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "h"}))
	}
	tests := []struct {
		role string
		want []string
	}{
		{"frontend", []string{"go_threads_total", "tablestore_frontend_requests_total", "tablestore_future_thing_total", "tablestore_router_retries_total"}},
		{"partitionserver", []string{"go_threads_total", "tablestore_future_thing_total", "tablestore_partitionserver_requests_total", "tablestore_raft_apply_total", "tablestore_raftlog_records_total"}},
		{"master", []string{"go_threads_total", "tablestore_future_thing_total", "tablestore_master_is_leader", "tablestore_raft_apply_total"}},
	}
	for _, tt := range tests {
		t.Run(tt.role, func(t *testing.T) {
			mfs, err := roleFamilies(reg, RoleSubsystems[tt.role]).Gather()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, mf := range mfs {
				got = append(got, mf.GetName())
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("families:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

// TestServeFiltersByRole checks the served page, not only the gatherer:
// the default registry's families of another role are absent.
func TestServeFiltersByRole(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "tablestore_master_bridge_test_total", Help: "h"})
	prometheus.MustRegister(c)
	defer prometheus.Unregister(c)
	page := func(subsystems ...string) string {
		l, err := Serve("127.0.0.1:0", subsystems...)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + l.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	const fam = "tablestore_master_bridge_test_total"
	if p := page(RoleSubsystems["frontend"]...); strings.Contains(p, fam) || !strings.Contains(p, "go_goroutines") {
		t.Errorf("a front-end's page lists %s or misses go_goroutines:\n%.300s", fam, p)
	}
	if p := page(RoleSubsystems["master"]...); !strings.Contains(p, fam) {
		t.Errorf("a master's page misses %s", fam)
	}
	if p := page(); !strings.Contains(p, fam) {
		t.Errorf("an unfiltered page (dev) misses %s", fam)
	}
}

func TestAdvertised(t *testing.T) {
	for _, tc := range []struct{ bound, peer, want string }{
		{"", "ps1.svc:7200", ""},                             // off
		{"[::]:9090", "ps1.svc:7200", "ps1.svc:9090"},        // every interface: the peer's host
		{"0.0.0.0:9090", "10.0.0.5:7100", "10.0.0.5:9090"},   // a master's Raft host
		{":9090", "[fd00::5]:7200", "[fd00::5]:9090"},        // IPv6 peer
		{"10.0.0.9:9090", "ps1.svc:7200", "10.0.0.9:9090"},   // a named host stays
		{"127.0.0.1:6060", "ps1.svc:7200", "127.0.0.1:6060"}, // loopback stays: ctl decides
		{"[::]:9090", "[::]:7200", "[::]:9090"},              // no better host known
		{"[::]:9090", "", "[::]:9090"},                       // nor here
		{"not an address", "ps1.svc:7200", "not an address"}, // unparsable: as it is
		{"localhost:9090", "ps1.svc:7200", "localhost:9090"},
	} {
		if got := Advertised(tc.bound, tc.peer); got != tc.want {
			t.Errorf("Advertised(%q, %q) = %q, want %q", tc.bound, tc.peer, got, tc.want)
		}
	}
}

func TestServeVersion(t *testing.T) {
	l, err := Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + l.Addr() + "/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), "tablestore ") {
		t.Errorf("/version: %s %q", resp.Status, b)
	}
}

// TestListenerAddr: host:port and nothing more (the addresses ctl debug
// zip fetches pages from, registered from heartbeats).
func TestListenerAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"ps1.svc:9090": true, "10.0.0.5:9090": true, "[::1]:6060": true, "[fe80::1]:1": true,
		"": false, ":9090": false, "ps1": false, "ps1:": false, "ps1:0": false, "ps1:65536": false, "ps1:09090": false,
		"ps1:http": false, "ps1:9090/private?": false, "host/x:9090": false, "u@host:9090": false,
		"host?x:9090": false, "host#x:9090": false, "[fe80::1%eth0]:9090": false, "a b:9090": false,
	} {
		if got := ListenerAddr(addr); got != want {
			t.Errorf("ListenerAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
