package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func entry(idx, term uint64, data string) *raft.Log {
	return &raft.Log{Index: idx, Term: term, Type: raft.LogCommand, Data: []byte(data), AppendedAt: time.Unix(0, int64(idx))}
}

func open(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// model is the expected content of one group.
type model struct {
	entries map[uint64]string
	kv      map[string]string
}

func (m *model) bounds() (uint64, uint64) {
	var lo, hi uint64
	for i := range m.entries {
		if lo == 0 || i < lo {
			lo = i
		}
		if i > hi {
			hi = i
		}
	}
	return lo, hi
}

func check(t *testing.T, s *Store, models map[uint64]*model) {
	t.Helper()
	if d := differs(s, models); d != "" {
		t.Fatal(d)
	}
}

// TestRandomOpsAcrossReopens runs random appends, suffix truncations,
// prefix compactions, stable-key writes and group drops over several groups
// with tiny segments (so segments rotate and are collected while a quiet
// group pins old ones), reopening now and then, against an in-memory model.
func TestRandomOpsAcrossReopens(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentSize: 4 << 10}
			s := open(t, dir, opts)
			defer func() { s.Close() }()
			rng := rand.New(rand.NewSource(seed))
			models := map[uint64]*model{}
			get := func(id uint64) *model {
				m, ok := models[id]
				if !ok {
					m = &model{entries: map[uint64]string{}, kv: map[string]string{}}
					models[id] = m
				}
				return m
			}
			for step := 0; step < 1500; step++ {
				id := uint64(rng.Intn(5) + 1)
				l := s.Log(id)
				m := get(id)
				lo, hi := m.bounds()
				switch op := rng.Intn(20); {
				case op < 12: // append a run
					next := hi + 1
					if hi == 0 {
						next = uint64(rng.Intn(3) + 1)
					}
					var batch []*raft.Log
					for n := rng.Intn(4) + 1; n > 0; n-- {
						d := fmt.Sprintf("g%d-%d-%d-%s", id, next, step, bytes.Repeat([]byte{'x'}, rng.Intn(300)))
						batch = append(batch, entry(next, 1, d))
						m.entries[next] = d
						next++
					}
					if err := l.StoreLogs(batch); err != nil {
						t.Fatal(err)
					}
				case op < 14 && hi > 0: // suffix truncation
					from := lo + uint64(rng.Int63n(int64(hi-lo+1)))
					if err := l.DeleteRange(from, hi); err != nil {
						t.Fatal(err)
					}
					for i := from; i <= hi; i++ {
						delete(m.entries, i)
					}
				case op < 17 && hi > 0: // prefix compaction
					to := lo + uint64(rng.Int63n(int64(hi-lo+1)))
					if err := l.DeleteRange(lo, to); err != nil {
						t.Fatal(err)
					}
					for i := lo; i <= to; i++ {
						delete(m.entries, i)
					}
				case op < 19:
					k, v := fmt.Sprintf("k%d", rng.Intn(3)), fmt.Sprintf("v%d", step)
					if err := l.Set([]byte(k), []byte(v)); err != nil {
						t.Fatal(err)
					}
					m.kv[k] = v
				default:
					if id == 1 {
						continue // group 1 stays, pinning old segments
					}
					if err := l.Drop(); err != nil {
						t.Fatal(err)
					}
					delete(models, id)
				}
				if step%100 == 99 {
					check(t, s, models)
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					s = open(t, dir, opts)
					check(t, s, models)
				}
			}
			t.Logf("stats %+v", s.Stats())
			if n := s.Stats().Segments; n > 60 {
				t.Errorf("%d segments kept: garbage collection is not working", n)
			}
		})
	}
}

