package loadgen

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/internal/logging"
	"tablestore/internal/masterclient"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// TestReportAgainstCluster runs load on a real cluster, splits the table
// by hand during the run, and checks the report has the split on its time
// axis with its cause, the range count going to two, and the servers' load.
func TestReportAgainstCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv(""),
		TuneMaster: func(m *master.Config) { m.Policy.Enabled = false }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Conn, cfg.Table, cfg.Duration, cfg.Workers, cfg.Partitions, cfg.EntitySize = c.ConnectionString(0), "lgreport", 3*time.Second, 4, 50, 256
	cfg.ReportInterval, cfg.Master = 500*time.Millisecond, strings.Join(c.MasterAddrs(), ",")
	cfg.Report = filepath.Join(dir, "run.json")

	mc, err := masterclient.New(c.MasterAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	splitErr := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		splitErr <- mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.Split(ctx, &pb.SplitRequest{Table: cfg.Table, PartitionKey: "p025"})
			return err
		})
	}()
	if _, err := Generate(context.Background(), cfg, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if err := <-splitErr; err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg.Report)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Intervals) < 4 || len(r.Cluster) < 4 || r.ClusterError != "" {
		t.Fatalf("%d intervals, %d cluster samples, cluster error %q", len(r.Intervals), len(r.Cluster), r.ClusterError)
	}
	if first, last := r.Cluster[0].Ranges, r.Cluster[len(r.Cluster)-1].Ranges; first != 1 || last != 2 {
		t.Errorf("ranges went %d -> %d, want 1 -> 2", first, last)
	}
	var split *ReportEvent
	for i, e := range r.Events {
		if e.Kind == "split" {
			split = &r.Events[i]
		}
	}
	if split == nil || split.Cause != "operator" || split.ElapsedSeconds < 0.5 || split.ElapsedSeconds > r.Summary.DurationSeconds+1 {
		t.Fatalf("split event %+v in %+v", split, r.Events)
	}
	loaded := false
	for _, s := range r.Cluster {
		for _, v := range s.ServerEntitiesPerSec {
			loaded = loaded || v > 0
		}
	}
	if !loaded {
		t.Errorf("no server load in %+v", r.Cluster)
	}
}
