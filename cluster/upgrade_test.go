package cluster_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/logging"
	"tablestore/partitionserver/raftlog"
)

// TestLegacyRaftLogsImported runs a cluster, rewrites every partition
// server's data directory into the layout before the shared Raft log (a
// raft-boltdb file per range, no raftlog/), and restarts it: every entity
// must be readable and writable, and the legacy files must be gone.
func TestLegacyRaftLogsImported(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	opts := cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv(""), BasePort: clustertest.FreeBasePort(t), TuneMaster: clustertest.SoleMasterElects}
	c, err := cluster.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := clustertest.Context(t, 2*time.Minute)
	tc := clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), "legacy")
	for i := 0; i < 30; i++ {
		body, _ := json.Marshal(map[string]any{"PartitionKey": fmt.Sprintf("p%d", i%3), "RowKey": fmt.Sprint(i), "V": i})
		if _, err := tc.AddEntity(ctx, body, nil); err != nil {
			t.Fatal(err)
		}
	}
	var dirs []string
	for _, n := range c.Servers {
		dirs = append(dirs, n.Config.DataDir)
	}
	c.Close()
	legacy := 0
	for _, dir := range dirs {
		legacy += toLegacyLayout(t, dir)
	}
	if legacy == 0 {
		t.Fatal("no range logs to convert")
	}

	c2, err := cluster.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	tc2 := clustertest.ServiceClient(t, c2, 0).NewClient("legacy")
	for i := 0; i < 30; i++ {
		if _, err := tc2.GetEntity(ctx, fmt.Sprintf("p%d", i%3), fmt.Sprint(i), nil); err != nil {
			t.Fatalf("entity %d after the upgrade: %v", i, err)
		}
	}
	body, _ := json.Marshal(map[string]any{"PartitionKey": "p0", "RowKey": "after"})
	if _, err := tc2.AddEntity(ctx, body, nil); err != nil {
		t.Fatalf("write after the upgrade: %v", err)
	}
	for _, dir := range dirs {
		old, _ := filepath.Glob(filepath.Join(dir, "ranges", "*", "raft.db"))
		if len(old) > 0 {
			t.Errorf("legacy logs left after the import: %v", old)
		}
	}
}

// toLegacyLayout moves every group of a server's shared log into a
// raft-boltdb file per range and deletes the shared log; it returns how
// many ranges it converted.
func toLegacyLayout(t *testing.T, dataDir string) int {
	t.Helper()
	shared, err := raftlog.Open(filepath.Join(dataDir, "raftlog"), raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	groups := shared.Groups()
	for _, id := range groups {
		src := shared.Log(id)
		path := filepath.Join(dataDir, "ranges", fmt.Sprint(id), "raft.db")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		dst, err := raftboltdb.NewBoltStore(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"CurrentTerm", "LastVoteTerm", "LastVoteCand"} {
			if v, err := src.Get([]byte(k)); err == nil {
				dst.Set([]byte(k), v)
			}
		}
		first, _ := src.FirstIndex()
		last, _ := src.LastIndex()
		for i := first; first > 0 && i <= last; i++ {
			var e raft.Log
			if err := src.GetLog(i, &e); err != nil {
				t.Fatal(err)
			}
			if err := dst.StoreLog(&e); err != nil {
				t.Fatal(err)
			}
		}
		dst.Close()
	}
	shared.Close()
	if err := os.RemoveAll(filepath.Join(dataDir, "raftlog")); err != nil {
		t.Fatal(err)
	}
	return len(groups)
}
