package ctl

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/frontend"
	"tablestore/frontend/auth"
	"tablestore/internal/health"
	"tablestore/internal/logging"
	"tablestore/internal/masterclient"
	"tablestore/internal/metricsbridge"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// TestAgainstCluster runs ctl against the master of a real in-process
// cluster: the map it prints is the one the cluster serves.
func TestAgainstCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	// One Raft group per table: the checks count one range, its three
	// replicas and one leader (TestRangesMarkAnchors covers anchors).
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv(""),
		TuneMaster: func(m *master.Config) { m.TableGroups = false }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	masters := strings.Join(c.MasterAddrs(), ",")
	createTable(t, c, "ctltest")

	ctl := func(t *testing.T, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if err := RunContext(context.Background(), append([]string{"--master", masters, "--timeout", "10s"}, args...), &out, &errb); err != nil {
			t.Fatalf("ctl %v: %v (stderr %s)", args, err, errb.String())
		}
		return out.String()
	}
	decode := func(t *testing.T, out string, v any) {
		t.Helper()
		dec := json.NewDecoder(strings.NewReader(out))
		for dec.More() {
			if err := dec.Decode(v); err != nil {
				t.Fatalf("%v in %q", err, out)
			}
		}
	}

	t.Run("ranges", func(t *testing.T) {
		// The range's leader appears in the map with the next heartbeat.
		var r Range
		deadline := time.Now().Add(10 * time.Second)
		for r.Leader == "" {
			if time.Now().After(deadline) {
				t.Fatalf("no leader reported: %+v", r)
			}
			r = Range{}
			out := ctl(t, "ranges", "--table", "ctltest", "--json")
			if n := strings.Count(out, "\n"); n != 1 {
				t.Fatalf("%d ranges, want 1:\n%s", n, out)
			}
			decode(t, out, &r)
			time.Sleep(50 * time.Millisecond)
		}
		if r.Table != "ctltest" || r.Start != "" || r.End != "" || len(r.Replicas) != 3 || r.Generation == 0 || r.Group != r.RangeID {
			t.Errorf("range %+v", r)
		}
		human := ctl(t, "ranges")
		if !strings.HasPrefix(human, "RANGE  GROUP  SPANS  TABLE") || !strings.Contains(human, "ctltest") {
			t.Errorf("human ranges:\n%s", human)
		}
	})

	t.Run("servers", func(t *testing.T) {
		out := ctl(t, "servers", "--json")
		var ids []string
		replicas, leaders := 0, 0
		dec := json.NewDecoder(strings.NewReader(out))
		for dec.More() {
			var s Server
			if err := dec.Decode(&s); err != nil {
				t.Fatal(err)
			}
			if !s.Alive || s.LastHeartbeat == "" || s.GRPCAddr == "" {
				t.Errorf("server %+v", s)
			}
			ids = append(ids, s.ServerID)
			replicas += s.Replicas
			leaders += s.Leaders
		}
		if strings.Join(ids, ",") != "ps1,ps2,ps3" || replicas != 3 || leaders != 1 {
			t.Errorf("servers %v, %d replicas, %d leaders:\n%s", ids, replicas, leaders, out)
		}
		human := ctl(t, "servers")
		if !strings.HasPrefix(human, "SERVER  GRPC ADDR") || strings.Count(human, " yes ") != 3 {
			t.Errorf("human servers:\n%s", human)
		}
	})

	// The front-end is known to the master through its map watch.
	t.Run("frontends", func(t *testing.T) {
		fe := c.Frontends[0]
		f := waitFrontendListed(t, masters, fe.Router.ID())
		if len(f.HTTPAddrs) != 1 || f.HTTPAddrs[0] != fe.Addr || f.Master != "m1" || !f.MasterLeader || f.MasterAddr != masters ||
			!strings.HasPrefix(f.Version, "tablestore ") || f.Connected == "" || f.StartedUnixNano == 0 || f.MapVersionSent > f.MasterMapVersion {
			t.Errorf("front-end %+v, want http %s on m1, the leader", f, fe.Addr)
		}
		human := ctl(t, "frontends")
		if !strings.HasPrefix(human, "FRONTEND ") || !strings.Contains(human, " HTTP ADDR ") || !strings.Contains(human, fe.Router.ID()) || !strings.Contains(human, "m1 (leader)") {
			t.Errorf("human frontends:\n%s", human)
		}
	})

	t.Run("events", func(t *testing.T) {
		out := ctl(t, "events", "--json")
		if !strings.Contains(out, `"table":"ctltest"`) {
			t.Errorf("no event about the table:\n%s", out)
		}
	})

	// The operator path end to end: split at a key, see two ranges, merge
	// them back, see the events.
	t.Run("split and merge", func(t *testing.T) {
		var res Result
		decode(t, ctl(t, "split", "ctltest", "m", "--json"), &res)
		if res.Op != "split" || len(res.Ranges) != 2 || res.Ranges[0].End != "m" || res.Ranges[1].Start != "m" {
			t.Fatalf("split result %+v", res)
		}
		left := res.Ranges[0].RangeID
		// Again at the same key (an operator's retry): the same answer,
		// nothing split twice.
		var again Result
		decode(t, ctl(t, "split", "ctltest", "m", "--json"), &again)
		if len(again.Ranges) != 2 || again.Ranges[0].RangeID != left || again.Ranges[1].RangeID != res.Ranges[1].RangeID {
			t.Fatalf("split again at m = %+v, want %+v", again, res)
		}
		out := ctl(t, "ranges", "--table", "ctltest", "--json")
		if n := strings.Count(out, "\n"); n != 2 {
			t.Fatalf("%d ranges after the split, want 2:\n%s", n, out)
		}
		res = Result{}
		decode(t, ctl(t, "merge", strconv.FormatUint(left, 10), "--json"), &res)
		if res.Op != "merge" || len(res.Ranges) != 1 || res.Ranges[0].Start != "" || res.Ranges[0].End != "" {
			t.Fatalf("merge result %+v", res)
		}
		out = ctl(t, "ranges", "--table", "ctltest", "--json")
		if n := strings.Count(out, "\n"); n != 1 {
			t.Fatalf("%d ranges after the merge, want 1:\n%s", n, out)
		}
		// Events are appended to the log after the operation answers, so
		// poll for them.
		kinds := map[string]bool{}
		for deadline := time.Now().Add(15 * time.Second); ; {
			dec := json.NewDecoder(strings.NewReader(ctl(t, "events", "--json")))
			for dec.More() {
				var e Event
				if err := dec.Decode(&e); err != nil {
					t.Fatal(err)
				}
				if e.Table == "ctltest" {
					kinds[e.Kind] = true
				}
			}
			if kinds["split"] && kinds["merge"] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("event kinds for the table %v, want split and merge", kinds)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	// An in-group split's right half is a span of the left's group: the
	// group id the partition server records reaches ctl through the
	// master's map. Its own table: spans of one group do not merge yet.
	t.Run("split in group", func(t *testing.T) {
		createTable(t, c, "ctlgroup")
		var res Result
		decode(t, ctl(t, "split", "ctlgroup", "m", "--in-group", "--json"), &res)
		if len(res.Ranges) != 2 || res.Ranges[0].Group != res.Ranges[0].RangeID || res.Ranges[1].Group != res.Ranges[0].RangeID {
			t.Fatalf("split result %+v: want both halves in the left's group", res)
		}
		var rs []Range
		dec := json.NewDecoder(strings.NewReader(ctl(t, "ranges", "--table", "ctlgroup", "--json")))
		for dec.More() {
			var r Range
			if err := dec.Decode(&r); err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		if len(rs) != 2 || rs[0].Group != rs[0].RangeID || rs[1].Group != rs[0].RangeID || rs[1].RangeID == rs[0].RangeID {
			t.Fatalf("ranges %+v: want two, the right one in the left's group", rs)
		}
	})
}

// TestDebugZipAgainstCluster runs `debug zip` against a real in-process
// cluster whose roles serve metrics and pprof listeners as the binary
// does: the zip holds the master's view (the table's ranges), every
// registered process's pages found through the master (a partition server
// registers its addresses, a master names its own), the manifest with the
// unreachable --http-addrs recorded, and no account key.
func TestDebugZipAgainstCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	// One metrics and one pprof listener per role instance, as `tablestore
	// partitionserver --metrics-addr --pprof-addr` opens them (all serve
	// this process's registry and goroutines).
	listen := func(subsystems ...string) (metrics, pprof string) {
		t.Helper()
		l, err := metricsbridge.Serve("127.0.0.1:0", subsystems...)
		if err != nil {
			t.Fatal(err)
		}
		health.Mount(l, func() health.Verdict { return health.Verdict{} })
		p, err := metricsbridge.ServePprof("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l.Addr(), p
	}
	key := []byte("debug-zip-test-account-key-bytes")
	keyB64 := base64.StdEncoding.EncodeToString(key)
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv(""),
		TuneMaster: func(cfg *master.Config) {
			cfg.MetricsAddr, cfg.PprofAddr = listen(metricsbridge.RoleSubsystems["master"]...)
		},
		TuneServer: func(cfg *partitionserver.Config) {
			cfg.MetricsAddr, cfg.PprofAddr = listen(metricsbridge.RoleSubsystems["partitionserver"]...)
		},
		// The front-end publishes its accounts, keys included, in the
		// partition map ctl reads, and its listeners on its map watch.
		TuneFrontend: func(cfg *frontend.Config) {
			cfg.Accounts = "zipacct:" + keyB64
			cfg.MetricsAddr, cfg.PprofAddr = listen(metricsbridge.RoleSubsystems["frontend"]...)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	masters := strings.Join(c.MasterAddrs(), ",")
	createTable(t, c, "ziptest")
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if err := RunContext(context.Background(), append([]string{"--master", masters, "--timeout", "10s"}, args...), &out, &errb); err != nil {
			t.Fatalf("ctl %v: %v (stderr %s)", args, err, errb.String())
		}
		return out.String()
	}
	run("split", "ziptest", "m")
	feID := c.Frontends[0].Router.ID()
	waitFrontendListed(t, masters, feID)

	dead := deadAddr(t)
	path := filepath.Join(t.TempDir(), "debug.zip")
	run("debug", "zip", path, "--http-addrs", dead, "--request-timeout", "5s")
	files := readZip(t, path)
	m := zipManifest(t, files)

	var ranges []Range
	dec := json.NewDecoder(strings.NewReader(files["debug/cluster/ranges.json"]))
	for dec.More() {
		var r Range
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		if r.Table == "ziptest" {
			ranges = append(ranges, r)
		}
	}
	if len(ranges) != 2 || ranges[0].End != "m" || ranges[1].Start != "m" {
		t.Errorf("ranges.json lists the table's ranges %+v, want the two halves of the split", ranges)
	}
	for _, name := range []string{"debug/cluster/servers.json", "debug/cluster/events.json", "debug/cluster/masters.json", "debug/manifest.json"} {
		if files[name] == "" {
			t.Errorf("%s missing or empty", name)
		}
	}
	if !strings.Contains(files["debug/cluster/events.json"], `"table":"ziptest"`) {
		t.Errorf("events.json has no event of the table:\n%s", files["debug/cluster/events.json"])
	}
	for _, id := range []string{"ps1", "ps2", "ps3"} {
		dir := "debug/servers/" + id + "/"
		if !strings.Contains(files[dir+"metrics.txt"], "tablestore_partitionserver_") {
			t.Errorf("%smetrics.txt has no tablestore_partitionserver_ metrics (files %v)", dir, keysOfFiles(files))
		}
		if !strings.Contains(files[dir+"goroutines.txt"], "goroutine ") || files[dir+"readyz.txt"] != "ok\n" ||
			files[dir+"healthz.txt"] != "ok\n" || !strings.HasPrefix(files[dir+"version.txt"], "tablestore ") {
			t.Errorf("%s: goroutines %d bytes, readyz %q, healthz %q, version %q", dir, len(files[dir+"goroutines.txt"]),
				files[dir+"readyz.txt"], files[dir+"healthz.txt"], files[dir+"version.txt"])
		}
	}
	// The front-end, found through the master without --http-addrs.
	fdir := "debug/frontends/" + safeName(feID) + "/"
	if !strings.Contains(files[fdir+"metrics.txt"], "tablestore_router_map_refreshes_total") || !strings.Contains(files[fdir+"goroutines.txt"], "goroutine ") ||
		files[fdir+"readyz.txt"] != "ok\n" || !strings.HasPrefix(files[fdir+"version.txt"], "tablestore ") {
		t.Errorf("%s: metrics %d bytes, goroutines %d bytes, readyz %q, version %q (files %v)", fdir, len(files[fdir+"metrics.txt"]),
			len(files[fdir+"goroutines.txt"]), files[fdir+"readyz.txt"], files[fdir+"version.txt"], keysOfFiles(files))
	}
	if !strings.Contains(files["debug/cluster/frontends.json"], `"id":"`+feID+`"`) {
		t.Errorf("cluster/frontends.json does not list the front-end %s:\n%s", feID, files["debug/cluster/frontends.json"])
	}
	if !strings.Contains(files["debug/masters/m1/metrics.txt"], "tablestore_master_") || files["debug/masters/m1/goroutines.txt"] == "" {
		t.Errorf("master m1: metrics %d bytes, goroutines %d bytes", len(files["debug/masters/m1/metrics.txt"]), len(files["debug/masters/m1/goroutines.txt"]))
	}
	unreachable := false
	for _, e := range m.Errors {
		if strings.Contains(e.Source, dead) {
			unreachable = true
		} else {
			t.Errorf("unexpected error: %+v", e)
		}
	}
	if !unreachable {
		t.Errorf("the unreachable --http-addrs %s is not in the manifest's errors %+v", dead, m.Errors)
	}
	assertNoSecret(t, files, keyB64, auth.DevAccountKey)
}

// waitFrontendListed polls `ctl frontends --json` until the front-end id
// is listed (its watch tells the master once its listener is bound) and
// returns its record.
func waitFrontendListed(t *testing.T, masters, id string) Frontend {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var out, errb bytes.Buffer
		if err := RunContext(context.Background(), []string{"--master", masters, "--timeout", "10s", "frontends", "--json"}, &out, &errb); err != nil {
			t.Fatalf("ctl frontends: %v (stderr %s)", err, errb.String())
		}
		dec := json.NewDecoder(&out)
		for dec.More() {
			var f Frontend
			if err := dec.Decode(&f); err != nil {
				t.Fatal(err)
			}
			if f.ID == id {
				return f
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("front-end %s not listed by ctl frontends within 15 s", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createTable creates a table through the cluster's masters.
func createTable(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	mc, err := masterclient.New(c.MasterAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.CreateTable(ctx, &pb.CreateTableRequest{Name: name})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