func TestGroupsAreIsolated(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	a, b := s.Log(1), s.Log(2)
	for i := uint64(1); i <= 10; i++ {
		if err := a.StoreLog(entry(i, 1, fmt.Sprintf("a%d", i))); err != nil {
			t.Fatal(err)
		}
		if err := b.StoreLog(entry(i, 1, fmt.Sprintf("b%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	// A snapshot install on group 1 clears its log and continues after
	// the snapshot index.
	if err := a.DeleteRange(1, 10); err != nil {
		t.Fatal(err)
	}
	if err := a.StoreLogs([]*raft.Log{entry(50, 2, "a50"), entry(51, 2, "a51")}); err != nil {
		t.Fatal(err)
	}
	// A write after a gap starts afresh (monotonic store).
	if err := a.StoreLog(entry(60, 2, "a60")); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]*model{
		1: {entries: map[uint64]string{60: "a60"}, kv: map[string]string{}},
		2: {entries: map[uint64]string{}, kv: map[string]string{"CurrentTerm": "\x00\x00\x00\x00\x00\x00\x00\x07"}},
	}
	for i := uint64(1); i <= 10; i++ {
		want[2].entries[i] = fmt.Sprintf("b%d", i)
	}
	check(t, s, want)
	if err := a.DeleteRange(1, 59); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteRange(3, 4); !errors.Is(err, ErrMiddleDelete) {
		t.Fatalf("middle delete: %v", err)
	}
	if err := a.Drop(); err != nil {
		t.Fatal(err)
	}
	delete(want, 1)
	check(t, s, want)
	s.Close()
	s = open(t, dir, Options{})
	defer s.Close()
	check(t, s, want)
	if v, err := s.Log(2).GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("CurrentTerm %d, %v", v, err)
	}
	if _, err := s.Log(1).GetUint64([]byte("CurrentTerm")); err == nil {
		t.Fatal("dropped group kept its stable keys")
	}
}

// TestTornTailIsCut damages the end of the newest segment in the ways a
// crash can (cut mid-record, garbage, zero fill) and checks that reopening
// keeps every complete record, drops the torn one, and appends after it.
func TestTornTailIsCut(t *testing.T) {
	damage := map[string]func(b []byte) []byte{
		"cut mid-record":   func(b []byte) []byte { return b[:len(b)-7] },
		"flipped bit":      func(b []byte) []byte { b[len(b)-3] ^= 0x10; return b },
		"zero fill":        func(b []byte) []byte { return append(b, make([]byte, 4096)...) },
		"garbage appended": func(b []byte) []byte { return append(b, 0xff, 0xff, 0, 0, 1, 2, 3, 4, 5, 6) },
	}
	for name, hurt := range damage {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, Options{})
			l := s.Log(9)
			for i := uint64(1); i <= 5; i++ {
				if err := l.StoreLog(entry(i, 1, fmt.Sprintf("e%d", i))); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			ids, _ := listSegments(dir)
			path := filepath.Join(dir, segName(ids[len(ids)-1]))
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, hurt(b), 0o644); err != nil {
				t.Fatal(err)
			}
			s = open(t, dir, Options{})
			last, _ := s.Log(9).LastIndex()
			want := map[uint64]string{}
			for i := uint64(1); i <= last; i++ {
				want[i] = fmt.Sprintf("e%d", i)
			}
			if last < 4 || (name != "cut mid-record" && name != "flipped bit" && last != 5) {
				t.Fatalf("last index %d after %s", last, name)
			}
			check(t, s, map[uint64]*model{9: {entries: want, kv: map[string]string{}}})
			if err := s.Log(9).StoreLog(entry(last+1, 2, "after")); err != nil {
				t.Fatal(err)
			}
			want[last+1] = "after"
			s.Close()
			s = open(t, dir, Options{})
			defer s.Close()
			check(t, s, map[uint64]*model{9: {entries: want, kv: map[string]string{}}})
		})
	}
}

