package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/internal/logging"
)

// TestSecondaryReadsFromFollowers checks the read-access secondary on a
// cluster of its own: with every partition server's Raft traffic cut there
// is no leader, so primary reads cannot be served, yet the secondary still
// answers from the replicas' applied state, and its stats report a
// LastSyncTime from before the cut.
func TestSecondaryReadsFromFollowers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of its own")
	}
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv("")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	primary, err := aztables.NewServiceClientWithSharedKey(c.Endpoint(0), cred, clientOptions())
	if err != nil {
		t.Fatal(err)
	}
	secondary, err := aztables.NewServiceClientWithSharedKey(c.Endpoint(0)+"-secondary", cred, clientOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := primary.CreateTable(ctx, "rags", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.NewClient("rags").AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r","V":1}`), nil); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	// Followers learn that the write committed with the leader's next
	// contact; LastSyncTime (whole seconds) passes the write soon after.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := secondary.GetStatistics(ctx, nil)
		if err == nil && st.GeoReplication.LastSyncTime != nil && *st.GeoReplication.Status == aztables.GeoReplicationStatusLive &&
			!st.GeoReplication.LastSyncTime.Before(written.Truncate(time.Second).Add(time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("secondary never in sync: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	cut := time.Now()
	for i := range c.Servers {
		c.IsolateServer(i, true)
	}
	defer func() {
		for i := range c.Servers {
			c.IsolateServer(i, false)
		}
	}()
	sc := secondary.NewClient("rags")
	start := time.Now()
	got, err := sc.GetEntity(ctx, "p", "r", nil)
	if err != nil {
		t.Fatalf("secondary read without a leader: %v", err)
	}
	if string(got.Value) == "" || time.Since(start) > 5*time.Second {
		t.Fatalf("secondary read took %v: %s", time.Since(start), got.Value)
	}
	ents, _ := listAll(t, sc, nil)
	if len(ents) != 1 {
		t.Fatalf("secondary query: %d entities", len(ents))
	}
	// No leader can confirm a commit index any more: LastSyncTime stays
	// at the last time one confirmed before the cut (or is unknown).
	deadline = time.Now().Add(10 * time.Second)
	for {
		st, err := secondary.GetStatistics(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		last := st.GeoReplication.LastSyncTime
		if last == nil || last.Before(cut.Add(time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LastSyncTime %v is after the cut at %v: staleness not reported", last, cut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Writes are refused there whatever the cluster's state.
	_, err = sc.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"w"}`), nil)
	wantCode(t, err, 403, "AuthorizationFailure")
}
