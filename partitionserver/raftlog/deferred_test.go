package raftlog

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// TestDeferredBootstrap: raft.BootstrapCluster through Deferred leaves the
// same durable state as against the log itself (a reopened store finds the
// current term and the configuration entry) with one fsync instead of two.
func TestDeferredBootstrap(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	l := s.Log(7)
	conf := raft.DefaultConfig()
	conf.LocalID = "a"
	_, trans := raft.NewInmemTransport("a")
	snaps := raft.NewInmemSnapshotStore()
	voters := raft.Configuration{Servers: []raft.Server{{ID: "a", Address: "a"}, {ID: "b", Address: "b"}, {ID: "c", Address: "c"}}}
	before := s.Stats().Syncs
	err := l.Deferred(func(logs raft.LogStore, stable raft.StableStore) error {
		return raft.BootstrapCluster(conf, logs, stable, snaps, trans, voters)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Syncs - before; n != 1 {
		t.Errorf("bootstrap took %d fsyncs, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, Options{})
	defer s.Close()
	l = s.Log(7)
	if has, err := raft.HasExistingState(l, l, snaps); err != nil || !has {
		t.Fatalf("after a reopen: existing state %v, %v", has, err)
	}
	if term, err := l.GetUint64([]byte("CurrentTerm")); err != nil || term != 1 {
		t.Errorf("current term %d, %v; want 1", term, err)
	}
	var e raft.Log
	if err := l.GetLog(1, &e); err != nil {
		t.Fatal(err)
	}
	if e.Type != raft.LogConfiguration || e.Term != 1 {
		t.Fatalf("entry 1: type %v term %d, want the configuration in term 1", e.Type, e.Term)
	}
	if got := raft.DecodeConfiguration(e.Data); len(got.Servers) != 3 {
		t.Errorf("configuration %v, want the three voters", got)
	}
	// A second bootstrap finds the state and writes nothing.
	before = s.Stats().Syncs
	err = l.Deferred(func(logs raft.LogStore, stable raft.StableStore) error {
		return raft.BootstrapCluster(conf, logs, stable, snaps, trans, voters)
	})
	if !errors.Is(err, raft.ErrCantBootstrap) {
		t.Errorf("second bootstrap: %v, want ErrCantBootstrap", err)
	}
	if n := s.Stats().Syncs - before; n != 0 {
		t.Errorf("second bootstrap took %d fsyncs, want 0", n)
	}
}

// TestDeferredRefusals: what a deferred sequence holds back is written only
// when the whole sequence succeeded, and the view refuses what it cannot
// do faithfully.
func TestDeferredRefusals(t *testing.T) {
	errStop := errors.New("stop")
	tests := []struct {
		name string
		fn   func(logs raft.LogStore, stable raft.StableStore) error
		want error // nil: any error
	}{
		{name: "an error writes nothing", want: errStop, fn: func(logs raft.LogStore, stable raft.StableStore) error {
			if err := stable.SetUint64([]byte("k"), 1); err != nil {
				return err
			}
			if err := logs.StoreLog(entry(4, 1, "x")); err != nil {
				return err
			}
			return errStop
		}},
		{name: "a read after a held-back write", want: ErrReadAfterDeferredWrite, fn: func(logs raft.LogStore, stable raft.StableStore) error {
			if err := stable.Set([]byte("k"), []byte("v")); err != nil {
				return err
			}
			_, err := stable.Get([]byte("k"))
			return err
		}},
		{name: "an append that does not continue the log", fn: func(logs raft.LogStore, stable raft.StableStore) error {
			return logs.StoreLogs([]*raft.Log{entry(5, 1, "gap")})
		}},
		{name: "a delete", fn: func(logs raft.LogStore, stable raft.StableStore) error {
			return logs.DeleteRange(1, 3)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, t.TempDir(), Options{})
			defer s.Close()
			l := s.Log(1)
			if err := l.StoreLogs([]*raft.Log{entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 1, "c")}); err != nil {
				t.Fatal(err)
			}
			before := s.Stats().Syncs
			err := l.Deferred(tc.fn)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Deferred: %v, want %v", err, tc.want)
			}
			if n := s.Stats().Syncs - before; n != 0 {
				t.Errorf("%d fsyncs after a failed sequence, want 0", n)
			}
			if _, err := l.Get([]byte("k")); !errors.Is(err, ErrKeyNotFound) {
				t.Errorf("key of the failed sequence: %v, want not found", err)
			}
			if last, _ := l.LastIndex(); last != 3 {
				t.Errorf("last index %d after a failed sequence, want 3", last)
			}
		})
	}
}