func TestCorruptionBeforeTheTailIsAnError(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{SegmentSize: 256})
	for i := uint64(1); i <= 20; i++ {
		if err := s.Log(1).StoreLog(entry(i, 1, string(bytes.Repeat([]byte{'y'}, 100)))); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	ids, _ := listSegments(dir)
	path := filepath.Join(dir, segName(ids[0]))
	b, _ := os.ReadFile(path)
	b[len(b)-5] ^= 1
	os.WriteFile(path, b, 0o644)
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with a corrupt older segment: %v", err)
	}
}

// TestGroupCommit checks that concurrent appends of many groups share
// fdatasyncs.
func TestGroupCommit(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	defer s.Close()
	const groups, per = 16, 50
	before := s.Stats().Syncs
	var wg sync.WaitGroup
	for g := uint64(1); g <= groups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= per; i++ {
				if err := s.Log(g).StoreLog(entry(i, 1, "data")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	syncs := s.Stats().Syncs - before
	t.Logf("%d appends, %d syncs", groups*per, syncs)
	if syncs >= groups*per/2 {
		t.Errorf("%d syncs for %d concurrent appends: not group-committed", syncs, groups*per)
	}
}

func TestClosedStoreRefusesWrites(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	s.Close()
	if err := s.Log(1).StoreLog(entry(1, 1, "x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// TestStopDuringConcurrentAppends: with many groups appending (the
// writers handing the write of each group commit to one another), Close
// or Fail at any moment lets every append return — written, or ErrClosed
// / ErrFailed — and after a reopen every append that returned nil is
// there.
func TestStopDuringConcurrentAppends(t *testing.T) {
	for _, stop := range []string{"close", "fail"} {
		for round := 0; round < 5; round++ {
			t.Run(fmt.Sprintf("%s-%d", stop, round), func(t *testing.T) {
				dir := t.TempDir()
				s := open(t, dir, Options{})
				const groups = 12
				acked := make([]uint64, groups+1) // last acknowledged index per group
				var wg sync.WaitGroup
				started := make(chan struct{}, groups)
				for g := uint64(1); g <= groups; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := uint64(1); ; i++ {
							err := s.Log(g).StoreLog(entry(i, 1, fmt.Sprintf("g%d-%d", g, i)))
							if i == 3 {
								started <- struct{}{}
							}
							if err != nil {
								if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFailed) {
									t.Errorf("group %d entry %d: %v", g, i, err)
								}
								if i < 3 {
									started <- struct{}{}
								}
								return
							}
							acked[g] = i
						}
					}()
				}
				for range groups {
					<-started
				}
				time.Sleep(time.Duration(round) * time.Millisecond)
				if stop == "fail" {
					s.Fail()
				}
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				if stop == "close" {
					s.Close()
				}
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("appends still blocked 30 s after the store stopped")
				}
				s.Close()
				r := open(t, dir, Options{})
				defer r.Close()
				for g := uint64(1); g <= groups; g++ {
					if acked[g] == 0 {
						continue
					}
					var e raft.Log
					if err := r.Log(g).GetLog(acked[g], &e); err != nil || string(e.Data) != fmt.Sprintf("g%d-%d", g, acked[g]) {
						t.Fatalf("group %d: acknowledged entry %d after reopen: %q, %v", g, acked[g], e.Data, err)
					}
				}
			})
		}
	}
}

// TestRaftOnSharedLog runs a real single-node raft group per view over one
// store and reopens them.
func TestRaftOnSharedLog(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	run := func(id uint64, bootstrap bool, n int) {
		t.Helper()
		l := s.Log(id)
		cfg := raft.DefaultConfig()
		cfg.LocalID = "a"
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		cfg.LogOutput = os.Stderr
		cfg.LogLevel = "ERROR"
		snaps := raft.NewInmemSnapshotStore()
		addr, trans := raft.NewInmemTransport("a")
		if bootstrap {
			if err := raft.BootstrapCluster(cfg, l, l, snaps, trans, raft.Configuration{Servers: []raft.Server{{ID: "a", Address: addr}}}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := raft.NewRaft(cfg, &countFSM{}, l, l, snaps, trans)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Shutdown()
		deadline := time.Now().Add(5 * time.Second)
		for r.State() != raft.Leader && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		for i := 0; i < n; i++ {
			if err := r.Apply([]byte("x"), time.Second).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(1, true, 10)
	run(2, true, 5)
	last1, _ := s.Log(1).LastIndex()
	s.Close()
	s = open(t, dir, Options{})
	defer s.Close()
	if l, _ := s.Log(1).LastIndex(); l != last1 {
		t.Fatalf("group 1 last %d after reopen, want %d", l, last1)
	}
	run(1, false, 3)
	if l, _ := s.Log(1).LastIndex(); l <= last1+3 {
		t.Fatalf("group 1 last %d, want > %d", l, last1+3)
	}
}

type countFSM struct{ n int }

func (f *countFSM) Apply(*raft.Log) any                 { f.n++; return nil }
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (f *countFSM) Restore(r io.ReadCloser) error       { return r.Close() }

// TestLargeAppendSpansRecords checks that a StoreLogs bigger than one
// record's target is split into several records and reads back whole.
func TestLargeAppendSpansRecords(t *testing.T) {
	defer func(v int) { recordTarget = v }(recordTarget)
	recordTarget = 1000
	dir := t.TempDir()
	s := open(t, dir, Options{})
	want := map[uint64]string{}
	var batch []*raft.Log
	for i := uint64(1); i <= 40; i++ {
		d := fmt.Sprintf("%d-%s", i, bytes.Repeat([]byte{'q'}, 300))
		batch = append(batch, entry(i, 1, d))
		want[i] = d
	}
	if err := s.Log(1).StoreLogs(batch); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Records; n < 10 {
		t.Fatalf("%d records for 12 KB of entries with a 1 KB target", n)
	}
	s.Close()
	s = open(t, dir, Options{})
	defer s.Close()
	check(t, s, map[uint64]*model{1: {entries: want, kv: map[string]string{}}})
}

// TestSetVote: a vote is the three keys hashicorp/raft's RequestVote
// writes, in one sync, and it is there after a reopen.
func TestSetVote(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	l := s.Log(7)
	if err := l.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	before := s.Stats().Syncs
	if err := l.SetVote(5, []byte("127.0.0.1:7000")); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Syncs - before; n != 1 {
		t.Errorf("a vote took %d syncs, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, Options{})
	defer s.Close()
	l = s.Log(7)
	for _, k := range []string{"CurrentTerm", "LastVoteTerm"} {
		if v, err := l.GetUint64([]byte(k)); err != nil || v != 5 {
			t.Errorf("%s after reopen = %d, %v; want 5", k, v, err)
		}
	}
	if v, err := l.Get([]byte("LastVoteCand")); err != nil || string(v) != "127.0.0.1:7000" {
		t.Errorf("LastVoteCand after reopen = %q, %v", v, err)
	}
}

// TestObserveSync: every group commit is reported to Options.ObserveSync,
// once per sync (the Stats count), with its duration.
func TestObserveSync(t *testing.T) {
	var mu sync.Mutex
	var n int
	var total time.Duration
	s := open(t, t.TempDir(), Options{ObserveSync: func(_ time.Time, d time.Duration) {
		mu.Lock()
		n++
		total += d
		mu.Unlock()
	}})
	defer s.Close()
	before := s.Stats().Syncs
	for i := uint64(1); i <= 5; i++ {
		if err := s.Log(1).StoreLog(entry(i, 1, "data")); err != nil {
			t.Fatal(err)
		}
	}
	syncs := s.Stats().Syncs - before
	// The last sync is observed after its writer was released: poll.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got, sum := n, total
		mu.Unlock()
		if uint64(got) == syncs && syncs > 0 && sum > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("observed %d syncs (%v in all), the store made %d", got, sum, syncs)
		}
		time.Sleep(time.Millisecond)
	}
}
