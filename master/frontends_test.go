package master

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"tablestore/internal/masterclient"
	pb "tablestore/proto/tablestorepb"
)

// TestWatchRegistersFrontend: a watch that says who its front-end is is
// listed by ListFrontends while it is open, with the map version sent to
// it and its listeners advertised with the host it came from; closing it
// unregisters it; a watch without an identity (an older front-end) is
// served the map and listed nowhere.
func TestWatchRegistersFrontend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	s := leadingMaster(t, nil)
	mc, err := masterclient.New([]string{s.cfg.GRPCAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	_, conns := mc.Each()
	client := pb.NewMasterServiceClient(conns[0])
	list := func() *pb.ListFrontendsResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.ListFrontends(ctx, &pb.ListFrontendsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	watch := func(ctx context.Context, info *pb.FrontendInfo) {
		t.Helper()
		stream, err := client.WatchPartitionMap(ctx, &pb.WatchPartitionMapRequest{Deltas: true, Frontend: info})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := stream.Recv(); err != nil || m.GetDelta() {
			t.Fatalf("first message of the watch: %v, %v; want the whole map", m, err)
		}
	}

	old, cancelOld := context.WithCancel(context.Background())
	defer cancelOld()
	watch(old, nil)
	if n := len(list().GetFrontends()); n != 0 {
		t.Fatalf("%d front-ends listed for a watch without an identity", n)
	}

	info := &pb.FrontendInfo{Id: "fe-test-1", HttpAddrs: []string{"0.0.0.0:10002"}, MetricsAddr: "[::]:9091",
		PprofAddr: "127.0.0.1:6060/x?", Version: "tablestore test", StartUnixNano: 42}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch(ctx, info)
	// The first message can reach the watch before the master records its
	// send: the listing is read once it has.
	waitUntil(t, 10*time.Second, "the first send recorded", func() bool {
		fs := list().GetFrontends()
		return len(fs) == 1 && fs[0].GetLastSendUnixNano() != 0
	})
	resp := list()
	if len(resp.GetFrontends()) != 1 || resp.GetSelfId() != "m1" || !resp.GetLeader() || resp.GetMapEpoch() == 0 {
		t.Fatalf("ListFrontends %v: want the one front-end from m1, the leader", resp)
	}
	f := resp.GetFrontends()[0]
	want := &pb.FrontendInfo{Id: "fe-test-1", HttpAddrs: []string{"127.0.0.1:10002"}, MetricsAddr: "127.0.0.1:9091",
		Version: "tablestore test", StartUnixNano: 42}
	if !proto.Equal(f.GetFrontend(), want) {
		t.Errorf("listed %v, want %v (unspecified hosts advertised as the peer's, a pprof address with a path dropped)", f.GetFrontend(), want)
	}
	if f.GetMapVersionSent() > resp.GetMapVersion() || f.GetConnectedUnixNano() == 0 || f.GetLastSendUnixNano() == 0 {
		t.Errorf("version sent %d (map %d), connected %d, last send %d", f.GetMapVersionSent(), resp.GetMapVersion(), f.GetConnectedUnixNano(), f.GetLastSendUnixNano())
	}
	// A change reaches the watch, and the version sent follows it.
	s.bump()
	waitUntil(t, 10*time.Second, "the change's version to be sent", func() bool {
		r := list()
		return len(r.GetFrontends()) == 1 && r.GetMapVersion() > 0 && r.GetFrontends()[0].GetMapVersionSent() == r.GetMapVersion()
	})

	cancel()
	waitUntil(t, 10*time.Second, "the closed watch to be unlisted", func() bool { return len(list().GetFrontends()) == 0 })
}

// TestCheckedFrontend: what a front-end registers is bounded and its
// listeners are host:port only.
func TestCheckedFrontend(t *testing.T) {
	long := string(make([]byte, maxFrontendIDLen+1))
	for _, tc := range []struct {
		name string
		in   *pb.FrontendInfo
		want *pb.FrontendInfo
	}{
		{"none", nil, nil},
		{"no id", &pb.FrontendInfo{MetricsAddr: "10.0.0.1:9090"}, nil},
		{"id too long", &pb.FrontendInfo{Id: long}, nil},
		{"kept", &pb.FrontendInfo{Id: "a", HttpAddrs: []string{"10.0.0.5:10002"}, MetricsAddr: "10.0.0.5:9090", PprofAddr: "127.0.0.1:6060"},
			&pb.FrontendInfo{Id: "a", HttpAddrs: []string{"10.0.0.5:10002"}, MetricsAddr: "10.0.0.5:9090", PprofAddr: "127.0.0.1:6060"}},
		{"advertised", &pb.FrontendInfo{Id: "a", HttpAddrs: []string{":10002"}, MetricsAddr: "0.0.0.0:9090"},
			&pb.FrontendInfo{Id: "a", HttpAddrs: []string{"10.1.2.3:10002"}, MetricsAddr: "10.1.2.3:9090"}},
		{"not host:port", &pb.FrontendInfo{Id: "a", HttpAddrs: []string{"x", "h:1/p"}, MetricsAddr: "h:1/metrics?", PprofAddr: "h"},
			&pb.FrontendInfo{Id: "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkedFrontend(tc.in, "10.1.2.3:40000")
			if !proto.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("checkedFrontend(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}
