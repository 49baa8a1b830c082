package router

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// identityMaster records who each watch says it is and keeps it open.
type identityMaster struct {
	pb.UnimplementedMasterServiceServer
	mu      sync.Mutex
	watches []*pb.FrontendInfo
}

func (f *identityMaster) GetPartitionMap(context.Context, *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	return &pb.PartitionMap{Epoch: 1, Version: 1}, nil
}

func (f *identityMaster) WatchPartitionMap(req *pb.WatchPartitionMapRequest, stream pb.MasterService_WatchPartitionMapServer) error {
	f.mu.Lock()
	f.watches = append(f.watches, req.GetFrontend())
	f.mu.Unlock()
	if err := stream.Send(&pb.PartitionMap{Epoch: 1, Version: 1}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (f *identityMaster) seen() []*pb.FrontendInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pb.FrontendInfo(nil), f.watches...)
}

// TestWatchCarriesIdentity: a watch opened before the front-end knows its
// addresses starts over at once to tell the master who it is (under the
// router's id, the same on every watch), without counting the map as
// lost; the same identity again opens no new watch.
func TestWatchCarriesIdentity(t *testing.T) {
	fm := &identityMaster{}
	r := startedWithMaster(t, fm, time.Minute)
	waitFor := func(what string, f func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !f() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (watches %v)", what, fm.seen())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("the first watch", func() bool { return len(fm.seen()) == 1 && r.watch.watching.Load() })
	if fm.seen()[0] != nil {
		t.Fatalf("a watch before SetIdentity carried %v", fm.seen()[0])
	}
	if !strings.Contains(r.ID(), "-") {
		t.Errorf("id %q, want host-random", r.ID())
	}
	info := &pb.FrontendInfo{HttpAddrs: []string{"127.0.0.1:10002"}, MetricsAddr: "127.0.0.1:9091", Version: "v", StartUnixNano: 7}
	began := time.Now()
	r.SetIdentity(info)
	waitFor("a watch with the identity", func() bool { return len(fm.seen()) == 2 })
	if took := time.Since(began); took > time.Second {
		t.Errorf("the watch took %v to start over", took)
	}
	want := proto.Clone(info).(*pb.FrontendInfo)
	want.Id = r.ID()
	if got := fm.seen()[1]; !proto.Equal(got, want) {
		t.Errorf("the watch carried %v, want %v", got, want)
	}
	if stale := r.MapStaleFor(); stale != 0 {
		t.Errorf("the map counts as stale for %v after the watch started over for the identity", stale)
	}
	r.SetIdentity(info)
	time.Sleep(200 * time.Millisecond) // nothing should happen: no condition to poll for
	if n := len(fm.seen()); n != 2 {
		t.Errorf("%d watches after setting the same identity again, want 2", n)
	}
}
