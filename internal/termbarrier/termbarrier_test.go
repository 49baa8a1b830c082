package termbarrier

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) interface{}         { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (nopFSM) Restore(io.ReadCloser) error         { return nil }

func singleNode(t *testing.T) *raft.Raft {
	t.Helper()
	cfg := raft.DefaultConfig()
	cfg.LocalID = "n1"
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	cfg.LogOutput = io.Discard
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	_, trans := raft.NewInmemTransport("n1")
	if err := raft.BootstrapCluster(cfg, store, store, snaps, trans, raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: trans.LocalAddr()}}}); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(cfg, nopFSM{}, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r
}

func TestEnsure(t *testing.T) {
	r := singleNode(t)
	g := &Gate{}
	steps := []struct {
		name      string
		prepare   func()
		wantFresh bool
		wantErr   bool
	}{
		{"first use of the term runs the barrier", func() {}, true, false},
		{"later uses in the same term are free", func() {}, false, false},
		{"a shut-down node is not ready", func() { r.Shutdown().Error(); g = &Gate{} }, false, true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.prepare()
			fresh, err := g.Ensure(r, time.Second)
			if fresh != s.wantFresh || (err != nil) != s.wantErr {
				t.Fatalf("Ensure = %v, %v; want fresh %v, error %v", fresh, err, s.wantFresh, s.wantErr)
			}
			if err != nil && !errors.Is(err, ErrNotReady) {
				t.Fatalf("error %v does not wrap ErrNotReady", err)
			}
		})
	}
}
