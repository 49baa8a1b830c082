package master

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"tablestore/internal/masterclient"
	pb "tablestore/proto/tablestorepb"
)

func startPropsMaster(t *testing.T) (*Server, *service) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID = "m1"
	cfg.DataDir = t.TempDir()
	cfg.GRPCAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
	cfg.Policy.Enabled = false
	s := startMaster(t, cfg)
	t.Cleanup(func() { s.Close() })
	waitUntil(t, 10*time.Second, "leadership", s.IsLeader)
	return s, &service{s: s}
}

// TestServicePropertiesMapFitsFrontEnds (review): the master takes 100
// accounts' documents of up to 128 KiB each and sends all of them in every
// map and delta, but the front-ends' connection to the master
// (masterclient.New, as router.New dials it) has gRPC's default 4 MiB
// receive limit. 40 accounts with a 128 KiB document each (5 MiB, within
// the bounds checkServiceProperties enforces) leave every front-end
// without a map: WatchPartitionMap's first message is refused
// (ResourceExhausted), so no front-end can route, and new ones cannot
// start. One set of tenants' CORS documents takes down the cluster's
// routing.
func TestServicePropertiesMapFitsFrontEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	s, svc := startPropsMaster(t)
	doc := []byte(strings.Repeat("x", maxServicePropertiesDoc))
	for i := 0; i < 40; i++ {
		if _, err := svc.SetServiceProperties(context.Background(), &pb.SetServicePropertiesRequest{Account: fmt.Sprintf("acct%d", i), Properties: doc}); err != nil {
			t.Fatalf("account %d: %v", i, err)
		}
	}
	mc, err := masterclient.New([]string{s.cfg.GRPCAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	_, conns := mc.Each()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := pb.NewMasterServiceClient(conns[0]).WatchPartitionMap(ctx, &pb.WatchPartitionMapRequest{Deltas: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("a front-end's watch gets no map: %v", err)
	}
}

// TestServicePropertiesOfRemovedAccounts (review): a document is kept for
// an account after the registry no longer has it, and no front-end can
// clear one (Set Service Properties always stores a whole document, never
// an empty one). Once 100 accounts have ever set properties, an account
// the registry serves today can never set its own: the master refuses it
// with "service properties of more than 100 accounts".
func TestServicePropertiesOfRemovedAccounts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	_, svc := startPropsMaster(t)
	ctx := context.Background()
	for i := 0; i < maxAccounts; i++ {
		if _, err := svc.SetServiceProperties(ctx, &pb.SetServicePropertiesRequest{Account: fmt.Sprintf("old%d", i), Properties: []byte("<StorageServiceProperties/>")}); err != nil {
			t.Fatalf("account %d: %v", i, err)
		}
	}
	// The registry now serves one account, none of those.
	if _, err := svc.SetAccounts(ctx, &pb.SetAccountsRequest{Accounts: []*pb.StorageAccount{{Name: "fresh", Keys: [][]byte{[]byte("k")}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetServiceProperties(ctx, &pb.SetServicePropertiesRequest{Account: "fresh", Properties: []byte("<StorageServiceProperties/>")}); err != nil {
		t.Fatalf("the one account served cannot set its properties: %v", err)
	}
}
