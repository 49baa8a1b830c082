package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/internal/logging"
	"tablestore/internal/masterclient"
	pb "tablestore/proto/tablestorepb"
)

// TestAgainstCluster runs ctl against the master of a real in-process
// cluster: the map it prints is the one the cluster serves.
func TestAgainstCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv("")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	masters := strings.Join(c.MasterAddrs(), ",")

	mc, err := masterclient.New(c.MasterAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.CreateTable(ctx, &pb.CreateTableRequest{Name: "ctltest"})
		return err
	}); err != nil {
		t.Fatal(err)
	}

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
		if r.Table != "ctltest" || r.Start != "" || r.End != "" || len(r.Replicas) != 3 || r.Generation == 0 {
			t.Errorf("range %+v", r)
		}
		human := ctl(t, "ranges")
		if !strings.HasPrefix(human, "RANGE  TABLE") || !strings.Contains(human, "ctltest") {
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
}
