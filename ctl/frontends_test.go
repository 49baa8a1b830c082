package ctl

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// TestMergeFrontends: one record per front-end id over the masters'
// answers, its newest watch (a leader's on a tie), failed answers left
// out, sorted by id, how far behind the master's version.
func TestMergeFrontends(t *testing.T) {
	watch := func(id string, connected int64, sent uint64) *pb.WatchingFrontend {
		return &pb.WatchingFrontend{Frontend: &pb.FrontendInfo{Id: id}, ConnectedUnixNano: connected, MapVersionSent: sent}
	}
	answer := func(addr, self string, leader bool, version uint64, ws ...*pb.WatchingFrontend) frontendAnswer {
		return frontendAnswer{addr: addr, resp: &pb.ListFrontendsResponse{SelfId: self, Leader: leader, MapVersion: version, Frontends: ws}}
	}
	type row struct {
		id, master string
		behind     uint64
	}
	for _, tc := range []struct {
		name    string
		answers []frontendAnswer
		want    []row
	}{
		{"none", nil, []row{}},
		{"one master", []frontendAnswer{answer("a:1", "m1", true, 9, watch("fe2", 5, 9), watch("fe1", 5, 7))},
			[]row{{"fe1", "m1", 2}, {"fe2", "m1", 0}}},
		{"leader change: the newest watch", []frontendAnswer{
			answer("a:1", "m1", false, 40, watch("fe1", 5, 40)),
			answer("a:2", "m2", true, 3, watch("fe1", 8, 3)),
		}, []row{{"fe1", "m2", 0}}},
		{"tie: the leader's", []frontendAnswer{
			answer("a:1", "m1", false, 4, watch("fe1", 5, 4)),
			answer("a:2", "m2", true, 4, watch("fe1", 5, 4)),
		}, []row{{"fe1", "m2", 0}}},
		{"a master that failed", []frontendAnswer{
			{addr: "a:1", err: errors.New("down")},
			answer("a:2", "m2", true, 4, watch("fe1", 5, 4)),
		}, []row{{"fe1", "m2", 0}}},
		{"sent ahead of a restarted master's count", []frontendAnswer{answer("a:1", "m1", true, 2, watch("fe1", 5, 4))},
			[]row{{"fe1", "m1", 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := []row{}
			for _, f := range mergeFrontends(tc.answers) {
				got = append(got, row{f.ID, f.Master, f.MapVersionsBehind})
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("merged %v, want %v", got, tc.want)
			}
		})
	}
}

// frontendsMaster is the fake master answering ListFrontends too.
type frontendsMaster struct {
	*fakeMaster
	resp *pb.ListFrontendsResponse
	err  error
}

func (f *frontendsMaster) ListFrontends(context.Context, *pb.ListFrontendsRequest) (*pb.ListFrontendsResponse, error) {
	return f.resp, f.err
}

func startFrontendsMaster(t *testing.T, f *frontendsMaster) string {
	t.Helper()
	return serveMaster(t, f)
}

// TestFrontendsCommand: the front-ends of every master that answered, a
// note for one that did not (human output), and an error only when none
// answered.
func TestFrontendsCommand(t *testing.T) {
	connected := testNow.Add(-90 * time.Second).UnixNano()
	leader := startFrontendsMaster(t, &frontendsMaster{fakeMaster: &fakeMaster{}, resp: &pb.ListFrontendsResponse{
		SelfId: "m1", Leader: true, MapVersion: 12, Frontends: []*pb.WatchingFrontend{
			{Frontend: &pb.FrontendInfo{Id: "fe-b", HttpAddrs: []string{"10.0.0.6:10002"}, Version: "tablestore v1"}, ConnectedUnixNano: connected, MapVersionSent: 9},
			{Frontend: &pb.FrontendInfo{Id: "fe-a", HttpAddrs: []string{"10.0.0.5:10002"}, MetricsAddr: "10.0.0.5:9090", Version: "tablestore v1"}, ConnectedUnixNano: connected, MapVersionSent: 12},
		}}})
	down := deadAddr(t)
	out, stderr, err := runCtl(t, context.Background(), "--master", leader+","+down, "--timeout", "2s", "frontends")
	if err != nil {
		t.Fatalf("frontends: %v (%s)", err, stderr)
	}
	want := `FRONTEND  HTTP ADDR       METRICS ADDR   VERSION        MAP SENT  BEHIND  CONNECTED  MASTER
fe-a      10.0.0.5:10002  10.0.0.5:9090  tablestore v1        12  0       1m30s ago  m1 (leader)
fe-b      10.0.0.6:10002  -              tablestore v1         9  3       1m30s ago  m1 (leader)
`
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "\nno answer from "+down+": ") {
		t.Errorf("output:\n%s\nwant:\n%s followed by a note on %s", out, want, down)
	}
	out, _, err = runCtl(t, context.Background(), "--master", leader+","+down, "--timeout", "2s", "--json", "frontends")
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"id":"fe-a"`) || !strings.Contains(out, `"map_versions_behind":3`) {
		t.Errorf("--json: %v\n%s", err, out)
	}
	older := startFake(t, &fakeMaster{})
	if _, _, err := runCtl(t, context.Background(), "--master", older+","+down, "--timeout", "2s", "frontends"); err == nil ||
		!strings.HasPrefix(err.Error(), "ctl: frontends: the master does not implement frontends") || !strings.Contains(err.Error(), "no answer from "+down) {
		t.Errorf("no master answered: %v, want an error naming the older master's answer", err)
	}
}

// TestDebugZipAsksFrontends: the front-ends the masters list are asked
// like partition servers: their pages scrubbed into frontends/<id>/, a
// listener that is not host:port not asked, a redirect not followed, and
// an --http-addrs naming a listener already known asked once.
func TestDebugZipAsksFrontends(t *testing.T) {
	live := fakeProcess(t)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+live+"/metrics", http.StatusFound)
	}))
	t.Cleanup(redirector.Close)
	pm := sampleMap()
	pm.Accounts = []*pb.StorageAccount{{Name: "acct", Keys: [][]byte{testKey}}}
	addr := startFrontendsMaster(t, &frontendsMaster{fakeMaster: &fakeMaster{pm: pm, events: sampleEvents()}, resp: &pb.ListFrontendsResponse{
		SelfId: "m1", Leader: true, Frontends: []*pb.WatchingFrontend{
			{Frontend: &pb.FrontendInfo{Id: "fe-live", MetricsAddr: live, PprofAddr: live}, PeerAddr: "127.0.0.1:50000"},
			{Frontend: &pb.FrontendInfo{Id: "fe-path", MetricsAddr: live + "/private?"}, PeerAddr: "127.0.0.1:50001"},
			{Frontend: &pb.FrontendInfo{Id: "fe-redirect", MetricsAddr: strings.TrimPrefix(redirector.URL, "http://")}, PeerAddr: "127.0.0.1:50002"},
		}}})
	path := filepath.Join(t.TempDir(), "out.zip")
	if _, stderr, err := runCtl(t, context.Background(), "--master", addr, "--timeout", "5s", "debug", "zip", path,
		"--http-addrs", live, "--request-timeout", "2s"); err != nil {
		t.Fatalf("debug zip: %v (%s)", err, stderr)
	}
	files := readZip(t, path)
	m := zipManifest(t, files)
	body := files["debug/frontends/fe-live/metrics.txt"]
	if !strings.Contains(body, "tablestore_partitionserver_replicas") || strings.Contains(body, base64.StdEncoding.EncodeToString(testKey)) ||
		files["debug/frontends/fe-live/goroutines.txt"] == "" {
		t.Errorf("fe-live: metrics %q, goroutines %d bytes", body, len(files["debug/frontends/fe-live/goroutines.txt"]))
	}
	if !strings.Contains(files["debug/cluster/frontends.json"], `"id":"fe-live"`) {
		t.Errorf("cluster/frontends.json:\n%s", files["debug/cluster/frontends.json"])
	}
	for name := range files {
		if strings.HasPrefix(name, "debug/frontends/fe-path/") || strings.HasPrefix(name, "debug/http/") ||
			(strings.HasPrefix(name, "debug/frontends/fe-redirect/") && strings.Contains(files[name], "tablestore_")) {
			t.Errorf("%s collected", name)
		}
	}
	sources := map[string]string{}
	for _, p := range m.Processes {
		sources[p.Dir] = p.Source
	}
	if sources["frontends/fe-live"] != "ListFrontends at "+addr || len(m.Processes) != 7 {
		t.Errorf("processes %+v: want four servers and three front-ends (the fake master names no listener of its own), --http-addrs asked once", m.Processes)
	}
}
